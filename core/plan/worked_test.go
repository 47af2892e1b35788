package plan

import (
	"github.com/kvscope/kvscope/core/vllm"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
)

func withDraft(t testing.TB, target, draft string) *model.Model {
	t.Helper()
	m := modeltest.LoadWithDraft(t, target, draft)
	return m
}

// mustPlan plans m for e with New, and holds a Planner's PlanInto into a
// Plan that held another model's plan to the same plan, so that every
// hand-derived case through it checks the reused path too.
func mustPlan(t testing.TB, m *model.Model, e Engine) *Plan {
	t.Helper()
	p, err := New(m, e)
	if err != nil {
		t.Fatal(err)
	}
	reused := new(Plan)
	other := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	for _, step := range []struct {
		m *model.Model
		e Engine
	}{
		{other, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, PipelineParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7}},
		{m, e},
	} {
		pl, err := NewPlanner(step.m)
		if err != nil {
			t.Fatal(err)
		}
		if err := pl.PlanInto(step.e, reused); err != nil {
			t.Fatal(err)
		}
	}
	if !sameIgnoringProfile(reused, p) {
		t.Fatalf("PlanInto into a reused plan differs from New for %+v", e)
	}
	return p
}

// The worked examples of reference/planning.md §8: bf16, 40 GiB per rank,
// max_num_batched_tokens 8192 with one batch in flight (the classic
// generation's worst case), classic selector.
func TestWorkedExamples(t *testing.T) {
	classic := func(tp, mml int) Engine {
		return Engine{TensorParallelSize: tp, MaxModelLen: mml, NoAsyncScheduling: true, Selector: Classic}
	}
	tests := []struct {
		name      string
		model     string
		engine    Engine
		blockSize int
		page      int64
		groups    int
		slots     int
		numBlocks int64
		perReq    int64
		tokens    int64
	}{
		{"gpt-oss-20b TP1", "openai__gpt-oss-20b", classic(1, 131072), 16, 32768, 2, 12, 109226, 8713, 1643116},
		{"gpt-oss-20b TP2", "openai__gpt-oss-20b", classic(2, 131072), 16, 16384, 2, 12, 218453, 8713, 3286247},
		{"gpt-oss-20b TP4", "openai__gpt-oss-20b", classic(4, 131072), 16, 8192, 2, 12, 436906, 8713, 6572494},
		{"Gemma-3-27B TP1", "google__gemma-3-27b-it", classic(1, 131072), 16, 131072, 7, 10, 32768, 11654, 368540},
		{"Qwen3-Next TP1 align", "Qwen__Qwen3-Next-80B-A3B-Instruct", withMode(classic(1, 262144), "align"), 544, 1114112, 4, 12, 3212, 488, 1725423},
		{"Qwen3-Next TP2 align", "Qwen__Qwen3-Next-80B-A3B-Instruct", withMode(classic(2, 262144), "align"), 544, 557056, 4, 12, 6425, 488, 3451383},
		{"Qwen3-Next TP4 align", "Qwen__Qwen3-Next-80B-A3B-Instruct", withMode(classic(4, 262144), "align"), 272, 278528, 4, 12, 12850, 970, 3472732},
		{"Qwen3-Next TP8 align", "Qwen__Qwen3-Next-80B-A3B-Instruct", withMode(classic(8, 262144), "align"), 144, 147456, 4, 12, 24272, 1827, 3482626},
		{"Qwen3-Next TP1 none", "Qwen__Qwen3-Next-80B-A3B-Instruct", withMode(classic(1, 262144), "none"), 544, 1114112, 4, 12, 3212, 485, 1736095},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPlan(t, modeltest.Load(t, tt.model), tt.engine)
			if p.BlockSize != tt.blockSize || p.PageBytes != tt.page {
				t.Errorf("block %d page %d; want %d, %d", p.BlockSize, p.PageBytes, tt.blockSize, tt.page)
			}
			if p.NumGroups != tt.groups || p.Slots != tt.slots {
				t.Errorf("groups %d slots %d; want %d, %d", p.NumGroups, p.Slots, tt.groups, tt.slots)
			}
			if p.NumBlocks != tt.numBlocks || p.BlocksPerRequest != tt.perReq || p.KVCacheTokens != tt.tokens {
				t.Errorf("num_blocks %d, per request %d, KV tokens %d; want %d, %d, %d",
					p.NumBlocks, p.BlocksPerRequest, p.KVCacheTokens, tt.numBlocks, tt.perReq, tt.tokens)
			}
		})
	}
}

func withMode(e Engine, mode string) Engine {
	e.MambaCacheMode = mode
	return e
}

