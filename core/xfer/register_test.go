package xfer

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// TestRegisterAllIntoMatchesRegisterAll: registrations built into the
// memory of earlier ones (of other plans, TP sizes and layouts, as a search
// recycles them) are exactly what RegisterAll builds afresh, rank by rank,
// down to every segment and the name index.
func TestRegisterAllIntoMatchesRegisterAll(t *testing.T) {
	qwen := modeltest.Seed(t)
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	type step struct {
		name  string
		e     plan.Engine
		qwen  bool
		side  Side
		split CacheLayout
	}
	base := plan.Engine{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144}
	var steps []step
	for _, tp := range []int{8, 1, 4, 2, 8} { // a larger TP first: later ones reuse fewer registrations
		for _, bs := range []int{0, 1024} {
			e := base
			e.TensorParallelSize, e.BlockSize = tp, bs
			steps = append(steps, step{fmt.Sprintf("qwen TP%d block %d", tp, bs), e, true, D, ""})
		}
	}
	for _, tp := range []int{2, 4} {
		e := plan.Engine{MaxModelLen: 32768, TensorParallelSize: tp}
		steps = append(steps, step{fmt.Sprintf("gpt-oss TP%d split", tp), e, false, P, SplitKV}, step{fmt.Sprintf("gpt-oss TP%d blocks-first", tp), e, false, D, BlocksFirst})
	}
	var old []*Registration
	for _, st := range steps {
		m := gpt
		if st.qwen {
			m = qwen
		}
		p, err := plan.New(m, st.e)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		want, err := RegisterAll(m, p, st.side, st.split, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RegisterAllInto(old, m, p, st.side, st.split, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d registrations, want %d", st.name, len(got), len(want))
		}
		for r := range want {
			a, _ := json.Marshal(got[r])
			b, _ := json.Marshal(want[r])
			if string(a) != string(b) {
				t.Errorf("%s rank %d: built into old memory differs from a fresh registration", st.name, r)
			}
			for _, l := range want[r].Layers {
				gl, ok := got[r].Layer(l.Name)
				if !ok || gl.Name != l.Name || gl.kvHeads != l.kvHeads {
					t.Errorf("%s rank %d: layer %s not found by name in the reused registration", st.name, r, l.Name)
					break
				}
			}
			if got[r].Plan() != p {
				t.Errorf("%s rank %d: plan not the one registered", st.name, r)
			}
		}
		if len(got[0].byName) != len(want[0].byName) {
			t.Errorf("%s: name index holds %d layers, want %d (stale names kept)", st.name, len(got[0].byName), len(want[0].byName))
		}
		old = got
	}
}
