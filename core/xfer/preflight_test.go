package xfer

import (
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// TestCompareFacts: each value of the handshake side by side, the same or
// not, with how vLLM's NixlConnector treats a difference (the hash's
// inputs and what it validates, as the connector note's §2.3 lists them);
// values neither side knows are left out, one side's unknown value is
// said.
func TestCompareFacts(t *testing.T) {
	p := Facts{Side: P, VLLMVersion: "0.24.0", Handshake: 4, TP: 2, BlockSize: 16, KVCacheDType: "fp8", Backend: "FLASH_ATTN", KVCacheLayout: "HND"}
	d := p
	d.Side, d.TP, d.BlockSize, d.Backend, d.KVCacheLayout = D, 4, 64, "FLASHINFER", ""
	byName := map[string]Facet{}
	for _, f := range CompareFacts(p, d) {
		byName[f.Name] = f
	}
	for _, tt := range []struct {
		name, p, d string
		same       bool
		rule, note string
	}{
		{"vLLM version", "0.24.0", "0.24.0", true, Hashed, ""},
		{"NIXL_CONNECTOR_VERSION", "4", "4", true, Hashed, ""},
		{"tensor-parallel size", "2", "4", false, Validated, "tp_ratio 2"},
		{"block size (tokens)", "16", "64", false, Validated, "D's block is 4× P's"},
		{"KV cache dtype", "fp8", "fp8", true, Hashed, ""},
		{"attention backend", "FLASH_ATTN", "FLASHINFER", false, Hashed, ""},
		{"KV cache layout", "HND, K/V split", "not known", false, Validated, ""},
	} {
		f, ok := byName[tt.name]
		if !ok {
			t.Errorf("%s: no facet", tt.name)
			continue
		}
		if f.P != tt.p || f.D != tt.d || f.Same != tt.same || f.Rule != tt.rule || !strings.Contains(f.Note, tt.note) {
			t.Errorf("%s: got %+v, want P %q D %q same %v rule %s note %q", tt.name, f, tt.p, tt.d, tt.same, tt.rule, tt.note)
		}
	}
	for _, absent := range []string{"compatibility hash", "state layout", "num_blocks", "hybrid KV cache manager"} {
		if _, ok := byName[absent]; ok {
			t.Errorf("%s: neither side knows it, yet it is listed", absent)
		}
	}
	if f := CompareFacts(Facts{TP: 3}, Facts{TP: 2}); f[0].Note != "neither divides the other" {
		t.Errorf("TP 3 and 2: %+v", f[0])
	}
}

// TestPreflight: the verdict and its sentence for deployments whose answer
// the release rules give: gpt-oss-20b (sliding window and full attention)
// on 0.20.0, whose connector turns the hybrid manager off (kept on from
// 0.23.0, #41847): its 12 full-attention layers and 12 sliding-window
// layers (window 128) plan as 24 full-attention layers, so a request of
// 65,536 tokens takes 4,096 blocks of 16 tokens in 24 slots instead of
// 4,096 + 137 in 12 (a sliding layer holds its window less one plus a
// 2,048-token chunk, plus a block: vLLM's max_memory_usage_bytes), and
// the cache holds 2 x 4,096 / 4,233 = 1.94 times the requests with it
// on; the
// same on 0.23.0 with the manager on; a dense model, one kind of layer; P
// on 0.23.0 and D on 0.24.0, refused at the first request (the
// compatibility hash takes the version).
func TestPreflight(t *testing.T) {
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	dense := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	pull, _ := ParseConnector("nixl")
	run := func(m Setup) *Preflight {
		t.Helper()
		pd, err := Prepare(m)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := pd.Compute(m.Request, false)
		if err != nil {
			t.Fatal(err)
		}
		return pd.PreflightOf(tr)
	}
	eng := func(version string, tp int) plan.Engine {
		return plan.Engine{VLLMVersion: version, TensorParallelSize: tp, MaxModelLen: 65536, MaxNumBatchedTokens: 2048, KVCacheMemoryBytes: 24 << 30}
	}
	req := Request{PromptTokens: 1000}

	off := run(Setup{Model: gpt, P: eng("0.20.0", 1), D: eng("0.20.0", 1), Connector: pull, Request: req})
	if off.Verdict != "ok" || off.P.HybridManager != "off (the connector turns it off)" || off.P.HybridMaxConcurrency < 1.93*off.P.MaxConcurrency || off.P.HybridMaxConcurrency > 1.95*off.P.MaxConcurrency ||
		!strings.Contains(off.Sentence, "turns the hybrid KV cache manager off") {
		t.Errorf("gpt-oss-20b on 0.20.0: %+v", off)
	}
	on := run(Setup{Model: gpt, P: eng("0.23.0", 1), D: eng("0.23.0", 1), Connector: pull, Request: req})
	if on.Verdict != "ok" || on.P.HybridManager != "on" || on.P.HybridKVTokens != 0 || strings.Contains(on.Sentence, "hybrid") {
		t.Errorf("gpt-oss-20b on 0.23.0: %+v", on)
	}
	if on.RankPairs != 1 || on.Descs == 0 || on.Bytes == 0 || !strings.Contains(on.Sentence, "1,000-token prompt") {
		t.Errorf("gpt-oss-20b on 0.23.0: %d rank pairs, %d descriptors, %d bytes: %s", on.RankPairs, on.Descs, on.Bytes, on.Sentence)
	}
	one := run(Setup{Model: dense, P: eng("0.23.0", 1), D: eng("0.23.0", 2), Connector: pull, Request: req})
	if one.P.HybridManager != "one kind of layer" || one.RankPairs != 2 {
		t.Errorf("Qwen3-0.6B TP 1 -> 2: %+v", one)
	}
	bad := run(Setup{Model: dense, P: eng("0.23.0", 1), D: eng("0.24.0", 1), Connector: pull, Request: req})
	if bad.Verdict != "rejected" || bad.Rejection == nil || bad.Rejection.Rule != "vllm-version" || bad.Rejection.When != WhenRefused ||
		!strings.Contains(bad.Sentence, "will not transfer") || !strings.Contains(bad.Sentence, "first request") {
		t.Errorf("Qwen3-0.6B 0.23.0 -> 0.24.0: %+v", bad)
	}
}

// TestSameLayers: region members compare by layer number where both
// names carry one (kvscope's L<n>, vLLM's module paths, as version 12's
// region_members sends them), else by name.
func TestSameLayers(t *testing.T) {
	for _, tt := range []struct {
		a, b []string
		same bool
	}{
		{[]string{"model.layers.0.self_attn.attn", "model.layers.4.self_attn.attn"}, []string{"L0", "L4"}, true},
		{[]string{"model.layers.0.self_attn.attn", "model.layers.5.self_attn.attn"}, []string{"L0", "L4"}, false},
		{[]string{"model.layers.0.self_attn.attn"}, []string{"L0", "L4"}, false},
		{[]string{"drafter.fc"}, []string{"drafter.fc"}, true},
		{[]string{"drafter.fc"}, []string{"L3"}, false},
	} {
		if got := SameLayers(tt.a, tt.b); got != tt.same {
			t.Errorf("SameLayers(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}