func TestGemma3Of27BGroupsAndWarning(t *testing.T) {
	p := mustPlan(t, modeltest.Load(t, "google__gemma-3-27b-it"), Engine{MaxModelLen: 131072, NoAsyncScheduling: true, Selector: Classic})
	sizes := []int{}
	for _, g := range p.Groups {
		sizes = append(sizes, len(g.Layers))
	}
	want := []int{9, 9, 9, 9, 8, 8, 10}
	for i := range want {
		if i >= len(sizes) || sizes[i] != want[i] {
			t.Fatalf("group sizes = %v, want %v", sizes, want)
		}
	}
	if p.PaddingSlots != 8 || !contains(p.Warnings, "Add 8 padding layers, may waste at most 15.38% KV cache memory") {
		t.Errorf("padding slots %d, warnings %q", p.PaddingSlots, p.Warnings)
	}
	// Group 6 is the full group; the first SW group holds SW layers 0, 6, 12, ...
	if p.Groups[0].Layers[1] != "L7" || p.Groups[6].Kind != model.Full {
		t.Errorf("groups = %v", groupNames(p))
	}
}

func TestPageTable(t *testing.T) {
	// reference/planning.md §2.8 (bf16, block 16, bytes per layer per rank).
	tests := []struct {
		model string
		pages map[int]int64
	}{
		{"openai__gpt-oss-20b", map[int]int64{1: 32768, 2: 16384, 4: 8192, 8: 4096}},
		{"google__gemma-3-27b-it", map[int]int64{1: 131072, 2: 65536, 4: 32768, 8: 16384}},
	}
	for _, tt := range tests {
		for tp, want := range tt.pages {
			p := mustPlan(t, modeltest.Load(t, tt.model), Engine{TensorParallelSize: tp})
			if p.PageBytes != want {
				t.Errorf("%s TP%d page = %d, want %d", tt.model, tp, p.PageBytes, want)
			}
		}
	}
	// Qwen3-Next full layers: 2 KV heads of 256, replicated past TP 2.
	for tp, want := range map[int]int64{1: 2048, 2: 1024, 4: 1024, 8: 1024} {
		p := mustPlan(t, modeltest.Load(t, "Qwen__Qwen3-Next-80B-A3B-Instruct"), Engine{TensorParallelSize: tp})
		if p.Alignment == nil || p.Alignment.AttnBytesPerToken != want {
			t.Errorf("Qwen3-Next TP%d attention bytes per token = %+v, want %d", tp, p.Alignment, want)
		}
	}
}

func TestHybridBlockSizes(t *testing.T) {
	seed := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	tests := []struct {
		name   string
		m      *model.Model
		engine Engine
		block  int
	}{
		// planning.md §3.1: fp32 SSM state, 30 GDN + 10 full.
		{"Qwen3.5-35B-A3B fp32 SSM TP1", modeltest.Load(t, "Qwen__Qwen3.5-35B-A3B"), Engine{TensorParallelSize: 1, MambaSSMCacheDType: "float32"}, 1056},
		{"Qwen3.5-35B-A3B fp32 SSM TP2", modeltest.Load(t, "Qwen__Qwen3.5-35B-A3B"), Engine{TensorParallelSize: 2, MambaSSMCacheDType: "float32"}, 1056},
		{"Qwen3.5-35B-A3B fp32 SSM TP4", modeltest.Load(t, "Qwen__Qwen3.5-35B-A3B"), Engine{TensorParallelSize: 4, MambaSSMCacheDType: "float32"}, 528},
		{"Qwen3.5-35B-A3B fp32 SSM TP8", modeltest.Load(t, "Qwen__Qwen3.5-35B-A3B"), Engine{TensorParallelSize: 8, MambaSSMCacheDType: "float32"}, 272},
		// padding-bytes-selector.md §2: the seed deployment, 7 speculative
		// tokens, bf16 SSM: 592 at TP2 and 304 at TP4; fp32 would give
		// 1104/560; no speculative rows 544/272.
		{"seed TP2", seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}, 592},
		{"seed TP4", seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7}, 304},
		{"seed TP2 fp32", seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7, MambaSSMCacheDType: "float32"}, 1104},
		{"seed TP4 fp32", seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7, MambaSSMCacheDType: "float32"}, 560},
		{"seed TP2 no speculation", seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2}, 544},
		{"seed TP4 no speculation", seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4}, 272},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPlan(t, tt.m, tt.engine)
			if p.BlockSize != tt.block {
				t.Errorf("block size = %d, want %d", p.BlockSize, tt.block)
			}
		})
	}
}

