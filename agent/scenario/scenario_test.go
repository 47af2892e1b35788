package scenario

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

func TestExampleScenarioPlans(t *testing.T) {
	s, err := Load("../../testdata/scenarios/qwen35-hybrid.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != "Qwen/Qwen3.5-0.8B" || s.D.TensorParallelSize != 2 || s.PromptMax != 2048 || s.Seed != 7 {
		t.Fatalf("loaded %+v", s)
	}
	m, err := s.LoadModel(catalog.Bundled())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Setup(m); err != nil {
		t.Fatal(err)
	}
}

func TestScenarioErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"rate": -1}`, "rate = -1"},
		{`{"prompt_min": 10, "prompt_max": 5}`, "prompt_min/prompt_max = 10/5"},
		{`{"prefix_hit_fraction": 1}`, "prefix_hit_fraction = 1"},
		{`{"connector": "rdma"}`, "connector = rdma"},
		{`{"model": ""}`, "model"},
		{`{"modle": "x"}`, `unknown field "modle"`},
		{`{"requests": 2} {}`, "trailing data"},
		{`{"requests": "two"}`, "requests"},
		{`{"duration_s": 1e10}`, "duration_s = 1e+10"},
		{`{"plans": "best"}`, "plans = best"},
		{`{"prefix_hit_tokens": 64, "prompt_min": 64}`, "prefix_hit_tokens = 64: must be below prompt_min (64)"},
		{`{"layout": "nhd"}`, "layout = nhd"},
		{`{"agents": {"4f1c": "q0"}}`, `agents.4f1c = "q0": want p<rank> or d<rank>`},
		{`{"agents": {"4f1c": "p-1"}}`, `agents.4f1c = "p-1"`},
		{`{"agents": {"4f1c": "d4"}}`, `agents.4f1c = "d4": D has TP 4`},
		{`{"agents": {"4f1c": "p2"}}`, `agents.4f1c = "p2": P has TP 2`},
	} {
		_, err := Parse([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an error containing %q", c.json, err, c.want)
		}
	}
}

func TestRequestsAreSeededAndInRange(t *testing.T) {
	s := Default()
	a, b := s.NewRequests(), s.NewRequests()
	for range 1000 {
		x, y := a.Next(), b.Next()
		if x != y {
			t.Fatal("the same seed drew different requests")
		}
		if x.PromptTokens < s.PromptMin || x.PromptTokens > s.PromptMax || x.PrefixHitTokens != int(float64(x.PromptTokens)*s.HitFraction) {
			t.Fatalf("request %+v outside the scenario", x)
		}
	}
}

func TestUseGPUMemory(t *testing.T) {
	s := Default()
	gpus := []event.GPU{{MemoryBytes: 150_000_000_000}, {MemoryBytes: 143_771_533_312}}
	if err := s.UseGPUMemory(gpus, 0.5); err != nil {
		t.Fatal(err)
	}
	if want := int64(143_771_533_312 / 2); s.P.KVCacheMemoryBytes != want || s.D.KVCacheMemoryBytes != want {
		t.Fatalf("KV memory %d/%d, want half the smallest GPU, %d", s.P.KVCacheMemoryBytes, s.D.KVCacheMemoryBytes, want)
	}
	if err := s.UseGPUMemory(nil, 0.5); err == nil {
		t.Fatal("no GPUs: want an error")
	}
	if err := s.UseGPUMemory(gpus, 1.5); err == nil {
		t.Fatal("fraction 1.5: want an error")
	}
}

func FuzzParse(f *testing.F) {
	data, _ := os.ReadFile("../../testdata/scenarios/qwen35-hybrid.json")
	f.Add(data)
	f.Add([]byte(`{"rate": 1e300}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		if s.Validate() != nil {
			t.Fatal("Parse accepted an invalid scenario")
		}
		r := s.NewRequests()
		for range 3 {
			q := r.Next()
			if q.PromptTokens < s.PromptMin || q.PromptTokens > s.PromptMax {
				t.Fatalf("request %+v outside [%d, %d]", q, s.PromptMin, s.PromptMax)
			}
		}
	})
}

