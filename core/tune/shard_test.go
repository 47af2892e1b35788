package tune

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// TestShardsMergeToTheWholeSearch: a space split between 2, 3 and 5
// searches, each shard's Partial merged into the first, holds every
// accepted candidate in candidate order and ranks exactly as the whole
// search does (every field of the result, refusals with their first
// example included), and a Merge of a damaged Partial is refused
// whole without changing the search.
func TestShardsMergeToTheWholeSearch(t *testing.T) {
	m := qwenDFlash(t)
	e := plan.Engine{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144, TensorParallelSize: 2}
	// TP 3 does not divide the model's heads: vLLM refuses those
	// candidates, in several shards.
	sp := Space{Model: m, P: e, D: e, Request: xfer.Request{PromptTokens: 1024},
		Ranges: Ranges{TPPairs: "2:4,3:3,4:4,2:3,2:2", BlockSizes: "0,16:320:48,1008", MinGroupLayers: "2,3", MaxBatched: "16,8192", KVCacheDTypes: "auto,fp8"}}
	whole, err := Run(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(whole)
	if whole.Feasible == 0 || len(whole.Refused) < 2 {
		t.Fatalf("the space should accept and refuse: %+v", whole.Refused)
	}
	for _, shards := range []int{2, 3, 5} {
		var first *Search
		for i := 0; i < shards; i++ {
			sp.Shard, sp.Shards = i, shards
			s, err := NewSearch(sp)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Step(context.Background(), 1<<30); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = s
				continue
			}
			if err := first.Merge(s.Partial()); err != nil {
				t.Fatal(err)
			}
		}
		res := first.Result()
		for i := 1; i < len(res.All); i++ {
			if res.All[i].Index <= res.All[i-1].Index {
				t.Fatalf("%d shards: merged candidates out of order at %d: %d after %d", shards, i, res.All[i].Index, res.All[i-1].Index)
			}
		}
		if len(res.All) != whole.Feasible {
			t.Errorf("%d shards: %d accepted, whole %d", shards, len(res.All), whole.Feasible)
		}
		got, _ := json.Marshal(res)
		if string(got) != string(want) {
			t.Errorf("%d shards merged rank differently:\n%s\nwhole:\n%s", shards, got, want)
		}
	}

	sp.Shard, sp.Shards = 1, 2
	other, _ := NewSearch(sp)
	other.Step(context.Background(), 1<<30)
	part := other.Partial()
	sp.Shard = 0
	s, _ := NewSearch(sp)
	s.Step(context.Background(), 1<<30)
	before, _ := json.Marshal(s.Result())
	for name, b := range map[string][]byte{
		"empty":     nil,
		"not one":   []byte("hello"),
		"truncated": part[:len(part)-3],
		"longer":    append(append([]byte(nil), part...), 0),
		"bad index": func() []byte {
			b := append([]byte(nil), part...)
			copy(b[len(b)-partialRecord:], []byte{0xff, 0xff, 0xff, 0x7f})
			return b
		}(),
	} {
		if err := s.Merge(b); err == nil || !strings.Contains(err.Error(), "partial") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if after, _ := json.Marshal(s.Result()); string(after) != string(before) {
		t.Errorf("a refused Merge changed the search")
	}
}
