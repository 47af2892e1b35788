package plan

import (
	"fmt"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/vllm"
)

// BenchmarkPlan plans Qwen3.6-35B-A3B with its DFlash drafter (46 layers,
// 4 buckets) at TP 1, 2, 4 and 8: the work the browser redoes on every
// keystroke. gpt-oss-20b (24 layers, 2 buckets) runs in the same
// benchmark as a reference, so figures can be quoted as ratios.
//
// Each engine runs four ways: New from scratch (<model>/tp<n>); a Planner
// prepared once outside the timer, whose cache holds the engine after the
// first call, as a search over one model's engines runs it
// (planner/<model>/tp<n>: the whole Plan); the same Planner planning into
// one Plan it reuses (into/<model>/tp<n>: PlanInto, the whole plan,
// allocating only its two capacity log lines); and its Summary
// (summary/<model>/tp<n>: the figures only, no allocation).
func BenchmarkPlan(b *testing.B) {
	seed := withDraft(b, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	gpt := modeltest.Load(b, "openai__gpt-oss-20b")
	type bench struct {
		name string
		m    *model.Model
		e    Engine
	}
	var cases []bench
	for _, tp := range []int{1, 2, 4, 8} {
		cases = append(cases, bench{fmt.Sprintf("qwen3.6-35b-a3b+dflash/tp%d", tp), seed,
			Engine{VLLMVersion: vllm.Branch, TensorParallelSize: tp, MaxModelLen: 262144, NumSpeculativeTokens: 7}})
	}
	cases = append(cases, bench{"gpt-oss-20b/tp1", gpt, Engine{}})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(c.m, c.e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, c := range cases {
		pl := prepared(b, c.m, c.e)
		b.Run("planner/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pl.Plan(c.e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, c := range cases {
		pl := prepared(b, c.m, c.e)
		b.Run("into/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			var p Plan
			for b.Loop() {
				if err := pl.PlanInto(c.e, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, c := range cases {
		pl := prepared(b, c.m, c.e)
		b.Run("summary/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pl.Summary(c.e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// prepared returns a Planner for m that has planned e once.
func prepared(b *testing.B, m *model.Model, e Engine) *Planner {
	b.Helper()
	pl, err := NewPlanner(m)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pl.Plan(e); err != nil {
		b.Fatal(err)
	}
	return pl
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
