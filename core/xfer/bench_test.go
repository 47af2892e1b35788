package xfer

import (
	"github.com/kvscope/kvscope/core/vllm"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
)

// BenchmarkPairs generates every descriptor pair of a 262,144-token request
// of Qwen3.6-35B-A3B + DFlash from P TP2 to D TP4: with each engine's own
// plan (pages of 1184 and 304 tokens: runs split at both boundaries) and
// with the TP-invariant plan (1184 and 592: they divide). Each has its
// baseline beside it, which appends as many zero pairs as it generated to
// a preallocated slice, the floor of any generator. (The baseline was
// once one, at the count of the last plan measured, the invariant one's
// 37,600 pairs: a third of the 108,512 the own plans' generator is read
// against, cheaper a pair in a smaller allocation.)
func BenchmarkPairs(b *testing.B) {
	m := seedModel(b)
	pe := plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7}
	de := pe
	de.TensorParallelSize = 4
	c, _ := ParseConnector("nixl")
	// appendZeros is the baseline: n zero pairs appended to a slice made
	// for them, at the same count as the generator it is read against.
	appendZeros := func(n int) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out := make([]Pair, 0, n)
				for i := 0; i < n; i++ {
					out = append(out, Pair{})
				}
				_ = out
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		}
	}
	for _, choice := range []PlanChoice{IndependentPlans, InvariantPlans} {
		r, err := Prepare(Setup{Model: m, P: pe, D: de, Connector: c, Plans: choice})
		if err != nil {
			b.Fatal(err)
		}
		req := Request{PromptTokens: 262144}
		first, err := r.Compute(req, true)
		if err != nil || first.Rejection != nil {
			b.Fatal(err, first.Rejection)
		}
		pairs := first.Descs
		b.Run(string(choice), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x, err := r.Compute(req, true)
				if err != nil || x.Rejection != nil || x.Descs != pairs {
					b.Fatal(err, x.Rejection, x.Descs)
				}
			}
			b.ReportMetric(float64(pairs)*float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		})
		b.Run(string(choice)+"-baseline-append", appendZeros(pairs))
	}
}
