package xfer

import (
	"github.com/kvscope/kvscope/core/vllm"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
)

// BenchmarkPairs generates every descriptor pair of a 262,144-token request
// of Qwen3.6-35B-A3B + DFlash from P TP2 to D TP4: with each engine's own
// plan (pages of 1184 and 304 tokens: runs split at both boundaries) and
// with the TP-invariant plan (1184 and 592: they divide). The baseline
// appends the same number of zero pairs to a preallocated slice, the
// floor of any generator.
func BenchmarkPairs(b *testing.B) {
	m := seedModel(b)
	pe := plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7}
	de := pe
	de.TensorParallelSize = 4
	c, _ := ParseConnector("nixl")
	var pairs int
	for _, choice := range []PlanChoice{IndependentPlans, InvariantPlans} {
		r, err := Prepare(Setup{Model: m, P: pe, D: de, Connector: c, Plans: choice})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(choice), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x, err := r.Compute(Request{PromptTokens: 262144}, true)
				if err != nil || x.Rejection != nil {
					b.Fatal(err, x.Rejection)
				}
				pairs = x.Descs
			}
			b.ReportMetric(float64(pairs)*float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		})
	}
	b.Run("baseline-append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out := make([]Pair, 0, pairs)
			for i := 0; i < pairs; i++ {
				out = append(out, Pair{})
			}
			_ = out
		}
		b.ReportMetric(float64(pairs)*float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	})
}
