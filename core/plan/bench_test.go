package plan

import (
	"fmt"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/vllm"
	"testing"
)

// BenchmarkPlan plans Qwen3.6-35B-A3B with its DFlash drafter (46 layers,
// 4 buckets) at TP 1, 2, 4 and 8: the work the browser redoes on every
// keystroke. gpt-oss-20b (24 layers, 2 buckets) runs in the same
// benchmark as a reference, so figures can be quoted as ratios.
func BenchmarkPlan(b *testing.B) {
	seed := withDraft(b, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	for _, tp := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("qwen3.6-35b-a3b+dflash/tp%d", tp), func(b *testing.B) {
			e := Engine{VLLMVersion: vllm.Branch, TensorParallelSize: tp, MaxModelLen: 262144, NumSpeculativeTokens: 7}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(seed, e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	gpt := modeltest.Load(b, "openai__gpt-oss-20b")
	b.Run("gpt-oss-20b/tp1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := New(gpt, Engine{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkInvariant plans P at TP2 and D at TP4 with one TP-invariant
// layout (four plans and a selector pass).
func BenchmarkInvariant(b *testing.B) {
	seed := withDraft(b, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	p := Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7}
	d := p
	d.TensorParallelSize = 4
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewInvariant(seed, p, d); err != nil {
			b.Fatal(err)
		}
	}
}
