package plan

import (
	"errors"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/vllm"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/kvspec"
)

func TestInvariantPlanForTheSeedDeployment(t *testing.T) {
	seed := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	p := Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7}
	d := p
	d.TensorParallelSize = 4
	inv, err := NewInvariant(seed, p, d)
	if err != nil {
		t.Fatal(err)
	}
	// The block size aligned at TP1: attention 2,048 B per token, state
	// 10*8192*2 + 32*128*128*2 = 1,212,416 B, so 16 * ceil(1,212,416 /
	// 32,768) = 592; TP2 gives 592 and TP4 304.
	if inv.BlockSize != 592 || inv.P.BlockSize != 592 || inv.D.BlockSize != 592 {
		t.Errorf("block sizes: suggested %d, P %d, D %d; want 592", inv.BlockSize, inv.P.BlockSize, inv.D.BlockSize)
	}
	// Buckets by identity: 30 GDN, 10 target full, 5 draft sliding, 1 draft
	// full. Worst-case blocks at block 592 (262,144 tokens, 16,384 in
	// flight, 7 speculative): GDN 8, full 443, sliding ceil(20,479/592)+1 =
	// 36. Padding cost at g=3 is 2*443 + 36 + 2*443 = 1,808, at g=4 2,339,
	// at g=5 4*443 = 1,772 (the least): 6+2+1+1 = 10 groups.
	if inv.Layout.GroupSize != 5 || len(inv.Layout.Groups) != 10 {
		t.Errorf("invariant g %d with %d groups, want 5 and 10", inv.Layout.GroupSize, len(inv.Layout.Groups))
	}
	if diff := Compare(inv.P, inv.D); !diff.SameLayout {
		t.Errorf("P and D invariant plans differ: %+v", diff.Changes)
	}
	if diff := Compare(inv.PIndependent, inv.DIndependent); diff.SameLayout {
		t.Error("the independent plans of P (TP2) and D (TP4) should differ")
	}
	if !inv.Inferred || !inv.P.Inferred || !inv.D.Inferred {
		t.Error("a TP-invariant plan is inferred and must say so")
	}
	if !reflect.DeepEqual(inv.P.Layout().Groups, inv.Layout.Groups) {
		t.Error("P does not use the invariant layout")
	}
}

func TestInvariantPlanOfAUniformModelIsItsOwnPlan(t *testing.T) {
	m := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	inv, err := NewInvariant(m, Engine{TensorParallelSize: 1}, Engine{TensorParallelSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	if diff := Compare(inv.P, inv.PIndependent); !diff.SameLayout || inv.P.KVCacheTokens != inv.PIndependent.KVCacheTokens {
		t.Errorf("uniform model: invariant P %d tokens vs independent %d, diff %+v", inv.P.KVCacheTokens, inv.PIndependent.KVCacheTokens, diff)
	}
}

func TestCompareReportsBlockSizeChanges(t *testing.T) {
	m := modeltest.Load(t, "Qwen__Qwen3-Next-80B-A3B-Instruct")
	a := mustPlan(t, m, Engine{TensorParallelSize: 1, Selector: Classic, MambaCacheMode: "none"})
	b := mustPlan(t, m, Engine{TensorParallelSize: 4, Selector: Classic, MambaCacheMode: "none"})
	d := Compare(a, b)
	// Only the 12 full-attention layers change: a GDN layer's block in
	// mamba_cache_mode none is the whole request on both sides.
	if !d.SameLayout || d.SameBlockSizes || len(d.Changes) != 12 {
		t.Fatalf("same layout %v, same block sizes %v, %d changes; want true, false, 12", d.SameLayout, d.SameBlockSizes, len(d.Changes))
	}
	if c := d.Changes[0]; c.Layer != "L3" || c.FromBlock != 544 || c.ToBlock != 272 {
		t.Errorf("first change %+v, want block 544 -> 272", c)
	}
}

// Every bundled model plans at TP 1, 2, 4 and 8, or is refused with an
// error naming --tensor-parallel-size; TP 1 always plans.
func TestEveryBundledModelPlans(t *testing.T) {
	// minTP is the smallest TP at which one request of the model's derived
	// max_model_len fits the default 40 GiB per rank. Qwen3-235B: 262,144
	// tokens x 94 layers x 4 KV heads x 128 x 2 x 2 B = 47 GiB at TP1.
	minTP := map[string]int{"Qwen__Qwen3-235B-A22B-Instruct-2507": 2}
	files, _ := filepath.Glob(filepath.Join(modeltest.Dir(), "*.json"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		m := modeltest.Load(t, name)
		for _, tp := range []int{1, 2, 4, 8} {
			for _, sel := range []Selector{Classic, Balanced, PaddingBytes} {
				p, err := New(m, Engine{TensorParallelSize: tp, Selector: sel})
				if err != nil {
					var oe *kvspec.OptionError
					var re *RefusalError
					if tp < minTP[name] && errors.As(err, &re) {
						continue // vLLM refuses it too: one request does not fit the default 40 GiB
					}
					if tp == 1 || !errors.As(err, &oe) || oe.Option != "--tensor-parallel-size" {
						t.Errorf("%s TP%d %s: %v", name, tp, sel, err)
					}
					continue
				}
				placed := 0
				for _, g := range p.Groups {
					placed += len(g.Layers)
					if len(g.Layers) > p.Slots {
						t.Errorf("%s TP%d: group longer than the slot count", name, tp)
					}
				}
				if placed != len(p.Layers) || p.NumBlocks <= 0 || p.KVCacheTokens <= 0 {
					t.Errorf("%s TP%d %s: placed %d of %d layers, %d blocks, %d tokens", name, tp, sel, placed, len(p.Layers), p.NumBlocks, p.KVCacheTokens)
				}
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("no bundled models found")
	}
}
