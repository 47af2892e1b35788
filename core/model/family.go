package model

import (
	"fmt"
	"strings"
)

// Status says what kvscope does with the configs of a model family.
type Status string

// The statuses of a model family.
const (
	// Modelled: Parse reads the family as vLLM's model code reads it.
	Modelled Status = "modelled"
	// Inferred: Parse reads the family as another one it is believed to
	// share its layers with; the vLLM class for it was not read, and the
	// model's notes say so.
	Inferred Status = "inferred"
	// Refused: the family has a layer kind kvscope does not model; Parse
	// returns a *NotModelledError naming it.
	Refused Status = "refused"
	// Unknown: the model type is in no row of the table. Parse reads it
	// as a dense decoder (full or sliding attention) when the config
	// carries no marker of a hybrid layer kind, and refuses it when it
	// does; the model's notes say which.
	Unknown Status = "unknown"
)

// Family is one row of kvscope's table of model families: which config
// model types (and, where the model type is unconfirmed, architectures)
// it covers, and what kvscope does with them.
type Family struct {
	Name       string   `json:"name"`        // "Qwen3.5 / Qwen3.6"
	ModelTypes []string `json:"model_types"` // config model_type values, top level or text_config
	// Prefixes are model-type prefixes the parser reads as this family too
	// ("gemma4" covers gemma4_unified).
	Prefixes      []string `json:"model_type_prefixes,omitempty"`
	Architectures []string `json:"architectures,omitempty"` // architectures that identify the family when its model type is unconfirmed
	Status        Status   `json:"status"`
	// LayerKinds are the kinds kvscope plans for the family's layers
	// (modelled, inferred), or the kind it does not model (refused).
	LayerKinds string `json:"layer_kinds"`
	Note       string `json:"note,omitempty"` // where the reading comes from, or why a family is refused

	reads []string // hybrid-marker keys the family's reading covers
}

