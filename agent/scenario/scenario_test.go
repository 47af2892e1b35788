package scenario

import (
	"os"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
)

func TestExampleScenarioPlans(t *testing.T) {
	s, err := Load("../../testdata/scenarios/qwen35-hybrid.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != "Qwen/Qwen3.5-0.8B" || s.D.TensorParallelSize != 2 || s.PromptMax != 2048 || s.Seed != 7 {
		t.Fatalf("loaded %+v", s)
	}
	m, err := s.LoadModel(model.NewCatalog(os.DirFS("../.."), "testdata/models"))
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
