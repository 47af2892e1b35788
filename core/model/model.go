// Package model turns a Hugging Face config.json into the ordered list of
// layers that own (or share) a KV cache, with the kind and dimensions the
// planner needs.
//
// It knows how vLLM reads each model family's config: which layers are full
// attention, sliding window, chunked local attention, MLA, Mamba1, Mamba2,
// gated delta net or KDA, and with which head counts and state dimensions. It does
// not know about tensor parallelism, block sizes or memory: that is kvspec's
// and plan's business.
//
// Missing keys get the default that the transformers config class of the
// model type gives them (that is what vLLM sees), and every default applied
// is recorded in Model.Notes. Keys without a sensible default, and values
// that make no sense, are reported as a *FieldError naming the key and the
// value.
package model

import "fmt"

// Kind is the sequence mixer of a layer; it decides the layer's KV cache spec.
type Kind string

// The layer kinds kvscope plans for.
const (
	Full          Kind = "full"           // full (causal) attention
	Sliding       Kind = "sliding_window" // sliding-window attention
	ChunkedLocal  Kind = "chunked_local"  // chunked local attention (Llama 4)
	MLA           Kind = "mla"            // multi-head latent attention (DeepSeek)
	Mamba1        Kind = "mamba1"         // Mamba (selective SSM)
	Mamba2        Kind = "mamba2"         // Mamba2 (SSD)
	GatedDeltaNet Kind = "gdn"            // gated delta net (Qwen3-Next, Qwen3.5 linear attention)
	KDA           Kind = "kda"            // Kimi Delta Attention (Kimi-Linear linear attention)
)

// kindOrder is the display order of the kinds; it is never modified.
var kindOrder = []Kind{Full, Sliding, ChunkedLocal, MLA, Mamba1, Mamba2, GatedDeltaNet, KDA}

// Kinds returns every layer kind in a fixed display order.
func Kinds() []Kind { return append([]Kind(nil), kindOrder...) }

// IsAttention reports whether layers of this kind keep per-token K/V pages.
func (k Kind) IsAttention() bool {
	switch k {
	case Full, Sliding, ChunkedLocal, MLA:
		return true
	}
	return false
}

// IsState reports whether layers of this kind keep a fixed-size recurrent
// state (conv + SSM) per request instead of per-token pages.
func (k Kind) IsState() bool {
	switch k {
	case Mamba1, Mamba2, GatedDeltaNet, KDA:
		return true
	}
	return false
}

// Role says which model a layer belongs to.
type Role string

// The roles a layer can have.
const (
	Target Role = "target" // the served model
	MTP    Role = "mtp"    // the served model's own multi-token-prediction layers
	Draft  Role = "draft"  // a separate draft model (DFlash, EAGLE, ...)
)

// Layer is one layer that owns a KV cache (or reads another layer's).
// Head counts are global (before tensor parallelism).
type Layer struct {
	Name  string // unique name: "L3", "mtp.L0", "draft.L5"
	Index int    // position in the model's own layer numbering
	Role  Role
	Kind  Kind

	KVHeads  int // total KV heads (1 for MLA: the latent is shared)
	HeadDim  int // bytes-per-element count of one K head (MLA: kv_lora_rank + qk_rope_head_dim)
	HeadDimV int // size of one V head (0 for MLA: no separate V)
	Window   int // sliding window in tokens (Sliding)
	Chunk    int // attention chunk in tokens (ChunkedLocal)

	State *StateDims // recurrent state dimensions (Mamba1, Mamba2, GatedDeltaNet)

	// SharesKVWith names the layer whose KV cache this layer reads
	// (Gemma-style KV sharing); such a layer owns no KV cache.
	SharesKVWith string
}

// OwnsKV reports whether the layer has a KV cache of its own.
func (l Layer) OwnsKV() bool { return l.SharesKVWith == "" }

// StateDims are the global dimensions of a recurrent layer's state.
type StateDims struct {
	ConvKernel int // conv kernel width K; the conv state keeps K-1 rows

	// Mamba1 and Mamba2.
	Intermediate int // d_inner = heads * head_dim for Mamba2
	StateSize    int // N (d_state)
	Groups       int // Mamba2 n_groups
	Heads        int // Mamba2 heads; KDA heads (linear_attn_config.num_heads)
	HeadDim      int // Mamba2 head dim; KDA head dim (q, k and v alike)

	// Gated delta net.
	KeyHeads     int
	ValueHeads   int
	KeyHeadDim   int
	ValueHeadDim int
}