func TestDraftPageUnification(t *testing.T) {
	seed := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	// At TP2 the drafter (8 KV heads x 128 / 2) takes 2,048 B per token, the
	// target 1,024: the target's full layers double their block size to
	// 1184 and the GDN page (606,208 B) is padded to the drafter page
	// 592 * 2,048 = 1,212,416 B (100 %).
	p := mustPlan(t, seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7})
	l3, _ := p.LayerByName("L3")
	l0, _ := p.LayerByName("L0")
	d5, _ := p.LayerByName("draft.L5")
	if l3.Block != 1184 || d5.Block != 592 || l0.Page != 1212416 || l0.Spec.RealPageBytes() != 606208 {
		t.Errorf("L3 block %d, draft.L5 block %d, L0 page %d (real %d)", l3.Block, d5.Block, l0.Page, l0.Spec.RealPageBytes())
	}
	// At TP4 all attention kinds take 1,024 B per token; the loose merge
	// puts the drafter's full layer in the target's full bucket.
	p4 := mustPlan(t, seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7})
	l3p4, _ := p4.LayerByName("L3")
	d5p4, _ := p4.LayerByName("draft.L5")
	if l3p4.Group != d5p4.Group || !p4.Inferred {
		t.Errorf("TP4: draft.L5 in group %d, L3 in group %d, inferred %v; want one group, inferred", d5p4.Group, l3p4.Group, p4.Inferred)
	}
	strict := mustPlan(t, seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7, BucketMerge: Strict})
	l3s, _ := strict.LayerByName("L3")
	d5s, _ := strict.LayerByName("draft.L5")
	if l3s.Group == d5s.Group {
		t.Error("strict merge must keep the drafter's full layer apart from the target's (different head layout)")
	}
	// Classic on the same model splits every bucket by the 1-layer bucket:
	// 46 groups of 1 (reference/planning.md §8.4).
	c := mustPlan(t, seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7, Selector: Classic})
	if c.NumGroups != 46 || c.Slots != 1 {
		t.Errorf("classic: %d groups of %d, want 46 of 1", c.NumGroups, c.Slots)
	}
	// The padding-bytes selector at TP2 picks g=3: 17 groups.
	if p.NumGroups != 17 || p.GroupSize != 3 {
		t.Errorf("padding-bytes at TP2: %d groups, g %d; want 17, 3", p.NumGroups, p.GroupSize)
	}
}

func TestEagleDrafterPadsSlidingWindow(t *testing.T) {
	// gpt-oss-20b + an EAGLE drafter (one full layer, 8 x 64): 12 SW + 13 F
	// gives g = 13 and one padding layer on SW (8.33 %).
	eagle, err := model.Parse([]byte(`{"model_type":"llama","architectures":["EagleLlamaForCausalLM"],"num_hidden_layers":1,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,"max_position_embeddings":131072}`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := modeltest.Load(t, "openai__gpt-oss-20b").WithDraft(eagle)
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, m, Engine{MaxModelLen: 131072, Selector: Classic})
	if p.GroupSize != 13 || p.NumGroups != 2 || !contains(p.Warnings, "Add 1 padding layers, may waste at most 8.33% KV cache memory") {
		t.Errorf("g %d, groups %d, warnings %q", p.GroupSize, p.NumGroups, p.Warnings)
	}
}

func TestGemma3Of12BIsAClean5To1(t *testing.T) {
	// Gemma-3-12B: 48 layers = 40 SW + 8 F, 8 KV heads of 256: page 131,072
	// at TP1, g = 8, 6 groups, no padding (planning.md §8.2).
	m, err := model.Parse([]byte(`{"model_type":"gemma3_text","num_hidden_layers":48,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":256,"sliding_window":1024,"sliding_window_pattern":6}`))
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, m, Engine{Selector: Classic})
	if p.GroupSize != 8 || p.NumGroups != 6 || p.PaddingSlots != 0 || p.PageBytes != 131072 {
		t.Errorf("g %d, groups %d, padding %d, page %d", p.GroupSize, p.NumGroups, p.PaddingSlots, p.PageBytes)
	}
}

