package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/app/bundled"
	"github.com/kvscope/kvscope/core/tune"
)

// TestTuneJob: the search the Tune worker runs from the page's URL query is
// the search the view's settings describe: its outcome ranks what
// tune.Run ranks for the same space, survives the trip to the page as
// JSON, and a cancelled search says so and ranks only what it evaluated.
// A query the app cannot read is refused with the field at fault.
func TestTuneJob(t *testing.T) {
	cat := bundled.Catalog()
	s := DefaultSettings()
	s.Tune = TuneSettings{TPPairs: "2:4,4:4", BlockSizes: "0,32:512:32", MNBT: "4096,8192"}
	search, err := NewTuneSearch(s.Query().Encode(), cat, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := RunTune(context.Background(), search, time.Millisecond, time.Now, nil, nil)
	m, _, err := modelOf(s, cat)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := TuneSpace(s, m)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tune.Run(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var got TuneOutcome
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Done != want.Total || got.Total != want.Total || got.Canceled || got.Result.Feasible != want.Feasible || len(got.Result.Top) != len(want.Top) {
		t.Fatalf("outcome %d of %d (canceled %v), %d feasible, %d top; tune.Run: %d, %d feasible, %d top",
			got.Done, got.Total, got.Canceled, got.Result.Feasible, len(got.Result.Top), want.Total, want.Feasible, len(want.Top))
	}
	for i := range want.Top {
		g, w := got.Result.Top[i], want.Top[i]
		if g.Candidate != w.Candidate || g.DKVTokens != w.DKVTokens || g.Descs != w.Descs || g.DServe != w.DServe {
			t.Errorf("top %d: %+v, tune.Run %+v", i, g, w)
		}
	}
	if (got.Result.Dividing == nil) != (want.Dividing == nil) || got.Result.Dividing != nil && got.Result.Dividing.Candidate != want.Dividing.Candidate {
		t.Errorf("dividing %+v, tune.Run %+v", got.Result.Dividing, want.Dividing)
	}
	if out.Chart == "" || got.Chart != "" {
		t.Errorf("the chart travels beside the JSON: %d bytes, %d in it", len(out.Chart), len(got.Chart))
	}

	// Cancelled after the first slice.
	search, _ = NewTuneSearch(s.Query().Encode(), cat, 0, 1)
	ctx, cancel := context.WithCancel(context.Background())
	part := RunTune(ctx, search, time.Millisecond, time.Now, func(done, total int) { cancel() }, nil)
	if !part.Canceled || part.Done >= part.Total || part.Result.Evaluated != part.Done {
		t.Errorf("cancelled: %+v", part)
	}

	for _, c := range []struct{ query, want string }{
		{"model=no-such-model", "model"},
		{"p-tensor-parallel-size=zero", "p-tensor-parallel-size"},
		{"tune-block-sizes=64:16:16&model=Qwen/Qwen3-0.6B", "--block-sizes"},
		{"%zz", "query"},
	} {
		if _, err := NewTuneSearch(c.query, cat, 0, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want an error naming %s", c.query, err, c.want)
		}
	}
}
