package tune

import (
	"context"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// BenchmarkTune searches Qwen3.6-35B-A3B + DFlash (P TP2 -> D TP4, branch
// profile) over 2 TP pairs x 32 D block sizes x 2 minimum group sizes x 2
// batched-token limits (256 candidates), reporting candidates per second:
// "search" is a Search (one Planner whose ranks last a run, D plans into
// one reused Plan, transfers counted once per pair of plan geometries,
// registrations reused); "independent", the
// baseline in the same run, plans both engines of every candidate afresh
// with plan.New and computes its transfer whole, as the other commands do
// for one configuration.
func BenchmarkTune(b *testing.B) {
	m := modeltest.Load(b, "Qwen__Qwen3.6-35B-A3B")
	d := modeltest.Load(b, "z-lab__Qwen3.6-35B-A3B-DFlash")
	m, err := m.WithDraft(d)
	if err != nil {
		b.Fatal(err)
	}
	p := plan.Engine{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144, TensorParallelSize: 2}
	de := p
	de.TensorParallelSize = 4
	sp := Space{Model: m, P: p, D: de, Request: xfer.Request{PromptTokens: 1024},
		Ranges: Ranges{TPPairs: "2:4,4:4", BlockSizes: "16:512:16", MinGroupLayers: "2,3", MaxBatched: "4096,8192"}}
	probe, err := NewSearch(sp)
	if err != nil {
		b.Fatal(err)
	}
	_, total := probe.Progress()
	b.Run("search", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Run(context.Background(), sp); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "candidates/s")
	})
	b.Run("independent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, c := range probe.candidates {
				pe, de := probe.Engines(c)
				pp, err1 := plan.New(m, pe)
				dp, err2 := plan.New(m, de)
				if err1 != nil || err2 != nil {
					continue // refused, as the search refuses it
				}
				if _, err := xfer.Compute(m, pp, dp, sp.Request, xfer.Options{Connector: probe.conn[c.Connector], Output: xfer.CountPairs}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(total*b.N)/b.Elapsed().Seconds(), "candidates/s")
	})
}

// BenchmarkTuneBrowserGrid runs the search the browser test times
// (server's TestTuneView): Qwen3.6-35B-A3B + DFlash, P TP2 -> D TP4,
// 10,240 candidates over 5 TP pairs x 128 D block sizes x 2 minimum group
// sizes x 2 selectors x 2 batched-token limits x 2 KV cache dtypes, so
// that its WebAssembly figure has a native one to be read against.
func BenchmarkTuneBrowserGrid(b *testing.B) {
	m := modeltest.Seed(b)
	p := plan.Engine{VLLMVersion: "pr58207", NumSpeculativeTokens: 7, MaxModelLen: 262144, TensorParallelSize: 2}
	de := p
	de.TensorParallelSize = 4
	sp := Space{Model: m, P: p, D: de, Request: xfer.Request{PromptTokens: 1024},
		Ranges: Ranges{TPPairs: "2:2,2:4,2:8,4:4,4:8", BlockSizes: "16:2048:16", MinGroupLayers: "2,3", Selectors: "default,padding-bytes",
			MaxBatched: "4096,8192", KVCacheDTypes: "auto,fp8"}}
	b.ReportAllocs()
	for b.Loop() {
		res, err := Run(context.Background(), sp)
		if err != nil {
			b.Fatal(err)
		}
		if res.Evaluated != 10240 {
			b.Fatalf("evaluated %d candidates, want 10,240", res.Evaluated)
		}
	}
	b.ReportMetric(float64(10240*b.N)/b.Elapsed().Seconds(), "candidates/s")
}
