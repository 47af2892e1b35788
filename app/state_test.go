package app

import (
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
)

func TestSettingsRoundTripThroughTheURL(t *testing.T) {
	custom := DefaultSettings()
	custom.Model, custom.Config = "custom", `{"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64}`
	tests := []struct {
		name string
		s    Settings
	}{
		{"the default view", DefaultSettings()},
		{"a plain model at vLLM's defaults", Settings{View: "plan", Model: "openai/gpt-oss-20b", Connector: "nixl", Plans: "auto", Layout: "split", Prompt: 1024}},
		{"every engine flag set on both sides", Settings{View: "flow", Model: "google/gemma-3-27b-it", Draft: "mtp", Connector: "nixl-push", Plans: "invariant", Layout: "blocks-first", Prompt: 777, Hit: 64, Dark: true,
			P: plan.Engine{TensorParallelSize: 2, PipelineParallelSize: 2, BlockSize: 32, MaxModelLen: 8192, MaxNumBatchedTokens: 2048, NumSpeculativeTokens: 3,
				KVCacheDType: "fp8", Selector: "classic", MinGroupLayers: 2, GroupSize: 5, KVCacheMemoryBytes: 20 << 30, MambaCacheMode: "align",
				MambaSSMCacheDType: "float32", NoAsyncScheduling: true, DisableHybrid: true, AttentionBackend: "FLASHINFER", NumGPUBlocksOverride: 1000,
				BucketMerge: "strict", BalancedLambda: 2.5, PrefixCaching: "on"},
			D: plan.Engine{TensorParallelSize: 8, BlockSize: 48, KVCacheMemoryBytes: 1536 << 20, AsyncScheduling: true, PrefixCaching: "off"}}},
		{"a pasted config", custom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.s.Link())
			if err != nil {
				t.Fatal(err)
			}
			got, errs := ParseQuery(u.Query())
			if len(errs) > 0 {
				t.Fatalf("errors %v", errs)
			}
			if !reflect.DeepEqual(got, tt.s) {
				t.Errorf("round trip changed the settings:\n got %+v\nwant %+v\nlink %s", got, tt.s, tt.s.Link())
			}
		})
	}
}

func TestBadQueryValuesNameTheirField(t *testing.T) {
	q, _ := url.ParseQuery("model=openai/gpt-oss-20b&p-tensor-parallel-size=two&d-no-async-scheduling=perhaps&d-async-scheduling=sometimes&p-kv-cache-memory-bytes=lots&prompt-tokens=-5&view=nowhere&config=%25%25")
	s, errs := ParseQuery(q)
	for _, key := range []string{"p-tensor-parallel-size", "d-no-async-scheduling", "d-async-scheduling", "p-kv-cache-memory-bytes", "prompt-tokens", "view"} {
		if errs[key] == "" {
			t.Errorf("no error for %s (errors %v)", key, errs)
		}
	}
	if s.P.TensorParallelSize != 0 || s.P.KVCacheMemoryBytes != 0 || s.View != "plan" || s.Prompt != blankSettings().Prompt {
		t.Errorf("a bad value must leave the default: %+v", s)
	}
}

func TestComputeReportsErrorsPerField(t *testing.T) {
	cat := testCatalog()
	tests := []struct {
		name  string
		edit  func(*Settings)
		field string
	}{
		{"a TP size the heads do not allow", func(s *Settings) { s.Model, s.D = "google/gemma-3-1b-it", plan.Engine{TensorParallelSize: 8} }, "d-tensor-parallel-size"},
		{"an unknown model", func(s *Settings) { s.Model = "acme/nothing" }, "model"},
		{"a broken pasted config", func(s *Settings) { s.Model, s.Config = "custom", `{"num_hidden_layers": 0}` }, "config"},
		{"MTP on a model without it", func(s *Settings) { s.Model, s.Draft = "openai/gpt-oss-20b", "mtp" }, "draft"},
		{"an unknown selector", func(s *Settings) { s.P.Selector = "magic" }, "p-selector"},
		{"a prompt longer than max_model_len", func(s *Settings) { s.Prompt = 1 << 20 }, "prompt-tokens"},
		{"an unknown connector", func(s *Settings) { s.Connector = "nccl" }, "connector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			tt.edit(&s)
			r := Compute(s, cat, nil)
			if r.Errors[tt.field] == "" {
				t.Errorf("errors %v, want one for %s", r.Errors, tt.field)
			}
		})
	}
}

