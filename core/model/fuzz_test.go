package model_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// FuzzParse checks that no config makes the parser panic, that every error
// names a field (a refusal also the layer kind), and that every config that parses gives a plan that places
// each KV-owning layer exactly once (or a typed error naming a flag).
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(modeltest.Dir(), "*.json"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "models", "*.json"))
	files = append(files, more...)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		`{}`, `null`, `[]`, `{"num_hidden_layers": 2}`, `{"text_config": 3}`,
		`{"num_hidden_layers":3,"hybrid_override_pattern":"M*-","num_attention_heads":8,"head_dim":64}`,
		`{"model_type":"gemma4_text","num_hidden_layers":4,"num_attention_heads":8,"head_dim":64,"global_head_dim":128,"sliding_window":512,"layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"],"num_kv_shared_layers":2}`,
		// Refusals by name (core/model's family table and hybrid markers).
		`{"model_type":"deepseek_v4","num_hidden_layers":3,"compress_ratios":[0,4,128],"kv_lora_rank":512}`,
		`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"compress_ratios":[0,4]}`,
		`{"model_type":"mystery","text_config":{"num_hidden_layers":2,"linear_attn_config":{"num_heads":2}}}`,
		`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"kv_lora_rank":512,"index_n_heads":64,"index_topk":2048}`,
		`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"hc_mult":4}`,
		`{"model_type":"glm5_next","text_config":{"model_type":"glm5_next_text","num_hidden_layers":2,"layer_types":["linear_attention","deepseek_sparse_attention"],"index_kpool":4}}`,
		`{"model_type":"qwen4_exp","text_config":{"num_hidden_layers":4,"hc_count":4,"indexer_n_heads":2}}`,
		`{"model_type":"kimi_k3","text_config":{"model_type":"kimi_linear","num_hidden_layers":2}}`,
		`{"model_type":"mimo_v2","num_hidden_layers":2}`,
		`{"model_type":"mimo_v2_flash","architectures":["MiMoV2ForCausalLM"],"num_hidden_layers":2}`,
		`{"model_type":"mimo_v2_flash","num_hidden_layers":3,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"v_head_dim":32,"swa_num_attention_heads":8,"swa_num_key_value_heads":4,"swa_head_dim":64,"sliding_window_size":128,"hybrid_layer_pattern":[0,1,1]}`,
		`{"architectures":["Glm5NextForCausalLM"],"model_type":"x","num_hidden_layers":2}`,
		`{"model_type":"mystery","num_hidden_layers":2,"num_attention_heads":8,"head_dim":64,"layer_types":["full_attention","deepseek_sparse_attention"]}`,
		// Kimi-Linear (KDA + MLA); a third-party qwen3_8 config (refused by its GDN keys).
		`{"model_type":"kimi_linear","num_hidden_layers":4,"num_attention_heads":8,"kv_lora_rank":64,"qk_rope_head_dim":16,"linear_attn_config":{"num_heads":4,"head_dim":32,"short_conv_kernel_size":4,"kda_layers":[1,2,3]}}`,
		`{"model_type":"qwen3_8","text_config":{"model_type":"qwen3_8_text","num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64,"full_attention_interval":4,"linear_conv_kernel_dim":4,"linear_num_key_heads":2,"linear_num_value_heads":4,"linear_key_head_dim":32,"linear_value_head_dim":32}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := model.Parse(data)
		if err != nil {
			var fe *model.FieldError
			var nm *model.NotModelledError
			switch {
			case errors.As(err, &fe) && fe.Field != "":
			case errors.As(err, &nm) && nm.Field != "" && nm.LayerKind != "":
			default:
				t.Fatalf("error %v does not name a field", err)
			}
			return
		}
		owning := map[string]bool{}
		for _, l := range m.Layers {
			if l.OwnsKV() {
				owning[l.Name] = true
			}
		}
		p, err := plan.New(m, plan.Engine{})
		if err != nil {
			return // a model can be unplannable at TP 1 with defaults (e.g. a huge derived max_model_len); it must not panic
		}
		seen := map[string]bool{}
		for _, g := range p.Groups {
			for _, name := range g.Layers {
				if seen[name] || !owning[name] {
					t.Fatalf("layer %s placed twice or owns no KV", name)
				}
				seen[name] = true
			}
		}
		if len(seen) != len(owning) {
			t.Fatalf("plan places %d layers, model has %d with a KV cache", len(seen), len(owning))
		}
		if p.NumBlocks < 0 || p.KVCacheTokens < 0 || p.BlocksPerRequest <= 0 || p.PageBytes <= 0 {
			t.Fatalf("impossible plan numbers: %+v", p)
		}
	})
}