func TestPipelineStagesProjectTheGroups(t *testing.T) {
	// Gemma-3-27B at PP2: stages of 31 layers; each stage holds at most 5
	// layers of any group (strided split), so num_blocks = 40 GiB /
	// (5 * 131,072) = 65,536. PP2 puts 2 batches in flight: a sliding group
	// holds ceil((1023+16384)/16)+1 = 1,089 blocks; per request 8,192 + 6 *
	// 1,089 = 14,726; KV tokens int(65,536/14,726 * 131,072) = 583,317.
	p := mustPlan(t, modeltest.Load(t, "google__gemma-3-27b-it"), Engine{PipelineParallelSize: 2, MaxModelLen: 131072, Selector: Classic})
	if len(p.Stages) != 2 || p.Stages[0].Layers != 31 || p.Stages[1].Layers != 31 {
		t.Fatalf("stages = %+v", p.Stages)
	}
	if p.Stages[0].Slots != 5 || p.Stages[1].Slots != 5 || p.NumBlocks != 65536 {
		t.Errorf("stage slots %d/%d, num_blocks %d; want 5/5, 65536", p.Stages[0].Slots, p.Stages[1].Slots, p.NumBlocks)
	}
	if p.BlocksPerRequest != 14726 || p.KVCacheTokens != 583317 {
		t.Errorf("per request %d, tokens %d; want 14726, 583317", p.BlocksPerRequest, p.KVCacheTokens)
	}
	// vLLM's get_pp_indices gives the remainder to the stages before the
	// last: 62 layers at PP4 are 15, 16, 16, 15.
	p4 := mustPlan(t, modeltest.Load(t, "google__gemma-3-27b-it"), Engine{PipelineParallelSize: 4, Selector: Classic})
	for i, want := range []int{15, 16, 16, 15} {
		if p4.Stages[i].Layers != want {
			t.Errorf("PP4 stage %d has %d layers, want %d", i, p4.Stages[i].Layers, want)
		}
	}
}

func TestFixedGroupSizeOverridesTheSelector(t *testing.T) {
	// Gemma-3-27B with --kv-cache-group-size 13: 52 SW layers split into
	// 4 groups of 13, the 10 full layers into 1 group padded by 3.
	p := mustPlan(t, modeltest.Load(t, "google__gemma-3-27b-it"), Engine{GroupSize: 13})
	if p.GroupSize != 13 || p.NumGroups != 5 || p.Slots != 13 || p.PaddingSlots != 3 {
		t.Errorf("g %d, groups %d, slots %d, padding %d; want 13, 5, 13, 3", p.GroupSize, p.NumGroups, p.Slots, p.PaddingSlots)
	}
	if !contains(p.Warnings, "Add 3 padding layers, may waste at most 30.00% KV cache memory") {
		t.Errorf("warnings %q", p.Warnings)
	}
}