// TestLoadCapsTheFile: a scenario path that never ends is refused with
// the cap named, not read until memory runs out.
func TestLoadCapsTheFile(t *testing.T) {
	if _, err := Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "larger than the 4194304-byte limit") {
		t.Fatalf("Load(/dev/zero): %v", err)
	}
}

// TestFitHost: the app's configurations (40 GiB per rank by default) are
// made to fit the embedded agent's host memory with pools that hold one
// request of the prompt (the transfer's block ids all inside them), every
// plan's groups, slots and block sizes unchanged, and max_model_len
// brought down to the prompt; what cannot fit is refused.
func TestFitHost(t *testing.T) {
	cat := catalog.Bundled()
	for _, c := range []struct {
		model  string
		pTP    int
		dTP    int
		limit  int64
		maxLen int
		want   string // an error, or "" for a fit
	}{
		{"openai/gpt-oss-20b", 2, 4, 512 << 20, 131072, ""},
		{"Qwen/Qwen3.5-0.8B", 1, 2, 512 << 20, 32768, ""},
		{"openai/gpt-oss-20b", 1, 1, 2 << 20, 2048, "over the 2 MiB of host memory"},
	} {
		s := Default()
		s.Model = c.model
		s.P = plan.Engine{TensorParallelSize: c.pTP, MaxModelLen: c.maxLen}
		s.D = plan.Engine{TensorParallelSize: c.dTP, MaxModelLen: c.maxLen}
		m, err := s.LoadModel(cat)
		if err != nil {
			t.Fatal(err)
		}
		before := s
		notes, err := s.FitHost(m, c.limit, "--host-memory-mib")
		name := fmt.Sprintf("%s P TP%d D TP%d in %d KiB", c.model, c.pTP, c.dTP, c.limit>>10)
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) || s.P != before.P || s.D != before.D {
				t.Errorf("%s: %v, want %q and the engines untouched", name, err, c.want)
			}
			continue
		}
		if err != nil || len(notes) != 2 || !strings.Contains(notes[0], "--max-model-len 1024 (was") {
			t.Fatalf("%s: %q %v", name, notes, err)
		}
		var total int64
		for _, side := range []struct {
			name          string
			before, after plan.Engine
			tp            int
		}{{"P", before.P, s.P, c.pTP}, {"D", before.D, s.D, c.dTP}} {
			p0, _ := plan.New(m, side.before)
			p1, err := plan.New(m, side.after)
			if err != nil {
				t.Fatalf("%s %s: %v", name, side.name, err)
			}
			if d := plan.Compare(p0, p1); !d.SameLayout || !d.SameBlockSizes {
				t.Errorf("%s %s: the plan changed: %+v", name, side.name, d.Changes)
			}
			total += int64(side.tp) * p1.NumBlocks * p1.BytesPerBlock
		}
		if total > c.limit {
			t.Errorf("%s: %d bytes in all, over %d", name, total, c.limit)
		}
		setup, err := s.Setup(m)
		if err != nil {
			t.Fatal(err)
		}
		pd, err := xfer.Prepare(setup)
		if err != nil {
			t.Fatal(err)
		}
		x, err := pd.Compute(xfer.Request{PromptTokens: s.PromptMax, PrefixHitTokens: s.PromptMax / 4}, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, side := range []struct {
			name  string
			pages []xfer.Pages
			pool  int64
		}{{"P", x.PPages, x.PRegs[0].NumBlocks}, {"D", x.DPages, x.DRegs[0].NumBlocks}} {
			for g, p := range side.pages {
				for _, id := range p.IDs {
					if int64(id) >= side.pool {
						t.Errorf("%s: %s group %d uses block %d of a pool of %d", name, side.name, g, id, side.pool)
					}
				}
			}
		}
	}
}
