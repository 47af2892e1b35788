package plan

import (
	"fmt"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
)

// TestCountChangesAgreesWithCompare: the count-only comparison the
// handshake uses says what Compare's list says, for plans that agree, that
// differ in block sizes only, in groups, and in models.
func TestCountChangesAgreesWithCompare(t *testing.T) {
	qwen := modeltest.Seed(t)
	gemma := modeltest.Load(t, "google__gemma-3-27b-it")
	var plans []*Plan
	for _, e := range []Engine{
		{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144, TensorParallelSize: 2},
		{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144, TensorParallelSize: 4},
		{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144, TensorParallelSize: 4, BlockSize: 1024},
		{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144, TensorParallelSize: 4, MinGroupLayers: 2},
	} {
		p, err := New(qwen, e)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	g, err := New(gemma, Engine{MaxModelLen: 32768})
	if err != nil {
		t.Fatal(err)
	}
	plans = append(plans, g)
	differing := 0
	for i, a := range plans {
		for j, b := range plans {
			d := Compare(a, b)
			c := CountChanges(a, b)
			moved := 0
			for _, ch := range d.Changes {
				if ch.FromGroup != ch.ToGroup || ch.FromSlot != ch.ToSlot {
					moved++
				}
			}
			layout, blocks, n := c.SameLayout, c.SameBlockSizes, c.Changed
			if layout != d.SameLayout || blocks != d.SameBlockSizes || n != len(d.Changes) || c.Moved != moved {
				t.Errorf("plans %d, %d: CountChanges %+v, Compare %v %v %d changes, %d moved", i, j, c, d.SameLayout, d.SameBlockSizes, len(d.Changes), moved)
			}
			if i == j && (n != 0 || !layout || !blocks) {
				t.Errorf("plan %d differs from itself: %s", i, fmt.Sprint(d))
			}
			if n > 0 {
				differing++
			}
		}
	}
	if differing == 0 {
		t.Fatal("no pair of plans differs: the test compares nothing")
	}
}
