package xfer

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/vllm"

	"github.com/kvscope/kvscope/core/plan"
)

// BenchmarkPairs generates every descriptor pair of a 262,144-token request
// of Qwen3.6-35B-A3B + DFlash from P TP2 to D TP4 (PD.Compute, pairs kept):
// with each engine's own plan (pages of 1184 and 304 tokens: runs split at
// both boundaries) and with the TP-invariant plan (1184 and 592: they
// divide). Its baseline appends as many zero pairs as the generator writes
// to a slice made for them, the floor of any generator. BENCHMARKS.md
// holds the figures.
//
// The two run interleaved, a block of runs of each per iteration in
// alternating order, each run after a collection (untimed), so that the
// machine's drift falls on both alike; the first run of a block is not
// counted (it meets the memory the other side left). The figures are
// medians over the counted runs: "x-baseline" the baseline's time over the
// generator's, "gen-ns" and "base-ns" each one's; "x-best" is the same
// ratio of each side's fastest run, the least disturbed. Two modes:
// "gc-on" leaves the collector running as it does in use (where its cycles
// fall decides much of either's time: pairs hold pointers); "gc-held"
// holds it off while each runs, the work alone. A third mode, "as-filed",
// times each side back to back as issue 13 measured it when filed. The
// generator writes a long transfer's rank pairs on as many workers as
// GOMAXPROCS allows; -cpu 1 measures one.
func BenchmarkPairs(b *testing.B) {
	for _, choice := range []PlanChoice{IndependentPlans, InvariantPlans} {
		r := benchDeployment(b, choice)
		req := Request{PromptTokens: 262144}
		first, err := r.Compute(req, true)
		if err != nil || first.Rejection != nil {
			b.Fatal(err, first.Rejection)
		}
		n := first.Descs
		gen := func() {
			x, err := r.Compute(req, true)
			if err != nil || x.Rejection != nil || x.Descs != n {
				b.Fatal(err, x.Rejection, x.Descs)
			}
		}
		base := func() {
			out := make([]Pair, 0, n)
			for range n {
				out = append(out, Pair{})
			}
			if len(out) != n {
				b.Fatal(len(out))
			}
		}
		for _, held := range []bool{false, true} {
			mode := "gc-on"
			if held {
				mode = "gc-held"
			}
			b.Run(string(choice)+"/"+mode, func(b *testing.B) {
				var gens, bases []float64
				percent := debug.SetGCPercent(-1) // the setting to go back to
				debug.SetGCPercent(percent)
				i := 0
				for b.Loop() {
					for k := range 2 {
						side, times := gen, &gens
						if (i+k)%2 == 1 {
							side, times = base, &bases
						}
						// A block of runs of one side, the first a warm-up:
						// it meets the memory the other side left.
						for run := range blockRuns {
							runtime.GC()
							if held {
								debug.SetGCPercent(-1)
							}
							at := time.Now()
							side()
							if took := time.Since(at); run > 0 {
								*times = append(*times, float64(took.Nanoseconds()))
							}
							if held {
								debug.SetGCPercent(percent)
							}
						}
					}
					i++
				}
				g, bs := median(gens), median(bases)
				b.ReportMetric(bs/g, "x-baseline")
				b.ReportMetric(slices.Min(bases)/slices.Min(gens), "x-best")
				b.ReportMetric(g, "gen-ns")
				b.ReportMetric(bs, "base-ns")
				b.ReportMetric(float64(n)/g*1e9, "pairs/s")
			})
		}
		// As issue 13 measured it when it was filed: each side run back to
		// back with the collector running and no collection forced, the
		// two sides' rates compared (each against its own pair count).
		b.Run(string(choice)+"/as-filed", func(b *testing.B) {
			var g, bs time.Duration
			for b.Loop() {
				at := time.Now()
				for range filedRuns {
					gen()
				}
				g += time.Since(at)
				at = time.Now()
				for range filedRuns {
					base()
				}
				bs += time.Since(at)
			}
			b.ReportMetric(float64(bs)/float64(g), "x-baseline")
			b.ReportMetric(float64(n)*float64(filedRuns*b.N)/g.Seconds(), "pairs/s")
		})
	}
}

// benchDeployment prepares the benchmarks' deployment: Qwen3.6-35B-A3B +
// DFlash (7 speculative tokens, 262,144-token context) from P TP2 to D
// TP4 over NIXL, with the plans choice names.
func benchDeployment(b *testing.B, choice PlanChoice) *PD {
	m := seedModel(b)
	pe := plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7}
	de := pe
	de.TensorParallelSize = 4
	c, _ := ParseConnector("nixl")
	r, err := Prepare(Setup{Model: m, P: pe, D: de, Connector: c, Plans: choice})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// filedRuns is how many runs of a side the as-filed mode times at once.
const filedRuns = 8

// blockRuns is how many times BenchmarkPairs runs one side before the
// other, the first untimed.
const blockRuns = 3

// median is the middle of xs (the mean of the two middle ones for an even
// count); it sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// BenchmarkRequests computes the transfer of a 2,048-token and of a
// 262,144-token request of Qwen3.6-35B-A3B + DFlash from P TP2 to D TP4,
// with each engine's own plan (2,080 and 108,512 pairs) and with the
// TP-invariant plan (1,040 and 39,872), the pairs kept or only tallied (as
// `kvscope pd` and POST /api/pd do without --pairs). In the short request
// the per-request work (608 jobs of layer segments and rank pairs, 480 of
// them state segments of one pair each) outweighs the writing.
func BenchmarkRequests(b *testing.B) {
	for _, choice := range []PlanChoice{IndependentPlans, InvariantPlans} {
		r := benchDeployment(b, choice)
		for _, tokens := range []int{2048, 262144} {
			req := Request{PromptTokens: tokens}
			for _, keep := range []bool{true, false} {
				mode := "tallied"
				if keep {
					mode = "kept"
				}
				b.Run(fmt.Sprintf("%s/%d/%s", choice, tokens, mode), func(b *testing.B) {
					b.ReportAllocs()
					descs := 0
					for b.Loop() {
						x, err := r.Compute(req, keep)
						if err != nil || x.Rejection != nil {
							b.Fatal(err, x.Rejection)
						}
						descs = x.Descs
					}
					b.ReportMetric(float64(descs), "pairs")
				})
			}
		}
	}
}
