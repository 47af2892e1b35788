package plan

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/vllm"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
)

// FuzzPlan drives the planner with arbitrary engine settings on bundled
// models. Every outcome must be a plan that places each layer once with
// sane numbers, or an error that names the flag; and a fresh New, a
// Planner shared by every input, PlanInto into one Plan every input
// reuses, and Summary must agree on it. (That the one planner is right is
// the vLLM vectors' and the hand-derived cases' to hold: golden_test.go,
// worked_test.go, refusal_test.go, whose mustPlan also holds a reused
// PlanInto to New.)
func FuzzPlan(f *testing.F) {
	models := []string{"Qwen__Qwen3.6-35B-A3B", "google__gemma-3-27b-it", "nvidia__NVIDIA-Nemotron-Nano-9B-v2",
		"deepseek-ai__DeepSeek-V2-Lite", "meta-llama__Llama-4-Scout-17B-16E", "google__gemma-4-E2B"}
	var loaded []*model.Model
	var planners []*Planner // one per model, its cache shared by every input
	for _, name := range models {
		m := modeltest.Load(f, name)
		pl, err := NewPlanner(m)
		if err != nil {
			f.Fatal(err)
		}
		loaded, planners = append(loaded, m), append(planners, pl)
	}
	versions := vllm.Versions()
	f.Add(uint8(0), 2, 1, 0, 262144, 8192, 7, 3, 0, uint8(0), uint8(0), false, false, uint8(len(versions)-1))
	f.Add(uint8(1), 8, 2, 32, 131072, 2048, 0, 1, 4, uint8(1), uint8(2), true, true, uint8(0))
	f.Add(uint8(2), 4, 4, 0, 4096, 512, 2, 5, 0, uint8(2), uint8(1), false, true, uint8(20))
	// One plan every input is planned into, whatever its model: PlanInto
	// reuses what the last input left there.
	into := new(Plan)
	f.Fuzz(func(t *testing.T, mi uint8, tp, pp, bs, mml, mnbt, spec, minLayers, g int, sel, mode uint8, noAsync, disable bool, vi uint8) {
		m, pl := loaded[int(mi)%len(loaded)], planners[int(mi)%len(loaded)]
		e := Engine{
			VLLMVersion:        versions[int(vi)%len(versions)],
			TensorParallelSize: tp, PipelineParallelSize: pp, BlockSize: bs, MaxModelLen: mml,
			MaxNumBatchedTokens: mnbt, NumSpeculativeTokens: spec, MinGroupLayers: minLayers, GroupSize: g,
			Selector:          []Selector{Classic, Balanced, PaddingBytes}[int(sel)%3],
			MambaCacheMode:    []string{"none", "align", "all"}[int(mode)%3],
			NoAsyncScheduling: noAsync, DisableHybrid: disable,
		}
		// A fresh New, and a shared Planner whose cache every input fills.
		p, err := New(m, e)
		if intoErr := pl.PlanInto(e, into); !reflect.DeepEqual(intoErr, err) || p != nil && !sameIgnoringProfile(into, p) {
			t.Fatalf("PlanInto into a reused plan and New differ: %v / %v", intoErr, err)
		}
		cached, cachedErr := pl.Plan(e)
		if !reflect.DeepEqual(cachedErr, err) || !sameIgnoringProfile(cached, p) {
			t.Fatalf("a shared Planner and New differ: %v / %v", cachedErr, err)
		}
		if sum, sumErr := pl.Summary(e); !reflect.DeepEqual(sumErr, err) || p != nil && sum != p.Summary() {
			t.Fatalf("Summary %+v, %v; want %+v, %v", sum, sumErr, p.Summary(), err)
		}
		if err != nil {
			var fe *FlagError
			var oe *kvspec.OptionError
			var re *RefusalError
			switch {
			case errors.As(err, &re):
				if re.EstimatedMaxLen < 0 || re.EstimatedMaxLen >= re.MaxModelLen || !strings.Contains(re.Message, "max seq len") {
					t.Fatalf("refusal %+v", re)
				}
			case !errors.As(err, &fe) && !errors.As(err, &oe):
				t.Fatalf("error %v names no flag", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, grp := range p.Groups {
			if len(grp.Layers) == 0 || len(grp.Layers) > p.Slots {
				t.Fatalf("group %d has %d layers, slots %d", grp.Index, len(grp.Layers), p.Slots)
			}
			for _, name := range grp.Layers {
				if seen[name] {
					t.Fatalf("layer %s placed twice", name)
				}
				seen[name] = true
			}
		}
		for _, l := range m.Layers {
			if l.OwnsKV() && !seen[l.Name] {
				t.Fatalf("layer %s not placed", l.Name)
			}
		}
		if p.NumBlocks < 0 || p.KVCacheTokens < 0 || p.BlocksPerRequest <= 0 || p.PaddingBytesPerRequest < 0 || p.BytesPerBlock <= 0 {
			t.Fatalf("impossible numbers: blocks %d tokens %d per request %d padding %d", p.NumBlocks, p.KVCacheTokens, p.BlocksPerRequest, p.PaddingBytesPerRequest)
		}
		for _, l := range p.Layers {
			if l.Page <= 0 || l.Page != p.Groups[l.Group].PageBytes && !p.Groups[l.Group].UniformType {
				t.Fatalf("layer %s page %d, group page %d", l.Name, l.Page, p.Groups[l.Group].PageBytes)
			}
		}
	})
}