func TestInFlightTokens(t *testing.T) {
	tests := []struct {
		e    Engine
		want int
	}{
		{Engine{}, 2 * 8192},
		{Engine{NoAsyncScheduling: true}, 8192},
		{Engine{PipelineParallelSize: 4}, 4 * 8192},
		{Engine{PipelineParallelSize: 4, NoAsyncScheduling: true, MaxNumBatchedTokens: 2048}, 4 * 2048},
		// Before vLLM 0.26 (#47728) the reserve is one batch, whatever runs.
		{Engine{VLLMVersion: "0.25.1"}, 8192},
		{Engine{VLLMVersion: "0.25.1", PipelineParallelSize: 4}, 8192},
		// 0.26 with async scheduling (on by default since 0.14, with PP since 0.15).
		{Engine{VLLMVersion: "0.26.0"}, 2 * 8192},
		{Engine{VLLMVersion: "0.26.0", NoAsyncScheduling: true}, 8192},
	}
	for _, tt := range tests {
		if got := tt.e.InFlightTokens(); got != tt.want {
			t.Errorf("%+v: in-flight tokens %d, want %d", tt.e, got, tt.want)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func TestReviewedVLLMBehaviours(t *testing.T) {
	t.Run("two different windows do not merge into one uniform spec", func(t *testing.T) {
		// merge_window_sizes raises for two windows, so the converted specs
		// are not uniform; UniformTypeKVCacheSpecs takes full attention with
		// any window, so they form one uniform-type group instead.
		p, err := FromSpecs(layers(fullSpec(64), swSpec(64, 128), swSpec(64, 1024)), Engine{MaxModelLen: 4096, DisableHybrid: true})
		if err != nil || p.Dispatch != "uniform-type" {
			t.Errorf("dispatch %v, %v; want uniform-type", p, err)
		}
		q, err := FromSpecs(layers(fullSpec(64), swSpec(64, 128), swSpec(64, 128)), Engine{MaxModelLen: 4096, DisableHybrid: true})
		if err != nil || q.Dispatch != "uniform" {
			t.Errorf("one window merges into a uniform group: %v", err)
		}
	})
	t.Run("an MLA target with a non-MLA drafter is one uniform-type group", func(t *testing.T) {
		eagle, err := model.Parse([]byte(`{"model_type":"llama","num_hidden_layers":1,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128}`))
		if err != nil {
			t.Fatal(err)
		}
		m, err := modeltest.Load(t, "deepseek-ai__DeepSeek-V2-Lite").WithDraft(eagle)
		if err != nil {
			t.Fatal(err)
		}
		p := mustPlan(t, m, Engine{})
		// 27 MLA pages of 16*576*2 = 18,432 B plus one of 16*8*256*2 = 65,536 B.
		if p.Dispatch != "uniform-type" || p.NumGroups != 1 || p.BytesPerBlock != 27*18432+65536 {
			t.Errorf("dispatch %s, %d groups, %d B per block", p.Dispatch, p.NumGroups, p.BytesPerBlock)
		}
	})
	t.Run("mamba_cache_mode all", func(t *testing.T) {
		qn := mustPlan(t, modeltest.Load(t, "Qwen__Qwen3-Next-80B-A3B-Instruct"), Engine{MambaCacheMode: "all", MaxModelLen: 262144})
		if qn.BlockSize != 544 || !contains(qn.Logs, "using align") {
			t.Errorf("Qwen3-Next downgrades all to align: block %d, logs %q", qn.BlockSize, qn.Logs)
		}
		if _, err := New(modeltest.Load(t, "Qwen__Qwen3.5-35B-A3B"), Engine{MambaCacheMode: "all"}); err == nil {
			t.Error("Qwen3.5 rejects mamba_cache_mode all")
		}
		// NemotronH in vLLM 0.19 (a float16 SSM state by its config hook):
		// state page 2,695,168 B, attention 4,096 B per token; chunk
		// lcm(128, 16) = 128: 128 * ceil(ceil(2,695,168/4,096)/128) = 128 *
		// ceil(658/128) = 768; a state group holds ceil(M/768) blocks.
		nh := mustPlan(t, modeltest.Load(t, "nvidia__NVIDIA-Nemotron-Nano-9B-v2"), Engine{VLLMVersion: "0.19.0", MambaCacheMode: "all", MaxModelLen: 131072})
		if nh.BlockSize != 768 {
			t.Errorf("NemotronH block %d, want 768", nh.BlockSize)
		}
		for _, g := range nh.Groups {
			if g.Kind == model.Mamba2 && (g.BlockSize != 768 || g.BlocksPerRequest != (131072+767)/768) {
				t.Errorf("Mamba2 group block %d, %d blocks per request", g.BlockSize, g.BlocksPerRequest)
			}
		}
	})
	t.Run("the NemotronH config hook decides the auto SSM dtype by version", func(t *testing.T) {
		m := modeltest.Load(t, "nvidia__NVIDIA-Nemotron-Nano-9B-v2")
		// TP1 SSM state: 128 heads x 80 x 128 = 1,310,720 elements; conv
		// (4-1) x (10,240 + 2*8*128) = 36,864 elements in bfloat16.
		conv := int64(36864 * 2)
		for _, tt := range []struct {
			version string
			ssm     int64
			note    string
		}{
			{"0.12.0", 2, ""},
			{"0.19.0", 2, "defaults the SSM cache dtype to float16"},
			{"0.20.0", 4, "defaults the SSM cache dtype to float32"},
			{vllm.Branch, 2, ""},
		} {
			p := mustPlan(t, m, Engine{VLLMVersion: tt.version})
			if p.Alignment == nil || p.Alignment.StatePageBytes != conv+1310720*tt.ssm {
				t.Errorf("%s: state page %+v, want %d", tt.version, p.Alignment, conv+1310720*tt.ssm)
			}
			if tt.note != "" && !contains(p.Notes, tt.note) {
				t.Errorf("%s: notes %q", tt.version, p.Notes)
			}
		}
	})
	t.Run("a fixed layout taken from a uniform plan plans again", func(t *testing.T) {
		m := modeltest.Load(t, "Qwen__Qwen3-0.6B")
		p := mustPlan(t, m, Engine{})
		q, err := WithLayout(m, Engine{}, p.Layout())
		if err != nil || q.KVCacheTokens != p.KVCacheTokens {
			t.Errorf("%v, tokens %d vs %d", err, q.KVCacheTokens, p.KVCacheTokens)
		}
		if _, err := WithLayout(m, Engine{}, &Layout{Groups: [][]string{{}}, Buckets: []int{0}}); err == nil {
			t.Error("an empty group must be an error")
		}
		if _, err := WithLayout(m, Engine{}, &Layout{Groups: [][]string{{"L0"}}}); err == nil {
			t.Error("a layout without bucket indices must be an error")
		}
	})
}