// Families returns kvscope's table of model families, in display order: a
// new copy on every call.
func Families() []Family {
	return []Family{
		{Name: "Llama-style decoders", ModelTypes: []string{"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text", "glm4_moe", "phi3"},
			Status: Modelled, LayerKinds: "full (sliding_window where the config enables it)",
			Note: "num_key_value_heads x head_dim per layer; sliding_window with use_sliding_window"},
		{Name: "gpt-oss", ModelTypes: []string{"gpt_oss"}, Status: Modelled, LayerKinds: "full + sliding_window (layer_types)"},
		{Name: "Gemma 2 / 3", ModelTypes: []string{"gemma2", "gemma3", "gemma3_text"}, Prefixes: []string{"gemma2", "gemma3"}, Status: Modelled, LayerKinds: "sliding_window + full (layer_types or the sliding-window pattern)"},
		{Name: "Gemma 4", ModelTypes: []string{"gemma4", "gemma4_text"}, Prefixes: []string{"gemma4"}, Status: Modelled, reads: []string{"num_kv_shared_layers"},
			LayerKinds: "sliding_window + full, KV-shared layers", Note: "full layers use global_head_dim; the last num_kv_shared_layers read an earlier layer's KV"},
		{Name: "Llama 4", ModelTypes: []string{"llama4", "llama4_text"}, Status: Modelled, LayerKinds: "chunked_local + full (no_rope_layers)"},
		{Name: "DeepSeek-V2 / V3, Kimi-K2 (MLA)", ModelTypes: []string{"deepseek_v2", "deepseek_v3", "kimi_k2"}, Status: Modelled,
			LayerKinds: "mla (kv_lora_rank + qk_rope_head_dim), MTP layers", Note: "only without a sparse-attention indexer (see DeepSeek-V3.2)"},
		{Name: "Qwen3-Next", ModelTypes: []string{"qwen3_next"}, Prefixes: []string{"qwen3_next"}, Status: Modelled, LayerKinds: "gdn + full", reads: gdnKeys()},
		{Name: "Qwen3.5 / Qwen3.6 / Qwen3.8", ModelTypes: []string{"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}, Prefixes: []string{"qwen3_5"}, Status: Modelled, LayerKinds: "gdn + full, MTP layers", reads: gdnKeys(),
			Note: "Qwen3.8-27B and Qwen3.8-2.4T-A95B are published with these model types and Qwen3.5's architectures"},
		{Name: "Kimi-Linear", ModelTypes: []string{"kimi_linear"}, Architectures: []string{"KimiLinearForCausalLM"}, Status: Modelled,
			LayerKinds: "kda + mla (linear_attn_config.kda_layers, 1-based)", reads: []string{"linear_attn_config"},
			Note: "vLLM's kimi_linear.py: MLA latent kv_lora_rank + qk_rope_head_dim; KDA state per MambaStateShapeCalculator.kda_state_shape and kda_state_dtype (recurrent state float32)"},
		{Name: "MiMo-V2-Flash", ModelTypes: []string{"mimo_v2_flash"}, Architectures: []string{"MiMoV2FlashForCausalLM"}, Status: Modelled,
			LayerKinds: "sliding_window + full (hybrid_layer_pattern), K and V heads of different sizes",
			Note:       "vLLM's mimo_v2_flash.py: swa_* heads and sliding_window_size on the pattern's 1 layers, the full heads elsewhere"},
		{Name: "NemotronH", ModelTypes: []string{"nemotron_h"}, Status: Modelled, LayerKinds: "mamba2 + full (hybrid_override_pattern)", reads: []string{"ssm_state_size"}},
		{Name: "Granite-4.0-H", ModelTypes: []string{"granitemoehybrid"}, Status: Modelled, LayerKinds: "mamba2 + full (layer_types)", reads: []string{"mamba_d_state", "mamba_n_heads"}},
		{Name: "Mamba", ModelTypes: []string{"mamba", "falcon_mamba"}, Status: Modelled, LayerKinds: "mamba1", reads: []string{"state_size"}},
		{Name: "Jamba", ModelTypes: []string{"jamba"}, Status: Modelled, LayerKinds: "mamba1 + full", reads: []string{"mamba_d_state"}},

		{Name: "DeepSeek-V4 / V4.1", ModelTypes: []string{"deepseek_v4"}, Architectures: []string{"DeepseekV4ForCausalLM", "DeepseekV41ForCausalLM"}, Status: Refused,
			LayerKinds: "compressed sparse attention (CSA/HCA, compress_ratios) with its indexer and sliding-window caches",
			Note:       "vLLM plans these caches with DeepSeek-V4's own spec types; kvscope has not read them"},
		{Name: "DeepSeek-V3.2, GLM-5 (DSA)", ModelTypes: []string{"deepseek_v32", "glm_moe_dsa"}, Architectures: []string{"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"}, Status: Refused,
			LayerKinds: "DeepSeek sparse attention: an indexer key cache beside each MLA layer (index_n_heads)",
			Note:       "planning only the MLA latent would leave the indexer cache out"},
		{Name: "GLM-5.3-Flash", ModelTypes: []string{"glm5_next", "glm5_next_text", "glm53_flash"}, Architectures: []string{"Glm5NextForCausalLM", "Glm5NextForConditionalGeneration"}, Status: Refused,
			LayerKinds: "KDA (Kimi Delta Attention) state + DSA sparse MLA + k-pool tail cache",
			Note:       "the model type is not confirmed by a published config; the architectures are vLLM's"},
		{Name: "Kimi-K3", ModelTypes: []string{"kimi_k3"}, Status: Refused,
			LayerKinds: "KDA + MLA as vLLM's own kimi_k3 package plans them (gated MLA, attention residuals; not read)",
			Note:       "its text config is kimi_linear, but kvscope has not read how vLLM's kimi_k3 sizes its caches"},
		{Name: "Qwen3.8-Flash-Next", ModelTypes: []string{"qwen4_exp", "qwen4_exp_text", "qwen3_8_flash_next", "qwen3_8_flash_next_text"},
			Architectures: []string{"Qwen4ExpForConditionalGeneration", "Qwen3_8FlashNextForConditionalGeneration"}, Status: Refused,
			LayerKinds: "QSA sparse-attention indexer, hyper-connections, an n-gram layer and a PLE state cache beside gated delta net"},
		{Name: "MiMo-V2.6-Flash (MiMoV2ForCausalLM)", ModelTypes: []string{"mimo_v2"}, Architectures: []string{"MiMoV2ForCausalLM"}, Status: Refused,
			LayerKinds: "MiMo's sliding-window/full attention under an architecture whose vLLM class was not read",
			Note:       "vLLM's MiMo-V2-Flash class is MiMoV2FlashForCausalLM; whether it serves MiMoV2ForCausalLM checkpoints, and how, was not found"},
	}
}

// FamilyOf returns the row of the family table for a model type (named
// by a row, or starting with one of its prefixes), or for an architecture
// when no row covers the model type, and whether one matched. A config without a model type reads as Llama.
func FamilyOf(modelType, architecture string) (Family, bool) {
	if modelType == "" {
		modelType = "llama"
	}
	fams := Families()
	for _, f := range fams {
		for _, t := range f.ModelTypes {
			if t == modelType {
				return f, true
			}
		}
	}
	for _, f := range fams {
		for _, pre := range f.Prefixes {
			if strings.HasPrefix(modelType, pre) {
				return f, true
			}
		}
	}
	for _, f := range fams {
		for _, a := range f.Architectures {
			if a == architecture {
				return f, true
			}
		}
	}
	return Family{}, false
}

// NotModelledError reports a config whose model type or layer kind
// kvscope does not model. It is returned instead of a plan that would
// read the layers as something else.
type NotModelledError struct {
	ModelType string // the config's model_type ("(none)" when it has none)
	LayerKind string // the layer kind kvscope does not model
	Field     string // the key that shows it: "model_type", "text_config.compress_ratios", "layer_types[3]"
	Value     string // the key's value as written, shortened
}

func (e *NotModelledError) Error() string {
	return fmt.Sprintf("model: model_type %s, layer kind %s: not modelled by kvscope (%s = %s)", orUnknown(e.ModelType), e.LayerKind, e.Field, e.Value)
}

// UnknownRule says what Parse does with a model type in no row of the
// family table.
func UnknownRule() string {
	keys := ""
	for i, mk := range hybridMarkers() {
		if i > 0 {
			keys += ", "
		}
		keys += mk.key
	}
	return "read as a dense decoder (full, or sliding where the config says so), with a note; refused by name when the config carries a marker of a layer kind kvscope does not model there (" + keys +
		", or a layer_types entry such as deepseek_sparse_attention or linear_attention)"
}

// gdnKeys are the gated-delta-net keys the Qwen3-Next and Qwen3.5 families
// read.
func gdnKeys() []string { return []string{"linear_conv_kernel_dim", "linear_num_value_heads"} }

// hybridMarker is a config key that marks a layer kind: one kvscope models
// in no family, or only in the families that list the key in reads.
type hybridMarker struct{ key, kind string }

// hybridMarkers are the marker keys, in the order they are looked for.
func hybridMarkers() []hybridMarker {
	return []hybridMarker{
		{"compress_ratios", "compressed sparse attention (CSA/HCA) with its indexer and sliding-window caches"},
		{"linear_attn_config", "KDA (Kimi Delta Attention) state"},
		{"index_kpool", "sparse MLA with a k-pool tail cache"},
		{"index_n_heads", "a sparse-attention indexer cache (DSA)"},
		{"indexer_n_heads", "a sparse-attention indexer cache (QSA)"},
		{"index_topk", "a sparse-attention indexer cache (DSA)"},
		{"hc_mult", "hyper-connection streams, which come with caches kvscope does not model (DeepSeek-V4, GLM-5.3-Flash)"},
		{"hc_count", "hyper-connection streams, which come with caches kvscope does not model (Qwen3.8-Flash-Next)"},
		// State and KV-sharing keys of families kvscope reads, in a family
		// that is not one of them.
		{"linear_conv_kernel_dim", "a gated-delta-net state (kvscope reads it only in the Qwen3-Next and Qwen3.5 families)"},
		{"linear_num_value_heads", "a gated-delta-net state (kvscope reads it only in the Qwen3-Next and Qwen3.5 families)"},
		{"ssm_state_size", "a Mamba state (kvscope reads it only in the NemotronH family)"},
		{"mamba_d_state", "a Mamba state (kvscope reads it only in the Jamba and Granite-4.0-H families)"},
		{"mamba_n_heads", "a Mamba2 state (kvscope reads it only in the Granite-4.0-H family)"},
		{"mamba_d_ssm", "a Mamba state (not read by kvscope in any family)"},
		{"state_size", "a Mamba state (kvscope reads it only in the Mamba family)"},
		{"num_kv_shared_layers", "KV-shared layers (kvscope reads them only in the Gemma 4 family)"},
	}
}

// unmodelledLayerType names the layer kind of a layer_types entry that
// kvscope does not model in the family at hand (one its parser does not
// read there), and whether the entry is such a kind.
func unmodelledLayerType(t string) (string, bool) {
	switch t {
	case "deepseek_sparse_attention":
		return "DeepSeek sparse attention (DSA)", true
	case "linear_attention":
		return "linear attention (kvscope reads it as gated delta net only in the Qwen3-Next and Qwen3.5 families)", true
	case "mamba", "mamba2":
		return "a Mamba state (kvscope reads it only in the Granite-4.0-H family)", true
	}
	return "", false
}

// refuse returns a *NotModelledError when the config belongs to a refused
// family (by its outer or text model type, or by its architecture) or
// carries a marker of a layer kind kvscope does not model in its family,
// and marks a model type in no row of the table, whose reading parse then
// notes.
func (p *parser) refuse() error {
	if outer, _, _ := p.root.str("model_type"); outer != "" && outer != p.m.ModelType {
		if f, ok := FamilyOf(outer, ""); ok && f.Status == Refused {
			return &NotModelledError{ModelType: outer, LayerKind: f.LayerKinds, Field: "model_type", Value: fmt.Sprintf("%q", outer)}
		}
	}
	for _, f := range Families() {
		if f.Status == Refused && p.m.Architecture != "" && containsString(f.Architectures, p.m.Architecture) && !f.hasModelType(p.m.ModelType) {
			return &NotModelledError{ModelType: p.m.ModelType, LayerKind: f.LayerKinds, Field: "architectures", Value: fmt.Sprintf("%q", p.m.Architecture)}
		}
	}
	fam, known := FamilyOf(p.m.ModelType, p.m.Architecture)
	if known && fam.Status == Refused {
		field, value := p.text.field("model_type"), fmt.Sprintf("%q", p.m.ModelType)
		if !p.text.has("model_type") {
			field = "model_type"
		}
		if !fam.hasModelType(p.m.ModelType) {
			field, value = "architectures", fmt.Sprintf("%q", p.m.Architecture)
		}
		return &NotModelledError{ModelType: p.m.ModelType, LayerKind: fam.LayerKinds, Field: field, Value: value}
	}
	for _, o := range []object{p.text, p.root} {
		for _, mk := range hybridMarkers() {
			if v, ok := o.raw(mk.key); ok && !(known && fam.readsKey(mk.key)) {
				return &NotModelledError{ModelType: p.m.ModelType, LayerKind: mk.kind, Field: o.field(mk.key), Value: shorten(string(v))}
			}
		}
		if o.path == p.root.path {
			break
		}
	}
	p.unknown = !known && p.m.ModelType != ""
	if known && fam.Status == Inferred {
		p.note("model_type %s: %s (inferred: %s)", p.m.ModelType, fam.LayerKinds, fam.Note)
	}
	return nil
}

func (f Family) readsKey(key string) bool { return containsString(f.reads, key) }

func (f Family) hasModelType(t string) bool { return containsString(f.ModelTypes, t) }

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// notModelledLayerType is the error for a layer_types entry of a kind
// kvscope does not model, or nil when the entry is no known kind.
func (p *parser) notModelledLayerType(i int, t string) error {
	kind, ok := unmodelledLayerType(t)
	if !ok {
		return nil
	}
	return &NotModelledError{ModelType: p.m.ModelType, LayerKind: kind,
		Field: fmt.Sprintf("%s[%d]", p.text.field("layer_types"), i), Value: fmt.Sprintf("%q", t)}
}
