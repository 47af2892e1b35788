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
