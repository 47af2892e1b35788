package model

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// catalogDir holds the bundled configs (core/catalog/models; tests of
// packages that may import modeltest find it with modeltest.Dir).
var catalogDir = filepath.Join("..", "catalog", "models")

func load(t testing.TB, name string) *Model {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(catalogDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// The expected counts are read off the config files by hand: layer_types,
// hybrid_override_pattern, no_rope_layers and the sliding-window patterns.
func TestEveryBundledModelParses(t *testing.T) {
	tests := []struct {
		file   string
		layers int
		kinds  map[Kind]int
		owning int // layers that own a KV cache
		mtp    int
	}{
		{"Qwen__Qwen3-0.6B", 28, map[Kind]int{Full: 28}, 28, 0},
		{"Qwen__Qwen3-Next-80B-A3B-Instruct", 48, map[Kind]int{Full: 12, GatedDeltaNet: 36}, 48, 0},
		{"Qwen__Qwen3.5-0.8B", 24, map[Kind]int{Full: 6, GatedDeltaNet: 18}, 24, 1},
		{"Qwen__Qwen3.5-2B", 24, map[Kind]int{Full: 6, GatedDeltaNet: 18}, 24, 1},
		{"Qwen__Qwen3.5-35B-A3B", 40, map[Kind]int{Full: 10, GatedDeltaNet: 30}, 40, 1},
		{"Qwen__Qwen3.5-4B", 32, map[Kind]int{Full: 8, GatedDeltaNet: 24}, 32, 1},
		{"Qwen__Qwen3.5-9B", 32, map[Kind]int{Full: 8, GatedDeltaNet: 24}, 32, 1},
		{"Qwen__Qwen3.5-27B", 64, map[Kind]int{Full: 16, GatedDeltaNet: 48}, 64, 1},
		{"Qwen__Qwen3.5-35B-A3B-FP8", 40, map[Kind]int{Full: 10, GatedDeltaNet: 30}, 40, 1},
		{"Qwen__Qwen2.5-14B", 48, map[Kind]int{Full: 48}, 48, 0},
		{"Qwen__Qwen2.5-32B", 64, map[Kind]int{Full: 64}, 64, 0},
		{"Qwen__Qwen2.5-VL-7B-Instruct", 28, map[Kind]int{Full: 28}, 28, 0},
		{"Qwen__Qwen3-8B", 36, map[Kind]int{Full: 36}, 36, 0},
		{"Qwen__Qwen3-14B", 40, map[Kind]int{Full: 40}, 40, 0},
		{"Qwen__Qwen3-32B", 64, map[Kind]int{Full: 64}, 64, 0},
		{"Qwen__Qwen3-30B-A3B", 48, map[Kind]int{Full: 48}, 48, 0},
		{"Qwen__Qwen3-Coder-30B-A3B-Instruct", 48, map[Kind]int{Full: 48}, 48, 0},
		// 94 layers, no layer_types, use_sliding_window false: all full.
		{"Qwen__Qwen3-235B-A22B-Instruct-2507", 94, map[Kind]int{Full: 94}, 94, 0},
		{"deepseek-ai__DeepSeek-R1-Distill-Qwen-7B", 28, map[Kind]int{Full: 28}, 28, 0},
		{"ibm-granite__granite-4.0-h-1b", 40, map[Kind]int{Full: 4, Mamba2: 36}, 40, 0},
		{"ibm-granite__granite-4.0-h-tiny", 40, map[Kind]int{Full: 4, Mamba2: 36}, 40, 0},
		{"meta-llama__Llama-3.1-8B-Instruct", 32, map[Kind]int{Full: 32}, 32, 0},
		{"meta-llama__Meta-Llama-3-8B-Instruct", 32, map[Kind]int{Full: 32}, 32, 0},
		// Phi-3-mini-4k sets sliding_window 2047 without use_sliding_window:
		// every layer is sliding (the real 0.19.1 log's concurrency agrees).
		{"microsoft__Phi-3-mini-4k-instruct", 32, map[Kind]int{Sliding: 32}, 32, 0},
		{"nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 29, map[Kind]int{Full: 6, Mamba2: 23}, 29, 0},
		{"Qwen__Qwen3.6-27B", 64, map[Kind]int{Full: 16, GatedDeltaNet: 48}, 64, 1},
		{"Qwen__Qwen3.6-35B-A3B-FP8", 40, map[Kind]int{Full: 10, GatedDeltaNet: 30}, 40, 1},
		{"Qwen__Qwen3.6-35B-A3B", 40, map[Kind]int{Full: 10, GatedDeltaNet: 30}, 40, 1},
		{"deepseek-ai__DeepSeek-V2-Lite", 27, map[Kind]int{MLA: 27}, 27, 0},
		{"deepseek-ai__DeepSeek-V3", 61, map[Kind]int{MLA: 61}, 61, 1},
		{"google__gemma-3-1b-it", 26, map[Kind]int{Full: 4, Sliding: 22}, 26, 0},
		{"google__gemma-3-27b-it", 62, map[Kind]int{Full: 10, Sliding: 52}, 62, 0},
		{"google__gemma-4-26B-A4B-it", 30, map[Kind]int{Full: 5, Sliding: 25}, 30, 0},
		{"google__gemma-4-31B-it", 60, map[Kind]int{Full: 10, Sliding: 50}, 60, 0},
		{"google__gemma-4-E2B", 35, map[Kind]int{Full: 7, Sliding: 28}, 15, 0},
		{"meta-llama__Llama-3.1-8B", 32, map[Kind]int{Full: 32}, 32, 0},
		{"meta-llama__Llama-4-Scout-17B-16E", 48, map[Kind]int{Full: 12, ChunkedLocal: 36}, 48, 0},
		{"nvidia__NVIDIA-Nemotron-Nano-9B-v2", 31, map[Kind]int{Full: 4, Mamba2: 27}, 31, 0},
		{"openai__gpt-oss-120b", 36, map[Kind]int{Full: 18, Sliding: 18}, 36, 0},
		{"openai__gpt-oss-20b", 24, map[Kind]int{Full: 12, Sliding: 12}, 24, 0},
		{"z-lab__Qwen3.6-35B-A3B-DFlash", 6, map[Kind]int{Full: 1, Sliding: 5}, 6, 0},
		// linear_attn_config.kda_layers lists 20 of the 27 layers (1-based);
		// the other 7 (full_attn_layers 4, 8, ..., 24, 27) are MLA.
		{"moonshotai__Kimi-Linear-48B-A3B-Instruct", 27, map[Kind]int{KDA: 20, MLA: 7}, 27, 0},
	}
	files, _ := filepath.Glob(filepath.Join(catalogDir, "*.json"))
	if len(files) != len(tests) {
		t.Errorf("core/catalog/models holds %d configs, the table covers %d", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			m := load(t, tt.file)
			if len(m.Layers) != tt.layers {
				t.Errorf("layers = %d, want %d", len(m.Layers), tt.layers)
			}
			got := m.KindCounts()
			for k, n := range tt.kinds {
				if got[k] != n {
					t.Errorf("%s layers = %d, want %d", k, got[k], n)
				}
			}
			if len(got) != len(tt.kinds) {
				t.Errorf("kinds = %v, want %v", got, tt.kinds)
			}
			owning := 0
			for _, l := range m.Layers {
				if l.OwnsKV() {
					owning++
				}
			}
			if owning != tt.owning {
				t.Errorf("KV-owning layers = %d, want %d", owning, tt.owning)
			}
			if len(m.MTPLayers) != tt.mtp {
				t.Errorf("MTP layers = %d, want %d", len(m.MTPLayers), tt.mtp)
			}
		})
	}
}

func TestLayerDimensions(t *testing.T) {
	t.Run("Gemma-4 31B full layers use the global head dim and global KV heads", func(t *testing.T) {
		m := load(t, "google__gemma-4-31B-it")
		full, _ := m.Layer("L5")
		slide, _ := m.Layer("L0")
		if full.Kind != Full || full.HeadDim != 512 || full.KVHeads != 4 {
			t.Errorf("L5 = %+v, want full, 4 heads of 512", full)
		}
		if slide.Kind != Sliding || slide.HeadDim != 256 || slide.KVHeads != 16 || slide.Window != 1024 {
			t.Errorf("L0 = %+v, want sliding 1024, 16 heads of 256", slide)
		}
	})
	t.Run("Gemma-4 E2B shared layers read the last earlier layer of their type", func(t *testing.T) {
		m := load(t, "google__gemma-4-E2B")
		for name, want := range map[string]string{"L15": "L13", "L19": "L14", "L34": "L14", "L33": "L13", "L14": ""} {
			l, _ := m.Layer(name)
			if l.SharesKVWith != want {
				t.Errorf("%s shares with %q, want %q", name, l.SharesKVWith, want)
			}
		}
		full, _ := m.Layer("L4")
		if full.HeadDim != 512 || full.KVHeads != 1 {
			t.Errorf("L4 = %+v, want 1 head of 512 (num_global_key_value_heads is null and k_eq_v is off)", full)
		}
	})
	t.Run("MLA stores kv_lora_rank + qk_rope_head_dim once", func(t *testing.T) {
		m := load(t, "deepseek-ai__DeepSeek-V2-Lite")
		if l := m.Layers[0]; l.Kind != MLA || l.HeadDim != 576 || l.KVHeads != 1 || l.HeadDimV != 0 {
			t.Errorf("layer 0 = %+v, want MLA 576", l)
		}
	})
	t.Run("Nemotron-H Mamba2 layers sit where the pattern has M", func(t *testing.T) {
		m := load(t, "nvidia__NVIDIA-Nemotron-Nano-9B-v2")
		l0, _ := m.Layer("L0")
		l14, _ := m.Layer("L14")
		if l0.Kind != Mamba2 || l0.State.Intermediate != 10240 || l0.State.Groups != 8 || l0.State.StateSize != 128 {
			t.Errorf("L0 = %+v %+v, want Mamba2 with d_inner 128*80", l0, l0.State)
		}
		if l14.Kind != Full || l14.KVHeads != 8 || l14.HeadDim != 128 {
			t.Errorf("L14 = %+v, want full attention 8x128", l14)
		}
		if _, ok := m.Layer("L1"); ok {
			t.Error("L1 is an MLP layer and must have no cache")
		}
	})
	t.Run("Llama 4 no-RoPE layers are global", func(t *testing.T) {
		m := load(t, "meta-llama__Llama-4-Scout-17B-16E")
		l3, _ := m.Layer("L3")
		l0, _ := m.Layer("L0")
		if l3.Kind != Full || l0.Kind != ChunkedLocal || l0.Chunk != 8192 {
			t.Errorf("L3 = %s, L0 = %s/%d; want full and chunked 8192", l3.Kind, l0.Kind, l0.Chunk)
		}
	})
	t.Run("Qwen3-Next derives layer types from full_attention_interval", func(t *testing.T) {
		m := load(t, "Qwen__Qwen3-Next-80B-A3B-Instruct")
		l3, _ := m.Layer("L3")
		l47, _ := m.Layer("L47")
		l46, _ := m.Layer("L46")
		if l3.Kind != Full || l47.Kind != Full || l46.Kind != GatedDeltaNet {
			t.Errorf("L3 %s, L46 %s, L47 %s", l3.Kind, l46.Kind, l47.Kind)
		}
		if s := l46.State; s.KeyHeads != 16 || s.ValueHeads != 32 || s.KeyHeadDim != 128 || s.ConvKernel != 4 {
			t.Errorf("GDN dims %+v", s)
		}
	})
	t.Run("Kimi-Linear: kda_layers are 1-based, the rest are MLA of 512 + 64", func(t *testing.T) {
		m := load(t, "moonshotai__Kimi-Linear-48B-A3B-Instruct")
		l0, _ := m.Layer("L0")   // kda_layers[0] = 1
		l3, _ := m.Layer("L3")   // full_attn_layers[0] = 4
		l26, _ := m.Layer("L26") // full_attn_layers[6] = 27
		if l0.Kind != KDA || l0.State.Heads != 32 || l0.State.HeadDim != 128 || l0.State.ConvKernel != 4 {
			t.Errorf("L0 = %s %+v, want KDA 32 heads of 128, conv 4", l0.Kind, l0.State)
		}
		for _, l := range []Layer{l3, l26} {
			if l.Kind != MLA || l.HeadDim != 576 || l.KVHeads != 1 {
				t.Errorf("%s = %+v, want MLA 576", l.Name, l)
			}
		}
		if m.MaxModelLen != 1048576 || m.AttentionHeads != 32 {
			t.Errorf("max_model_len %d (model_max_length 1048576), heads %d", m.MaxModelLen, m.AttentionHeads)
		}
	})
	t.Run("max_model_len follows rope scaling", func(t *testing.T) {
		// yarn: original_max_position_embeddings 4096 * factor 40
		if m := load(t, "deepseek-ai__DeepSeek-V3"); m.MaxModelLen != 163840 {
			t.Errorf("DeepSeek-V3 max_model_len = %d, want 163840", m.MaxModelLen)
		}
		// llama3 rope type does not scale
		if m := load(t, "meta-llama__Llama-4-Scout-17B-16E"); m.MaxModelLen != 262144 {
			t.Errorf("Llama 4 max_model_len = %d, want 262144", m.MaxModelLen)
		}
	})
	t.Run("a missing model_type reads as Llama and says so", func(t *testing.T) {
		m, err := Parse([]byte(`{"hidden_size": 4096, "num_hidden_layers": 32}`))
		if err != nil {
			t.Fatal(err)
		}
		if m.Layers[0].KVHeads != 32 || !strings.Contains(strings.Join(m.Notes, "\n"), "num_key_value_heads missing") {
			t.Errorf("kv heads %d, notes %q", m.Layers[0].KVHeads, m.Notes)
		}
	})
	t.Run("Llama-3.1-8B's real config: 8 KV heads of 128, 131,072 tokens", func(t *testing.T) {
		m := load(t, "meta-llama__Llama-3.1-8B")
		if l := m.Layers[0]; l.KVHeads != 8 || l.HeadDim != 128 || m.MaxModelLen != 131072 {
			t.Errorf("L0 %+v, max len %d", l, m.MaxModelLen)
		}
	})
}

func TestMamba1Families(t *testing.T) {
	t.Run("a pure Mamba model is all Mamba1 with d_inner = expand * hidden", func(t *testing.T) {
		m, err := Parse([]byte(`{"model_type":"mamba","num_hidden_layers":24,"hidden_size":768,"state_size":16,"conv_kernel":4,"expand":2}`))
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Layers) != 24 || m.KindCounts()[Mamba1] != 24 || m.Layers[0].State.Intermediate != 1536 {
			t.Errorf("%d layers, %v, state %+v", len(m.Layers), m.KindCounts(), m.Layers[0].State)
		}
	})
	t.Run("Jamba puts attention every attn_layer_period layers at the offset", func(t *testing.T) {
		m, err := Parse([]byte(`{"model_type":"jamba","num_hidden_layers":32,"hidden_size":4096,"num_attention_heads":32,"num_key_value_heads":8,"attn_layer_period":8,"attn_layer_offset":4}`))
		if err != nil {
			t.Fatal(err)
		}
		l4, _ := m.Layer("L4")
		l12, _ := m.Layer("L12")
		l5, _ := m.Layer("L5")
		if c := m.KindCounts(); c[Full] != 4 || c[Mamba1] != 28 || l4.Kind != Full || l12.Kind != Full || l5.Kind != Mamba1 || l5.State.Intermediate != 8192 {
			t.Errorf("counts %v, L4 %s, L12 %s, L5 %s %+v", c, l4.Kind, l12.Kind, l5.Kind, l5.State)
		}
	})
}

func TestDraftAttachesAfterTarget(t *testing.T) {
	target := load(t, "Qwen__Qwen3.6-35B-A3B")
	draft := load(t, "z-lab__Qwen3.6-35B-A3B-DFlash")
	m, err := target.WithDraft(draft)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 46 {
		t.Fatalf("layers = %d, want 40 + 6", len(m.Layers))
	}
	last := m.Layers[45]
	if last.Name != "draft.L5" || last.Role != Draft || last.Kind != Full || last.KVHeads != 8 || last.HeadDim != 128 {
		t.Errorf("last layer = %+v", last)
	}
	if len(target.Layers) != 40 {
		t.Error("WithDraft modified the target")
	}
	mtp, err := target.WithMTP()
	if err != nil {
		t.Fatal(err)
	}
	if l := mtp.Layers[40]; l.Name != "mtp.L0" || l.Role != MTP || l.Kind != Full || l.KVHeads != 2 || l.HeadDim != 256 {
		t.Errorf("MTP layer = %+v", l)
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		field string
		value string
	}{
		{"not JSON", `{"num_hidden_layers": `, "config.json", ""},
		{"a list instead of an object", `[1,2]`, "config.json", ""},
		{"missing num_hidden_layers", `{"model_type":"llama","num_attention_heads":8}`, "num_hidden_layers", ""},
		{"zero layers", `{"num_hidden_layers":0}`, "num_hidden_layers", "0"},
		{"negative KV heads", `{"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":-2,"head_dim":64}`, "num_key_value_heads", "-2"},
		{"KV heads that do not divide the heads", `{"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":3,"head_dim":64}`, "num_key_value_heads", "3"},
		{"hidden size not divisible by heads", `{"num_hidden_layers":2,"num_attention_heads":7,"hidden_size":100}`, "hidden_size", "100"},
		{"fractional head_dim", `{"num_hidden_layers":2,"num_attention_heads":8,"head_dim":64.5}`, "head_dim", "64.5"},
		{"string layer count", `{"num_hidden_layers":"two"}`, "num_hidden_layers", `"two"`},
		{"layer_types too short", `{"model_type":"gpt_oss","num_hidden_layers":3,"num_attention_heads":8,"head_dim":64,"sliding_window":128,"layer_types":["full_attention","sliding_attention"]}`, "layer_types", "[2 entries]"},
		{"unknown layer type", `{"model_type":"gpt_oss","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"sliding_window":128,"layer_types":["full_attention","banana"]}`, "layer_types[1]", `"banana"`},
		{"sliding layers without a window", `{"model_type":"gpt_oss","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"layer_types":["full_attention","sliding_attention"]}`, "sliding_window", ""},
		{"nested text_config error carries its path", `{"text_config":{"model_type":"qwen3_5_text","num_hidden_layers":4,"linear_num_value_heads":0}}`, "text_config.linear_num_value_heads", "0"},
		{"GDN value heads not a multiple of key heads", `{"model_type":"qwen3_next","num_hidden_layers":4,"linear_num_key_heads":16,"linear_num_value_heads":24}`, "linear_num_value_heads", "24"},
		{"hybrid pattern of the wrong length", `{"num_hidden_layers":3,"hybrid_override_pattern":"M*","num_attention_heads":8,"head_dim":64}`, "hybrid_override_pattern", `"M*"`},
		{"unknown hybrid pattern code", `{"num_hidden_layers":2,"hybrid_override_pattern":"MX","num_attention_heads":8,"head_dim":64}`, "hybrid_override_pattern[1]", `'X'`},
		{"Mamba2 groups that do not divide heads", `{"num_hidden_layers":1,"hybrid_override_pattern":"M","mamba_num_heads":10,"n_groups":3}`, "n_groups", "3"},
		{"unknown dtype", `{"num_hidden_layers":1,"num_attention_heads":8,"head_dim":64,"torch_dtype":"int3"}`, "torch_dtype", `"int3"`},
		{"MLA without kv_lora_rank size", `{"model_type":"deepseek_v3","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":0}`, "kv_lora_rank", "0"},
		{"too many shared KV layers", `{"model_type":"gemma4_text","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"global_head_dim":128,"sliding_window":512,"layer_types":["sliding_attention","full_attention"],"num_kv_shared_layers":2}`, "num_kv_shared_layers", "2"},
		{"no_rope_layers of the wrong length", `{"model_type":"llama4_text","num_hidden_layers":3,"num_attention_heads":8,"head_dim":64,"attention_chunk_size":8192,"no_rope_layers":[1,0]}`, "no_rope_layers", "[2 entries]"},
		{"huge layer count", `{"num_hidden_layers":1e12}`, "num_hidden_layers", "1e12"},
		{"Kimi-Linear without linear_attn_config", `{"model_type":"kimi_linear","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":512,"qk_rope_head_dim":64}`, "linear_attn_config", ""},
		{"a KDA layer number of 0 (the list is 1-based)", `{"model_type":"kimi_linear","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":512,"qk_rope_head_dim":64,"linear_attn_config":{"num_heads":4,"head_dim":64,"short_conv_kernel_size":4,"kda_layers":[0]}}`, "linear_attn_config.kda_layers[0]", "0"},
		{"a KDA layer past the last", `{"model_type":"kimi_linear","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":512,"qk_rope_head_dim":64,"linear_attn_config":{"num_heads":4,"head_dim":64,"short_conv_kernel_size":4,"kda_layers":[1,3]}}`, "linear_attn_config.kda_layers[1]", "3"},
		{"KDA heads of zero", `{"model_type":"kimi_linear","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":512,"qk_rope_head_dim":64,"linear_attn_config":{"num_heads":0,"head_dim":64,"short_conv_kernel_size":4,"kda_layers":[1]}}`, "linear_attn_config.num_heads", "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse([]byte(tt.json))
			if err == nil {
				t.Fatalf("Parse succeeded with %d layers, want an error naming %s", len(m.Layers), tt.field)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if fe.Field != tt.field && !strings.HasSuffix(fe.Field, "."+tt.field) {
				t.Errorf("field = %q, want %q (%v)", fe.Field, tt.field, err)
			}
			if fe.Value != tt.value {
				t.Errorf("value = %q, want %q (%v)", fe.Value, tt.value, err)
			}
		})
	}
}

func TestGemma4WithoutLayerTypesUsesItsPattern(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"gemma4_text","num_hidden_layers":12,"num_attention_heads":8}`))
	if err != nil {
		t.Fatal(err)
	}
	// transformers' defaults: 5 sliding (512 tokens, 4 KV heads of 256),
	// then 1 full (global head dim 512).
	l5, _ := m.Layer("L5")
	l4, _ := m.Layer("L4")
	if c := m.KindCounts(); c[Full] != 2 || c[Sliding] != 10 || l5.Kind != Full || l5.HeadDim != 512 || l4.Window != 512 || l4.KVHeads != 4 {
		t.Errorf("counts %v, L5 %+v, L4 %+v", c, l5, l4)
	}
}

// TestBundledConfigsAreComplete: a bundled config is the model's own
// config.json, so no head count or size comes from a transformers class
// default. (max_position_embeddings may: Gemma-3's published text_config
// leaves it out, and vLLM reads the class default too.)
func TestBundledConfigsAreComplete(t *testing.T) {
	known := map[string]string{
		// The published config.json was not found; the bundled file (a
		// public test fixture built on it) lacks chunk_size, which only
		// --mamba-cache-mode all reads.
		"nvidia__NVIDIA-Nemotron-Nano-9B-v2": "chunk_size missing",
	}
	files, _ := filepath.Glob(filepath.Join(catalogDir, "*.json"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), `"_source"`) {
				t.Error("a bundled config says where it comes from in _source")
			}
			for _, n := range load(t, name).Notes {
				if !strings.Contains(n, "missing: using") || strings.Contains(n, "max_position_embeddings") {
					continue
				}
				if want, ok := known[name]; ok && strings.Contains(n, want) {
					continue
				}
				t.Errorf("relies on a class default: %s", n)
			}
		})
	}
}
