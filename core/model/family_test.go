package model

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdataModels holds real configs kvscope refuses, and configs derived
// for tests (each says which in its _source).
var testdataModels = filepath.Join("..", "..", "testdata", "models")

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdataModels, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRefusedLayerKindsAreNamed(t *testing.T) {
	tests := []struct {
		name      string
		config    string // inline JSON, or "@file" under testdata/models
		modelType string
		field     string
		kind      string // a part of the layer kind named
	}{
		{"a published DeepSeek-V4-Flash config: compressed sparse attention", "@nvidia__DeepSeek-V4-Flash-NVFP4", "deepseek_v4", "model_type", "compressed sparse attention"},
		{"Kimi-K3, whose text config is kimi_linear",
			`{"model_type":"kimi_k3","text_config":{"model_type":"kimi_linear","num_hidden_layers":4,"linear_attn_config":{"kda_layers":[1,2,3],"full_attn_layers":[4]}}}`,
			"kimi_k3", "model_type", "kimi_k3"},
		{"GLM-5.3-Flash by its model type",
			`{"model_type":"glm5_next","architectures":["Glm5NextForConditionalGeneration"],"text_config":{"model_type":"glm5_next_text","num_hidden_layers":2,"layer_types":["linear_attention","deepseek_sparse_attention"]}}`,
			"glm5_next", "model_type", "k-pool"},
		{"GLM-5.3-Flash by its architecture when the model type is another",
			`{"model_type":"glm_next_x","architectures":["Glm5NextForCausalLM"],"num_hidden_layers":2}`,
			"glm_next_x", "architectures", "KDA"},
		{"Qwen3.8-Flash-Next as published (qwen4_exp)",
			`{"model_type":"qwen4_exp","architectures":["Qwen4ExpForConditionalGeneration"],"text_config":{"num_hidden_layers":48,"layer_types":["linear_attention"]}}`,
			"qwen4_exp", "model_type", "PLE state"},
		{"DeepSeek-V3.2's indexer beside MLA",
			`{"model_type":"deepseek_v32","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":512,"qk_rope_head_dim":64,"index_n_heads":64}`,
			"deepseek_v32", "model_type", "indexer"},
		{"MiMo-V2.6 (model type mimo_v2)", `{"model_type":"mimo_v2","num_hidden_layers":70}`, "mimo_v2", "model_type", "vLLM class was not read"},
		{"a MiMo-V2.6 architecture under MiMo-V2-Flash's model type",
			`{"model_type":"mimo_v2_flash","architectures":["MiMoV2ForCausalLM"],"num_hidden_layers":48}`,
			"mimo_v2_flash", "architectures", "vLLM class was not read"},
		{"an unknown model type with compress_ratios",
			`{"model_type":"future_v5","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"compress_ratios":[0,4]}`,
			"future_v5", "compress_ratios", "compressed sparse attention"},
		{"an unknown model type with linear_attn_config in its text config",
			`{"model_type":"wrapper","text_config":{"model_type":"mystery","num_hidden_layers":2,"linear_attn_config":{"num_heads":2}}}`,
			"mystery", "text_config.linear_attn_config", "KDA"},
		{"an unknown model type with hyper-connections",
			`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"hc_count":4}`,
			"mystery", "hc_count", "hyper-connection"},
		{"an unknown model type with a sparse-MLA k-pool",
			`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":512,"index_kpool":4}`,
			"mystery", "index_kpool", "k-pool"},
		{"a Mamba state in a hybrid family kvscope does not know (Falcon-H1-like)",
			`{"model_type":"falcon_h1","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"mamba_d_ssm":1024,"mamba_d_state":128}`,
			"falcon_h1", "mamba_d_state", "Mamba state"},
		{"a NemotronH-style state without the pattern",
			`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"ssm_state_size":128}`,
			"mystery", "ssm_state_size", "Mamba state"},
		{"gated-delta-net keys under a model type kvscope does not know",
			`{"model_type":"qwen3_8","text_config":{"model_type":"qwen3_8_text","num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"linear_conv_kernel_dim":4,"linear_num_value_heads":4}}`,
			"qwen3_8_text", "text_config.linear_conv_kernel_dim", "gated-delta-net"},
		{"KV-shared layers outside Gemma 4 (Gemma 3n-like)",
			`{"model_type":"gemma3n_text","num_hidden_layers":4,"num_attention_heads":8,"head_dim":64,"num_kv_shared_layers":2}`,
			"gemma3n_text", "num_kv_shared_layers", "KV-shared"},
		{"a DSA layer type in an attention-only config",
			`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"layer_types":["full_attention","deepseek_sparse_attention"]}`,
			"mystery", "layer_types[1]", "DeepSeek sparse attention"},
		{"linear attention outside the families that read it as GDN",
			`{"model_type":"gpt_oss","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"sliding_window":128,"layer_types":["linear_attention","full_attention"]}`,
			"gpt_oss", "layer_types[0]", "linear attention"},
		{"a Qwen3.5 config with a sparse-attention layer type",
			`{"model_type":"qwen3_5_text","num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"layer_types":["linear_attention","deepseek_sparse_attention"]}`,
			"qwen3_5_text", "layer_types[1]", "DeepSeek sparse attention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.config)
			if name, ok := strings.CutPrefix(tt.config, "@"); ok {
				data = readTestdata(t, name)
			}
			m, err := Parse(data)
			if err == nil {
				t.Fatalf("Parse planned %d layers (%s), want a refusal", len(m.Layers), KindSummary(m.KindCounts()))
			}
			var nm *NotModelledError
			if !errors.As(err, &nm) {
				t.Fatalf("error %v is not a *NotModelledError", err)
			}
			if nm.ModelType != tt.modelType || nm.Field != tt.field || !strings.Contains(nm.LayerKind, tt.kind) {
				t.Errorf("refusal %+v; want model type %s, field %s, a kind with %q", nm, tt.modelType, tt.field, tt.kind)
			}
			msg := err.Error()
			if !strings.Contains(msg, "model_type "+tt.modelType+", layer kind ") || !strings.Contains(msg, ": not modelled by kvscope") {
				t.Errorf("message %q does not read \"model_type X, layer kind Y: not modelled by kvscope\"", msg)
			}
		})
	}
}