// Model is a parsed config: the layers that plan a KV cache, in order, and
// the model-wide facts the planner needs.
type Model struct {
	Name         string // a display name (architecture or file name)
	ModelType    string // text model_type
	Architecture string
	DType        string // model dtype as vLLM resolves "auto": bfloat16, float16 or float32
	// MambaSSMDType is the SSM state dtype the checkpoint declares where a
	// vLLM config hook may read it for --mamba-ssm-cache-dtype auto:
	// text_config.mamba_ssm_dtype (Qwen3.5/3.6), mamba_ssm_cache_dtype
	// (NemotronH); "" when it declares none. Whether a version reads it is
	// the profile's business (vllm.Profile.SSMDType).
	MambaSSMDType string
	// MambaAll says what vLLM does with --mamba-cache-mode all for this
	// model: "supported" (Mamba prefix caching), "align" (downgraded to
	// align, Qwen3-Next), "reject" (Qwen3.5/3.6 raise an error) or
	// "unknown" (kvscope has not read it: Kimi-Linear; refused).
	MambaAll string
	// MambaChunkSize is the state kernel's chunk size that mode all aligns
	// blocks to (NemotronH chunk_size); 0 when unknown.
	MambaChunkSize int
	MaxModelLen    int // derived maximum model length, as vLLM derives it
	AttentionHeads int // total query heads (tensor parallelism must divide them)
	HiddenLayers   int // num_hidden_layers of the config (including layers without a cache)
	Layers         []Layer
	MTPLayers      []Layer  // the model's own MTP layers; planned only when attached
	Notes          []string // defaults applied and other facts a user should see
}

// KindCounts counts the layers of each kind.
func (m *Model) KindCounts() map[Kind]int {
	c := map[Kind]int{}
	for _, l := range m.Layers {
		c[l.Kind]++
	}
	return c
}

// HasKind reports whether any layer has kind k.
func (m *Model) HasKind(k Kind) bool {
	for _, l := range m.Layers {
		if l.Kind == k {
			return true
		}
	}
	return false
}

// Layer returns the layer with the given name.
func (m *Model) Layer(name string) (Layer, bool) {
	for _, l := range m.Layers {
		if l.Name == name {
			return l, true
		}
	}
	return Layer{}, false
}

// TargetAttention returns the first attention layer of the target model,
// whose dimensions vLLM uses for model-wide decisions such as the hybrid
// block-size alignment.
func (m *Model) TargetAttention() (Layer, bool) {
	for _, l := range m.Layers {
		if l.Role == Target && l.Kind.IsAttention() && l.OwnsKV() {
			return l, true
		}
	}
	return Layer{}, false
}

// TargetState returns the first recurrent layer of the target model.
func (m *Model) TargetState() (Layer, bool) {
	for _, l := range m.Layers {
		if l.Role == Target && l.Kind.IsState() {
			return l, true
		}
	}
	return Layer{}, false
}

// WithMTP returns a copy of m with its own MTP layers attached after the
// target's layers, as vLLM does when speculative decoding uses the MTP head.
func (m *Model) WithMTP() (*Model, error) {
	if len(m.MTPLayers) == 0 {
		return nil, &FieldError{Field: "mtp_num_hidden_layers", Value: "0", Reason: "the model has no MTP layers to attach"}
	}
	out := m.clone()
	out.Layers = append(out.Layers, m.MTPLayers...)
	out.MTPLayers = nil
	out.Notes = append(out.Notes, fmt.Sprintf("attached %d MTP layer(s) of the model as draft layers", len(m.MTPLayers)))
	return out, nil
}

// WithDraft returns a copy of m with the draft model's KV layers attached
// after the target's, named "draft.L<i>". The draft keeps its own head
// counts, head sizes and windows.
func (m *Model) WithDraft(draft *Model) (*Model, error) {
	if draft == nil || len(draft.Layers) == 0 {
		return nil, &FieldError{Field: "draft", Value: "", Reason: "the draft model has no KV cache layers"}
	}
	out := m.clone()
	for _, l := range draft.Layers {
		if l.Role != Target {
			continue
		}
		l.Role = Draft
		l.Name = "draft." + l.Name
		if l.SharesKVWith != "" {
			l.SharesKVWith = "draft." + l.SharesKVWith
		}
		out.Layers = append(out.Layers, l)
	}
	out.Notes = append(out.Notes, fmt.Sprintf("attached draft model %s: %d KV layer(s)", draft.Name, len(draft.Layers)))
	return out, nil
}

func (m *Model) clone() *Model {
	out := *m
	out.Layers = append([]Layer(nil), m.Layers...)
	out.MTPLayers = append([]Layer(nil), m.MTPLayers...)
	out.Notes = append([]string(nil), m.Notes...)
	return &out
}