func TestComputeMatchesTheCLIPlanner(t *testing.T) {
	s := DefaultSettings()
	r := Compute(s, testCatalog(), nil)
	if !r.OK() {
		t.Fatal(r.Errors, r.Err)
	}
	p, d := r.Plans()
	// The seed deployment's independent plans (nixl pulls; not MLA).
	if p.BlockSize != 592 || d.BlockSize != 304 || p.NumGroups != 17 {
		t.Errorf("P block %d groups %d, D block %d", p.BlockSize, p.NumGroups, d.BlockSize)
	}
	if r.PD.Transfer != nil {
		t.Error("the plan view computes no transfer")
	}
	r.EnsureTransfer(nil)
	if r.PD.Transfer == nil || r.PD.Transfer.Rejection != nil || r.PD.Transfer.Descs == 0 {
		t.Fatalf("transfer %+v", r.PD.Transfer)
	}
	if !strings.Contains(s.CLI("pd"), "--d-tensor-parallel-size 4") {
		t.Errorf("CLI %q", s.CLI("pd"))
	}
}

func TestUnprefixedKeysApplyToBothSides(t *testing.T) {
	q, _ := url.ParseQuery("model=openai/gpt-oss-20b&max-model-len=262144&d-max-model-len=8192&vllm-version=0.19.0&bogus=1&p-nonsense=2")
	s, errs := ParseQuery(q)
	if len(errs) > 0 {
		t.Fatalf("errors %v", errs)
	}
	if s.P.MaxModelLen != 262144 || s.D.MaxModelLen != 8192 {
		t.Errorf("max-model-len: P %d, D %d; want 262144 and the d- override 8192", s.P.MaxModelLen, s.D.MaxModelLen)
	}
	if s.Version != "0.19.0" {
		t.Errorf("version %q", s.Version)
	}
	if !reflect.DeepEqual(s.Unknown, []string{"bogus", "p-nonsense"}) {
		t.Errorf("unknown keys %v", s.Unknown)
	}
	u, _ := url.Parse(s.Link())
	if strings.Contains(s.Link(), "bogus") || u.Query().Get("vllm-version") != "0.19.0" {
		t.Errorf("link %s", s.Link())
	}
}

func TestComputeNamesTheRefusal(t *testing.T) {
	s := blankSettings()
	s.Model, s.Version = "openai/gpt-oss-20b", "0.21.0"
	s.P.MaxModelLen, s.P.KVCacheMemoryBytes = 131072, 3<<30
	r := Compute(s, testCatalog(), nil)
	if msg := r.Errors["p-max-model-len"]; !strings.Contains(msg, "estimated maximum model length is 122736") {
		t.Errorf("errors %v", r.Errors)
	}
	s.Version = "0.5.0"
	if r := Compute(s, testCatalog(), nil); !strings.Contains(r.Errors["vllm-version"], "0.10.0") {
		t.Errorf("errors %v", r.Errors)
	}
}

// TestOldLinksKeepWorking: a link written before the engine flags were
// one table (whole GiB in kv-cache-memory-gib, no-async-scheduling=true)
// plans the same engines as its current form, and says so with a warning
// that names the key to use now; the link the app writes back is current.
func TestOldLinksKeepWorking(t *testing.T) {
	old, _ := url.ParseQuery("model=openai/gpt-oss-20b&p-kv-cache-memory-gib=12&d-no-async-scheduling=true&kv-cache-memory-gib=1.5")
	now, _ := url.ParseQuery("model=openai/gpt-oss-20b&p-kv-cache-memory-bytes=12GiB&d-kv-cache-memory-bytes=1536MiB&d-async-scheduling=off")
	got, errs := ParseQuery(old)
	if len(errs) > 0 {
		t.Fatalf("errors %v", errs)
	}
	want, errs := ParseQuery(now)
	if len(errs) > 0 {
		t.Fatalf("errors %v", errs)
	}
	if got.P != want.P || got.D != want.D {
		t.Errorf("old link: P %+v D %+v\nwant P %+v D %+v", got.P, got.D, want.P, want.D)
	}
	if got.P.KVCacheMemoryBytes != 12<<30 || got.D.KVCacheMemoryBytes != 3<<29 || !got.D.NoAsyncScheduling {
		t.Errorf("P memory %d, D memory %d, D async off %v", got.P.KVCacheMemoryBytes, got.D.KVCacheMemoryBytes, got.D.NoAsyncScheduling)
	}
	joined := strings.Join(got.Warnings, "; ")
	for _, w := range []string{"p-kv-cache-memory-gib=12 is now written p-kv-cache-memory-bytes=12GiB", "d-no-async-scheduling=true is now written d-async-scheduling=off", "kv-cache-memory-gib=1.5 is now written kv-cache-memory-bytes=1536MiB"} {
		if !strings.Contains(joined, w) {
			t.Errorf("warnings %q lack %q", joined, w)
		}
	}
	if len(got.Unknown) > 0 || len(want.Warnings) > 0 {
		t.Errorf("unknown %v, current link's warnings %v", got.Unknown, want.Warnings)
	}
	if link := got.Link(); strings.Contains(link, "gib") || strings.Contains(link, "no-async") || !strings.Contains(link, "p-kv-cache-memory-bytes=12GiB") {
		t.Errorf("the link written back is not current: %s", link)
	}
}