func TestUnknownModelTypesWithoutMarkersReadAsDense(t *testing.T) {
	m, err := Parse([]byte(`{"model_type":"olmo2","num_hidden_layers":16,"num_attention_heads":16,"num_key_value_heads":16,"head_dim":128}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.KindCounts(); c[Full] != 16 || len(c) != 1 {
		t.Errorf("kinds %v, want 16 full", c)
	}
	if !strings.Contains(strings.Join(m.Notes, "\n"), "model_type olmo2 is not in kvscope's family table") {
		t.Errorf("notes %q do not say the model type is unknown", m.Notes)
	}
	if _, ok := FamilyOf("olmo2", ""); ok {
		t.Error("olmo2 has a row in the family table")
	}
}

// TestQwen38IsAQwen35Config: Qwen3.8-27B is published as a qwen3_5 config
// (testdata/models/DERIVED__Qwen3.8-27B.json says how that is known):
// layer_types has 16 full_attention and 48 linear_attention entries, and
// mtp_num_hidden_layers = 1.
func TestQwen38IsAQwen35Config(t *testing.T) {
	m, err := Parse(readTestdata(t, "DERIVED__Qwen3.8-27B"))
	if err != nil {
		t.Fatal(err)
	}
	c := m.KindCounts()
	if c[Full] != 16 || c[GatedDeltaNet] != 48 || len(m.MTPLayers) != 1 || m.ModelType != "qwen3_5_text" || m.MambaSSMDType != "float32" {
		t.Errorf("kinds %v, %d MTP layers, model type %s, SSM dtype %q", c, len(m.MTPLayers), m.ModelType, m.MambaSSMDType)
	}
	l3, _ := m.Layer("L3")
	l0, _ := m.Layer("L0")
	if l3.Kind != Full || l3.KVHeads != 4 || l3.HeadDim != 256 || l0.State == nil || l0.State.ValueHeads != 48 || l0.State.KeyHeads != 16 {
		t.Errorf("L3 %+v, L0 %+v", l3, l0.State)
	}
}

// TestMiMoV2Flash: the derived MiMo-V2-Flash config (testdata/models)
// reads as vLLM's mimo_v2_flash.py reads it: hybrid_layer_pattern has 9
// zeros (full: 4 KV heads, K 192, V 128) and 39 ones (sliding: 8 KV heads,
// K 192, V 128, window sliding_window_size = 128).
func TestMiMoV2Flash(t *testing.T) {
	m, err := Parse(readTestdata(t, "DERIVED__MiMo-V2-Flash"))
	if err != nil {
		t.Fatal(err)
	}
	c := m.KindCounts()
	l0, _ := m.Layer("L0")
	l1, _ := m.Layer("L1")
	if c[Full] != 9 || c[Sliding] != 39 || m.AttentionHeads != 64 {
		t.Errorf("kinds %v, heads %d", c, m.AttentionHeads)
	}
	if l0.Kind != Full || l0.KVHeads != 4 || l0.HeadDim != 192 || l0.HeadDimV != 128 {
		t.Errorf("L0 = %+v, want full 4 x (192, 128)", l0)
	}
	if l1.Kind != Sliding || l1.KVHeads != 8 || l1.HeadDim != 192 || l1.HeadDimV != 128 || l1.Window != 128 {
		t.Errorf("L1 = %+v, want sliding 128, 8 x (192, 128)", l1)
	}
	for _, tt := range []struct{ name, json, field string }{
		{"no pattern", `{"model_type":"mimo_v2_flash","num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64}`, "hybrid_layer_pattern"},
		{"a pattern of the wrong length", `{"model_type":"mimo_v2_flash","num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"hybrid_layer_pattern":[0]}`, "hybrid_layer_pattern"},
		{"a pattern entry of 2", `{"model_type":"mimo_v2_flash","num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"hybrid_layer_pattern":[0,2]}`, "hybrid_layer_pattern[1]"},
		{"sliding layers without their window", `{"model_type":"mimo_v2_flash","num_hidden_layers":2,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"swa_num_attention_heads":8,"swa_num_key_value_heads":2,"swa_head_dim":64,"hybrid_layer_pattern":[0,1]}`, "sliding_window_size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.json))
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("error %v, want one naming %s", err, tt.field)
			}
		})
	}
}

