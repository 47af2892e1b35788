package app

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/tune"
)

// TestTuneJob: the search the Tune worker runs from the page's URL query is
// the search the view's settings describe: its outcome ranks what
// tune.Run ranks for the same space, survives the trip to the page as
// JSON, and a cancelled search says so and ranks only what it evaluated.
// A query the app cannot read is refused with the field at fault.
func TestTuneJob(t *testing.T) {
	cat := catalog.Bundled()
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
	// The outcome ranks what tune.Run ranks.
	if out.Done != want.Total || out.Total != want.Total || out.Canceled || out.Result.Feasible != want.Feasible || len(out.Result.Top) != len(want.Top) {
		t.Fatalf("outcome %d of %d (canceled %v), %d feasible, %d top; tune.Run: %d, %d feasible, %d top",
			out.Done, out.Total, out.Canceled, out.Result.Feasible, len(out.Result.Top), want.Total, want.Feasible, len(want.Top))
	}
	for i := range want.Top {
		g, w := out.Result.Top[i], want.Top[i]
		if g.Candidate != w.Candidate || g.DKVTokens != w.DKVTokens || g.Descs != w.Descs || g.DServe != w.DServe {
			t.Errorf("top %d: %+v, tune.Run %+v", i, g, w)
		}
	}
	if (out.Result.Dividing == nil) != (want.Dividing == nil) || out.Result.Dividing != nil && out.Result.Dividing.Candidate != want.Dividing.Candidate {
		t.Errorf("dividing %+v, tune.Run %+v", out.Result.Dividing, want.Dividing)
	}

	// What travels to the page: the figures and the best candidates' flags
	// as JSON (not the result), the markup and the chart beside it.
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 16<<10 {
		t.Errorf("the JSON the page decodes is %d bytes: the result travels in it", len(b))
	}
	var got TuneOutcome
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	// The page leaves the flags in the JSON until a candidate is opened.
	lazy := TuneOutcome{openJSON: string(b)}
	if open, err := lazy.OpenList(); err != nil || !reflect.DeepEqual(open, got.Open) || lazy.openJSON != "" {
		t.Errorf("OpenList of the worker's answer: %d candidates (%v), want the %d decoded whole", len(open), err, len(got.Open))
	}
	bad := TuneOutcome{openJSON: `{"open":[{"tp":7}`}
	if _, err := bad.OpenList(); err == nil || !strings.Contains(err.Error(), "search worker's answer") {
		t.Errorf("OpenList of a cut answer: %v", err)
	}
	if got.Done != out.Done || got.Total != out.Total || len(got.Open) != len(want.Top) || got.Chart != "" || got.TableHTML != "" || got.Result != nil {
		t.Fatalf("after the trip: %d of %d, %d to open, %d chart bytes, %d table bytes, result %v", got.Done, got.Total, len(got.Open), len(got.Chart), len(got.TableHTML), got.Result != nil)
	}
	// Candidates of the same plans and transfer share one row (the first
	// of them), which says how many it stands for.
	same := func(x tune.Scored) string {
		return fmt.Sprint(x.TP, x.PBlock, x.DBlock, x.PGroups, x.DGroups, x.DKVTokens, x.PKVTokens, x.PaddingBytes, x.Descs, x.Merged, x.PagesDivide, x.Connector)
	}
	rows := map[string]bool{}
	for i, x := range want.Top {
		if got.Open[i] != x.Candidate {
			t.Errorf("open %d: %+v, tune.Run's top %+v", i, got.Open[i], x.Candidate)
		}
		at := strings.Index(out.TableHTML, fmt.Sprintf(`data-index="%d"`, x.Index))
		if rows[same(x)] {
			if at >= 0 {
				t.Errorf("candidate %d has its own row, though an earlier one has the same plans", x.Index)
			}
			continue
		}
		rows[same(x)] = true
		// The table's row i opens candidate i and shows its figures.
		row := out.TableHTML[at:]
		row = row[:strings.Index(row, "</tr>")]
		for _, cell := range []string{"<td>" + commas(x.DKVTokens) + "</td>", "<td>" + commas(int64(x.Descs)) + "</td>", fmt.Sprintf(`data-row="%d"`, i)} {
			if !strings.Contains(row, cell) {
				t.Errorf("table row of candidate %d lacks %s", x.Index, cell)
			}
		}
	}
	if strings.Count(out.TableHTML, `data-testid="tune-row"`) != len(rows) {
		t.Errorf("the table lists %d rows, want %d (the distinct plans of %d candidates)", strings.Count(out.TableHTML, `data-testid="tune-row"`), len(rows), len(want.Top))
	}
	if !strings.Contains(out.SummaryHTML, commas(int64(want.Feasible))+" accepted") {
		t.Errorf("the summary does not count %d accepted: %s", want.Feasible, out.SummaryHTML)
	}
	if want.Dividing != nil && !strings.Contains(out.SummaryHTML, fmt.Sprintf(`data-block="%d"`, want.Dividing.DBlock)) {
		t.Errorf("the summary does not name D block %d: %s", want.Dividing.DBlock, out.SummaryHTML)
	}
	if out.Chart == "" {
		t.Error("no chart")
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