func TestFamilyTable(t *testing.T) {
	owner := map[string]string{}
	for _, f := range Families() {
		if f.Name == "" || f.LayerKinds == "" || len(f.ModelTypes) == 0 {
			t.Errorf("row %+v lacks a name, layer kinds or model types", f)
		}
		switch f.Status {
		case Modelled, Inferred, Refused:
		default:
			t.Errorf("%s: status %q", f.Name, f.Status)
		}
		if f.Status == Inferred && f.Note == "" {
			t.Errorf("%s is inferred without saying why", f.Name)
		}
		for _, mt := range f.ModelTypes {
			if prev, dup := owner[mt]; dup {
				t.Errorf("model type %s is in %s and %s", mt, prev, f.Name)
			}
			owner[mt] = f.Name
		}
	}
	t.Run("every bundled config is of a planned family", func(t *testing.T) {
		files, _ := filepath.Glob(filepath.Join(catalogDir, "*.json"))
		for _, file := range files {
			name := strings.TrimSuffix(filepath.Base(file), ".json")
			m := load(t, name)
			f, ok := FamilyOf(m.ModelType, m.Architecture)
			if !ok || f.Status != Modelled {
				t.Errorf("%s: model type %q is %v in the table (%s)", name, m.ModelType, f.Status, f.Name)
			}
		}
	})
	t.Run("prefixes follow the parser's dispatch", func(t *testing.T) {
		for mt, want := range map[string]string{"gemma4_unified_text": "Gemma 4", "qwen3_5_moe_text": "Qwen3.5 / Qwen3.6 / Qwen3.8", "gemma3n_text": "Gemma 2 / 3"} {
			if f, ok := FamilyOf(mt, ""); !ok || f.Name != want {
				t.Errorf("FamilyOf(%s) = %q, %v; want %s", mt, f.Name, ok, want)
			}
		}
	})
	t.Run("Families returns a copy", func(t *testing.T) {
		a := Families()
		a[0].Status = Refused
		if Families()[0].Status == Refused {
			t.Error("a caller changed the table")
		}
	})
}
