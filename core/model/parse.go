package model

import (
	"fmt"
	"sort"
	"strings"
)

// Parse reads a Hugging Face config.json. Multimodal configs are read from
// their nested text_config. The returned model lists every layer with a KV
// cache or recurrent state, in layer order.
func Parse(data []byte) (*Model, error) {
	root, err := parseObject("", data)
	if err != nil {
		return nil, err
	}
	p := &parser{root: root, text: root}
	if sub, ok, err := root.sub("text_config"); err != nil {
		return nil, err
	} else if ok {
		p.text = sub
	}
	if err := p.parse(); err != nil {
		return nil, err
	}
	return p.m, nil
}

type parser struct {
	root, text object
	m          *Model
	defaults   familyDefaults
	unknown    bool // the model type is in no row of the family table
}

func (p *parser) note(format string, args ...any) {
	p.m.Notes = append(p.m.Notes, fmt.Sprintf(format, args...))
}

// intOr reads a positive integer from the text config, falling back to the
// model type's transformers default (recorded as a note); a key with no
// default is required.
func (p *parser) intOr(key string) (int, error) {
	def, hasDef := p.defaults.ints[key]
	if !hasDef {
		return p.text.positive(key)
	}
	v, applied, err := p.text.positiveOr(key, def)
	if err != nil {
		return 0, err
	}
	if applied {
		p.note("%s missing: using %d, the %s default", p.text.field(key), def, p.defaults.source)
	}
	return v, nil
}

func (p *parser) parse() error {
	p.m = &Model{}
	modelType, _, err := p.text.str("model_type")
	if err != nil {
		return err
	}
	if modelType == "" {
		if modelType, _, err = p.root.str("model_type"); err != nil {
			return err
		}
	}
	p.m.ModelType = modelType
	p.m.Architecture = p.root.firstString("architectures")
	p.m.Name = p.m.Architecture
	if p.m.Name == "" {
		p.m.Name = modelType
	}
	family := modelType
	if family == "" && p.text.has("hybrid_override_pattern") {
		family = "nemotron_h"
		p.m.ModelType = family
		p.note("model_type missing: hybrid_override_pattern makes it a NemotronH config")
	} else if family == "" {
		p.note("model_type missing: reading the config as a Llama-style decoder (transformers LlamaConfig defaults)")
	}
	p.defaults = defaultsFor(family)
	if err := p.refuse(); err != nil {
		return err
	}

	if p.m.HiddenLayers, err = p.text.positive("num_hidden_layers"); err != nil {
		return err
	}
	if err := p.dtype(); err != nil {
		return err
	}
	if err := p.maxModelLen(); err != nil {
		return err
	}
	switch {
	case p.text.has("hybrid_override_pattern"):
		err = p.nemotronH()
	case modelType == "mamba" || modelType == "falcon_mamba":
		err = p.pureMamba()
	case modelType == "jamba":
		err = p.jamba()
	case modelType == "granitemoehybrid":
		err = p.graniteHybrid()
	case modelType == "kimi_linear":
		err = p.kimiLinear()
	case modelType == "mimo_v2_flash":
		err = p.mimoV2Flash()
	case p.text.has("kv_lora_rank"):
		err = p.mla()
	case strings.HasPrefix(modelType, "qwen3_next") || strings.HasPrefix(modelType, "qwen3_5"):
		err = p.qwenGDN()
	case modelType == "llama4_text" || modelType == "llama4":
		err = p.llama4()
	case strings.HasPrefix(modelType, "gemma4"):
		err = p.gemma4()
	default:
		err = p.attentionOnly()
	}
	if err != nil {
		return err
	}
	if len(p.m.Layers) == 0 {
		return &FieldError{Field: p.text.field("num_hidden_layers"), Value: fmt.Sprint(p.m.HiddenLayers), Reason: "the config has no layer with a KV cache or state"}
	}
	if p.unknown {
		p.note("model_type %s is not in kvscope's family table: read from its keys as %s, which holds only if it has no other layer kind", p.m.ModelType, KindSummary(p.m.KindCounts()))
	}
	return nil
}

// dtype resolves the model dtype as vLLM's dtype "auto" does: the config's
// dtype, with float32 and a missing dtype served as bfloat16.
func (p *parser) dtype() error {
	for _, o := range []object{p.text, p.root} {
		for _, key := range []string{"dtype", "torch_dtype"} {
			s, ok, err := o.str(key)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			switch strings.TrimPrefix(s, "torch.") {
			case "bfloat16":
				p.m.DType = "bfloat16"
			case "float16", "half":
				p.m.DType = "float16"
			case "float32", "float":
				p.m.DType = "bfloat16"
				p.note("%s is float32: vLLM's dtype auto serves it as bfloat16", o.field(key))
			default:
				return o.errf(key, "unknown dtype (want bfloat16, float16 or float32)")
			}
			return nil
		}
	}
	p.m.DType = "bfloat16"
	p.note("no dtype in the config: vLLM's dtype auto serves it as bfloat16")
	return nil
}

// maxModelLen derives the default max_model_len as vLLM does: the smallest
// of the position-limit keys present, scaled by a rope scaling factor for
// rope types that extend the context.
func (p *parser) maxModelLen() error {
	keys := []string{"max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
		"model_max_length", "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len"}
	if v, ok, err := p.text.intValue("model_max_length"); err != nil {
		return err
	} else if ok && v > 0 {
		p.m.MaxModelLen = v // model_max_length overrides the derived length in vLLM
		return nil
	}
	best := 0
	for _, k := range keys {
		v, ok, err := p.text.intValue(k)
		if err != nil {
			return err
		}
		if ok && v > 0 && (best == 0 || v < best) {
			best = v
		}
	}
	if best == 0 {
		if def, ok := p.defaults.ints["max_position_embeddings"]; ok {
			best = def
			p.note("%s missing: using %d, the %s default", p.text.field("max_position_embeddings"), def, p.defaults.source)
		} else {
			best = 2048
			p.note("no maximum length in the config: vLLM assumes 2048")
		}
	}
	scaled, err := p.ropeScaled(best)
	if err != nil {
		return err
	}
	p.m.MaxModelLen = scaled
	return nil
}

func (p *parser) ropeScaled(length int) (int, error) {
	if strings.HasPrefix(p.m.ModelType, "gemma3") {
		return length, nil
	}
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		rs, ok, err := p.text.sub(key)
		if err != nil || !ok {
			if err != nil {
				// A nested per-layer-type rope_parameters is not a scaling spec.
				if key == "rope_parameters" {
					continue
				}
				return 0, err
			}
			continue
		}
		typ, _, _ := rs.str("rope_type")
		if typ == "" {
			typ, _, _ = rs.str("type")
		}
		switch typ {
		case "", "default", "su", "longrope", "llama3", "mrope", "proportional":
			continue
		}
		factor, ok, err := floatValue(rs, "factor")
		if err != nil {
			return 0, err
		}
		if !ok || factor <= 0 {
			continue
		}
		base := length
		if typ == "yarn" {
			if orig, ok, err := rs.intValue("original_max_position_embeddings"); err != nil {
				return 0, err
			} else if ok && orig > 0 {
				base = orig
			}
		}
		scaled := float64(base) * factor
		if scaled > 1<<30 {
			return 0, rs.errf("factor", "scales max_position_embeddings %d beyond 2^30 tokens", base)
		}
		return int(scaled), nil
	}
	return length, nil
}

func floatValue(o object, key string) (float64, bool, error) {
	v, ok := o.raw(key)
	if !ok {
		return 0, false, nil
	}
	var f float64
	if _, err := fmt.Sscan(string(v), &f); err != nil {
		return 0, true, o.errf(key, "not a number")
	}
	return f, true, nil
}

// attention reads the model-wide attention dimensions: query heads, KV
// heads and head size.
type attnDims struct{ heads, kvHeads, headDim int }

func (p *parser) attnDims() (attnDims, error) {
	var d attnDims
	var err error
	if d.heads, err = p.intOr("num_attention_heads"); err != nil {
		return d, err
	}
	kv, applied, err := p.text.positiveOr("num_key_value_heads", 0)
	if err != nil {
		return d, err
	}
	if applied {
		if def, ok := p.defaults.ints["num_key_value_heads"]; ok {
			kv = def
			p.note("%s missing: using %d, the %s default", p.text.field("num_key_value_heads"), def, p.defaults.source)
		} else {
			kv = d.heads
			p.note("%s missing: using num_attention_heads = %d (multi-head attention), as transformers does", p.text.field("num_key_value_heads"), d.heads)
		}
	}
	d.kvHeads = kv
	if d.heads%d.kvHeads != 0 {
		return d, p.text.errf("num_key_value_heads", "must divide num_attention_heads = %d", d.heads)
	}
	p.m.AttentionHeads = d.heads
	if p.text.has("head_dim") {
		if d.headDim, err = p.text.positive("head_dim"); err != nil {
			return d, err
		}
		return d, nil
	}
	if def, ok := p.defaults.ints["head_dim"]; ok {
		d.headDim = def
		p.note("%s missing: using %d, the %s default", p.text.field("head_dim"), def, p.defaults.source)
		return d, nil
	}
	hidden, err := p.text.positive("hidden_size")
	if err != nil {
		return d, err
	}
	if hidden%d.heads != 0 {
		return d, p.text.errf("hidden_size", "must be divisible by num_attention_heads = %d to give head_dim", d.heads)
	}
	d.headDim = hidden / d.heads
	return d, nil
}

func (p *parser) addLayer(l Layer) {
	if l.Name == "" {
		l.Name = fmt.Sprintf("L%d", l.Index)
	}
	if l.Role == "" {
		l.Role = Target
	}
	p.m.Layers = append(p.m.Layers, l)
}

func (p *parser) attn(i int, kind Kind, d attnDims) Layer {
	return Layer{Index: i, Kind: kind, KVHeads: d.kvHeads, HeadDim: d.headDim, HeadDimV: d.headDim}
}

// layerTypes reads layer_types and checks its length.
func (p *parser) layerTypes() ([]string, bool, error) {
	lt, ok, err := p.text.strings("layer_types")
	if err != nil || !ok {
		return nil, false, err
	}
	if len(lt) != p.m.HiddenLayers {
		return nil, true, &FieldError{Field: p.text.field("layer_types"), Value: fmt.Sprintf("[%d entries]", len(lt)),
			Reason: fmt.Sprintf("has %d entries but num_hidden_layers is %d", len(lt), p.m.HiddenLayers)}
	}
	return lt, true, nil
}

func (p *parser) badLayerType(i int, t string, want string) error {
	if err := p.notModelledLayerType(i, t); err != nil {
		return err
	}
	return &FieldError{Field: fmt.Sprintf("%s[%d]", p.text.field("layer_types"), i), Value: fmt.Sprintf("%q", t),
		Reason: "unknown layer type for model type " + orUnknown(p.m.ModelType) + " (want " + want + ")"}
}

func orUnknown(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// slidingWindow reads a required positive sliding_window.
func (p *parser) slidingWindow() (int, error) { return p.intOr("sliding_window") }

// attentionOnly handles decoder-only attention models: all full, all
// sliding (Mistral-style), or a mix given by layer_types or a Gemma-style
// pattern.
func (p *parser) attentionOnly() error {
	d, err := p.attnDims()
	if err != nil {
		return err
	}
	kinds, err := p.attentionKinds()
	if err != nil {
		return err
	}
	window := 0
	for _, k := range kinds {
		if k == Sliding {
			if window, err = p.slidingWindow(); err != nil {
				return err
			}
			break
		}
	}
	for i, k := range kinds {
		l := p.attn(i, k, d)
		if k == Sliding {
			l.Window = window
		}
		p.addLayer(l)
	}
	return nil
}

// attentionKinds decides full vs sliding for each layer of an attention-only
// model.
func (p *parser) attentionKinds() ([]Kind, error) {
	n := p.m.HiddenLayers
	kinds := make([]Kind, n)
	lt, ok, err := p.layerTypes()
	if err != nil {
		return nil, err
	}
	if ok {
		for i, t := range lt {
			switch t {
			case "full_attention", "attention", "global_attention":
				kinds[i] = Full
			case "sliding_attention", "sliding_window", "local_attention":
				kinds[i] = Sliding
			default:
				return nil, p.badLayerType(i, t, `"full_attention" or "sliding_attention"`)
			}
		}
		return kinds, nil
	}
	mt := p.m.ModelType
	switch {
	case strings.HasPrefix(mt, "gemma3"), strings.HasPrefix(mt, "gemma4"):
		pattern, err := p.intOr("sliding_window_pattern")
		if err != nil {
			return nil, err
		}
		for i := range kinds {
			kinds[i] = Sliding
			if (i+1)%pattern == 0 {
				kinds[i] = Full
			}
		}
		return kinds, nil
	case strings.HasPrefix(mt, "gemma2"):
		for i := range kinds {
			kinds[i] = Sliding
			if (i+1)%2 == 0 {
				kinds[i] = Full
			}
		}
		return kinds, nil
	}
	use := true
	if b, ok, err := p.text.boolean("use_sliding_window"); err != nil {
		return nil, err
	} else if ok {
		use = b
	}
	for i := range kinds {
		kinds[i] = Full
		if use && p.text.has("sliding_window") {
			kinds[i] = Sliding
		}
	}
	return kinds, nil
}

// mla handles DeepSeek-style multi-head latent attention: every layer stores
// one latent of kv_lora_rank + qk_rope_head_dim per token, shared by all heads.
func (p *parser) mla() error {
	heads, err := p.intOr("num_attention_heads")
	if err != nil {
		return err
	}
	p.m.AttentionHeads = heads
	rank, err := p.text.positive("kv_lora_rank")
	if err != nil {
		return err
	}
	rope, err := p.intOr("qk_rope_head_dim")
	if err != nil {
		return err
	}
	layer := func(i int) Layer {
		return Layer{Index: i, Kind: MLA, KVHeads: 1, HeadDim: rank + rope}
	}
	for i := 0; i < p.m.HiddenLayers; i++ {
		p.addLayer(layer(i))
	}
	mtp, ok, err := p.text.intValue("num_nextn_predict_layers")
	if err != nil {
		return err
	}
	if ok && (mtp < 0 || mtp > upperBounds["num_nextn_predict_layers"]) {
		return p.text.errf("num_nextn_predict_layers", "must be between 0 and %d", upperBounds["num_nextn_predict_layers"])
	}
	for i := 0; i < mtp; i++ {
		l := layer(p.m.HiddenLayers + i)
		l.Role, l.Name = MTP, fmt.Sprintf("mtp.L%d", i)
		p.m.MTPLayers = append(p.m.MTPLayers, l)
	}
	return nil
}

// qwenGDN handles Qwen3-Next and Qwen3.5/3.6 (and Qwen3.8, published as
// qwen3_5): gated delta net layers with a full attention layer every
// full_attention_interval layers.
func (p *parser) qwenGDN() error {
	d, err := p.attnDims()
	if err != nil {
		return err
	}
	var st StateDims
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"linear_conv_kernel_dim", &st.ConvKernel},
		{"linear_num_key_heads", &st.KeyHeads},
		{"linear_num_value_heads", &st.ValueHeads},
		{"linear_key_head_dim", &st.KeyHeadDim},
		{"linear_value_head_dim", &st.ValueHeadDim},
	} {
		if *f.dst, err = p.intOr(f.key); err != nil {
			return err
		}
	}
	if st.ValueHeads%st.KeyHeads != 0 {
		return p.text.errf("linear_num_value_heads", "must be a multiple of linear_num_key_heads = %d", st.KeyHeads)
	}
	if err := p.checkSSMDType(); err != nil {
		return err
	}
	p.m.MambaAll = "reject"
	if p.m.ModelType == "qwen3_next" {
		p.m.MambaAll = "align"
	}
	lt, ok, err := p.layerTypes()
	if err != nil {
		return err
	}
	if !ok {
		interval, err := p.intOr("full_attention_interval")
		if err != nil {
			return err
		}
		lt = make([]string, p.m.HiddenLayers)
		for i := range lt {
			lt[i] = "linear_attention"
			if (i+1)%interval == 0 {
				lt[i] = "full_attention"
			}
		}
	}
	for i, t := range lt {
		switch t {
		case "full_attention":
			p.addLayer(p.attn(i, Full, d))
		case "linear_attention":
			s := st
			p.addLayer(Layer{Index: i, Kind: GatedDeltaNet, State: &s})
		default:
			return p.badLayerType(i, t, `"full_attention" or "linear_attention"`)
		}
	}
	mtp, ok, err := p.text.intValue("mtp_num_hidden_layers")
	if err != nil {
		return err
	}
	if ok && (mtp < 0 || mtp > upperBounds["mtp_num_hidden_layers"]) {
		return p.text.errf("mtp_num_hidden_layers", "must be between 0 and %d", upperBounds["mtp_num_hidden_layers"])
	}
	for i := 0; i < mtp; i++ {
		l := p.attn(p.m.HiddenLayers+i, Full, d)
		l.Role, l.Name = MTP, fmt.Sprintf("mtp.L%d", i)
		p.m.MTPLayers = append(p.m.MTPLayers, l)
	}
	return nil
}

func (p *parser) checkSSMDType() error {
	s, ok, err := p.text.str("mamba_ssm_dtype")
	if err != nil || !ok {
		return err
	}
	switch strings.TrimPrefix(s, "torch.") {
	case "float32", "bfloat16", "float16":
		p.m.MambaSSMDType = strings.TrimPrefix(s, "torch.")
	default:
		return p.text.errf("mamba_ssm_dtype", "unknown dtype (want float32, bfloat16 or float16)")
	}
	return nil
}

// llama4 handles Llama 4: layers that use RoPE attend within chunks of
// attention_chunk_size tokens; the no-RoPE layers are global (full).
func (p *parser) llama4() error {
	d, err := p.attnDims()
	if err != nil {
		return err
	}
	chunk, err := p.intOr("attention_chunk_size")
	if err != nil {
		return err
	}
	hasChunk := true
	rope, ok, err := p.text.ints("no_rope_layers")
	if err != nil {
		return err
	}
	if ok && len(rope) != p.m.HiddenLayers {
		return &FieldError{Field: p.text.field("no_rope_layers"), Value: fmt.Sprintf("[%d entries]", len(rope)),
			Reason: fmt.Sprintf("has %d entries but num_hidden_layers is %d", len(rope), p.m.HiddenLayers)}
	}
	if !ok {
		interval, err := p.intOr("no_rope_layer_interval")
		if err != nil {
			return err
		}
		rope = make([]int, p.m.HiddenLayers)
		for i := range rope {
			if (i+1)%interval != 0 {
				rope[i] = 1
			}
		}
	}
	for i, r := range rope {
		if r != 0 && r != 1 {
			return &FieldError{Field: fmt.Sprintf("%s[%d]", p.text.field("no_rope_layers"), i), Value: fmt.Sprint(r), Reason: "must be 0 or 1"}
		}
		l := p.attn(i, Full, d)
		if r == 1 && hasChunk {
			l.Kind, l.Chunk = ChunkedLocal, chunk
		}
		p.addLayer(l)
	}
	return nil
}

// gemma4 handles Gemma 4: sliding layers use head_dim and
// num_key_value_heads, full layers global_head_dim and
// num_global_key_value_heads; the last num_kv_shared_layers layers read the
// KV of the last earlier layer of the same type.
func (p *parser) gemma4() error {
	d, err := p.attnDims()
	if err != nil {
		return err
	}
	global := d
	if global.headDim, err = p.intOr("global_head_dim"); err != nil {
		return err
	}
	kEqV, _, err := p.text.boolean("attention_k_eq_v")
	if err != nil {
		return err
	}
	// vLLM uses num_global_key_value_heads only on the full layers of
	// k_eq_v models; the others keep num_key_value_heads.
	if kEqV && p.text.has("num_global_key_value_heads") {
		if global.kvHeads, err = p.text.positive("num_global_key_value_heads"); err != nil {
			return err
		}
		if d.heads%global.kvHeads != 0 {
			return p.text.errf("num_global_key_value_heads", "must divide num_attention_heads = %d", d.heads)
		}
	}
	kinds, err := p.attentionKinds()
	if err != nil {
		return err
	}
	window, err := p.slidingWindow()
	if err != nil {
		return err
	}
	if mode, _, err := p.text.str("use_bidirectional_attention"); err != nil {
		return err
	} else if mode == "all" {
		window = window/2 + 1
		p.note("use_bidirectional_attention all: the sliding window is W/2+1 = %d, as transformers sets it", window)
	}
	if last := len(kinds) - 1; kinds[last] != Full {
		kinds[last] = Full
		p.note("the last layer is full attention, as transformers' Gemma4 config forces")
	}
	shared, _, err := p.text.intValue("num_kv_shared_layers")
	if err != nil {
		return err
	}
	if shared < 0 || shared >= p.m.HiddenLayers {
		return p.text.errf("num_kv_shared_layers", "must be between 0 and num_hidden_layers-1 = %d", p.m.HiddenLayers-1)
	}
	firstShared := p.m.HiddenLayers - shared
	lastOfKind := map[Kind]string{}
	for i, k := range kinds {
		l := p.attn(i, k, d)
		if k == Full {
			l = p.attn(i, k, global)
		} else {
			l.Window = window
		}
		l.Name = fmt.Sprintf("L%d", i)
		if i >= firstShared {
			src, ok := lastOfKind[k]
			if !ok {
				return p.text.errf("num_kv_shared_layers", "layer %d shares KV but no earlier %s layer owns one", i, k)
			}
			l.SharesKVWith = src
		} else {
			lastOfKind[k] = l.Name
		}
		p.addLayer(l)
	}
	if shared > 0 {
		p.note("the last %d layers (from layer %d) reuse the KV cache of the last earlier layer of the same type and own none", shared, firstShared)
	}
	return nil
}

// nemotronH handles NemotronH: hybrid_override_pattern has one character per
// layer: M (Mamba2), * (attention), - (MLP) or E (MoE); only M and * keep a
// cache.
func (p *parser) nemotronH() error {
	pattern, _, err := p.text.str("hybrid_override_pattern")
	if err != nil {
		return err
	}
	if len(pattern) != p.m.HiddenLayers {
		return p.text.errf("hybrid_override_pattern", "has %d characters but num_hidden_layers is %d", len(pattern), p.m.HiddenLayers)
	}
	for i, c := range pattern {
		if !strings.ContainsRune("M*-E", c) {
			return &FieldError{Field: fmt.Sprintf("%s[%d]", p.text.field("hybrid_override_pattern"), i), Value: fmt.Sprintf("%q", c),
				Reason: "unknown layer code (want M, *, - or E)"}
		}
	}
	var d attnDims
	if strings.Contains(pattern, "*") {
		if d, err = p.attnDims(); err != nil {
			return err
		}
	}
	var st StateDims
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"mamba_num_heads", &st.Heads},
		{"mamba_head_dim", &st.HeadDim},
		{"n_groups", &st.Groups},
		{"ssm_state_size", &st.StateSize},
		{"conv_kernel", &st.ConvKernel},
	} {
		if *f.dst, err = p.intOr(f.key); err != nil {
			return err
		}
	}
	st.Intermediate = st.Heads * st.HeadDim
	if st.Heads%st.Groups != 0 {
		return p.text.errf("n_groups", "must divide mamba_num_heads = %d", st.Heads)
	}
	if err := p.ssmCacheDType(); err != nil {
		return err
	}
	p.m.MambaAll = "supported"
	if p.m.MambaChunkSize, err = p.intOr("chunk_size"); err != nil {
		return err
	}
	for i, c := range pattern {
		switch c {
		case 'M':
			s := st
			p.addLayer(Layer{Index: i, Kind: Mamba2, State: &s})
		case '*':
			p.addLayer(p.attn(i, Full, d))
		}
	}
	return nil
}

// ssmCacheDType reads the SSM dtype a NemotronH config declares for vLLM's
// hook: mamba_ssm_cache_dtype, or else mamba_ssm_dtype.
func (p *parser) ssmCacheDType() error {
	if err := p.checkSSMDType(); err != nil {
		return err
	}
	s, ok, err := p.text.str("mamba_ssm_cache_dtype")
	if err != nil || !ok {
		return err
	}
	switch d := strings.TrimPrefix(s, "torch."); d {
	case "float32", "bfloat16", "float16":
		p.m.MambaSSMDType = d
	case "auto":
	default:
		return p.text.errf("mamba_ssm_cache_dtype", "unknown dtype (want float32, bfloat16, float16 or auto)")
	}
	return nil
}

// graniteHybrid handles Granite-4.0-H (granitemoehybrid): layer_types
// names each layer "mamba" (a Mamba2 mixer) or "attention"; every size is
// a key of its own. vLLM has no SSM dtype hook for it: auto is the model
// dtype.
func (p *parser) graniteHybrid() error {
	lt, ok, err := p.layerTypes()
	if err != nil {
		return err
	}
	if !ok {
		return &FieldError{Field: p.text.field("layer_types"), Reason: "missing: a granitemoehybrid config names each layer mamba or attention"}
	}
	var st StateDims
	for _, f := range []struct {
		key string
		dst *int
	}{
		{"mamba_n_heads", &st.Heads},
		{"mamba_d_head", &st.HeadDim},
		{"mamba_n_groups", &st.Groups},
		{"mamba_d_state", &st.StateSize},
		{"mamba_d_conv", &st.ConvKernel},
	} {
		if *f.dst, err = p.text.positive(f.key); err != nil {
			return err
		}
	}
	st.Intermediate = st.Heads * st.HeadDim
	if st.Heads%st.Groups != 0 {
		return p.text.errf("mamba_n_groups", "must divide mamba_n_heads = %d", st.Heads)
	}
	var d attnDims
	for i, t := range lt {
		switch t {
		case "mamba":
			s := st
			p.addLayer(Layer{Index: i, Kind: Mamba2, State: &s})
		case "attention":
			if d.heads == 0 {
				if d, err = p.attnDims(); err != nil {
					return err
				}
			}
			p.addLayer(p.attn(i, Full, d))
		default:
			return p.badLayerType(i, t, `"mamba" or "attention"`)
		}
	}
	p.m.MambaAll = "supported"
	p.m.MambaChunkSize, _, err = p.text.positiveOr("mamba_chunk_size", 256)
	return err
}

// pureMamba handles Mamba1 models: every layer is a Mamba block with
// d_inner = expand * hidden_size.
func (p *parser) pureMamba() error {
	p.m.MambaAll = "align" // inferred: kvscope does not know Mamba1's prefix-caching chunk
	var st StateDims
	hidden, err := p.text.positive("hidden_size")
	if err != nil {
		return err
	}
	expand, err := p.intOr("expand")
	if err != nil {
		return err
	}
	st.Intermediate = expand * hidden
	if p.text.has("intermediate_size") {
		if st.Intermediate, err = p.text.positive("intermediate_size"); err != nil {
			return err
		}
	}
	if st.StateSize, err = p.intOr("state_size"); err != nil {
		return err
	}
	if st.ConvKernel, err = p.intOr("conv_kernel"); err != nil {
		return err
	}
	if err := p.checkSSMDType(); err != nil {
		return err
	}
	for i := 0; i < p.m.HiddenLayers; i++ {
		s := st
		p.addLayer(Layer{Index: i, Kind: Mamba1, State: &s})
	}
	return nil
}

// jamba handles Jamba: Mamba1 layers with an attention layer every
// attn_layer_period layers, at attn_layer_offset.
func (p *parser) jamba() error {
	p.m.MambaAll = "align" // inferred: kvscope does not know Mamba1's prefix-caching chunk
	d, err := p.attnDims()
	if err != nil {
		return err
	}
	hidden, err := p.text.positive("hidden_size")
	if err != nil {
		return err
	}
	var st StateDims
	expand, err := p.intOr("mamba_expand")
	if err != nil {
		return err
	}
	st.Intermediate = expand * hidden
	if st.StateSize, err = p.intOr("mamba_d_state"); err != nil {
		return err
	}
	if st.ConvKernel, err = p.intOr("mamba_d_conv"); err != nil {
		return err
	}
	period, err := p.intOr("attn_layer_period")
	if err != nil {
		return err
	}
	offset, _, err := p.text.intValue("attn_layer_offset")
	if err != nil {
		return err
	}
	if !p.text.has("attn_layer_offset") {
		offset = 4
		p.note("%s missing: using 4, the transformers JambaConfig default", p.text.field("attn_layer_offset"))
	}
	if offset < 0 || offset >= period {
		return p.text.errf("attn_layer_offset", "must be between 0 and attn_layer_period-1 = %d", period-1)
	}
	for i := 0; i < p.m.HiddenLayers; i++ {
		if i%period == offset {
			p.addLayer(p.attn(i, Full, d))
			continue
		}
		s := st
		p.addLayer(Layer{Index: i, Kind: Mamba1, State: &s})
	}
	return nil
}

// familyDefaults are the transformers config-class defaults of one model
// type, for the keys kvscope reads.
type familyDefaults struct {
	source string
	ints   map[string]int
}

// defaultsFor returns the transformers defaults for a model type. The values
// are those of the transformers config classes (read from their sources).
func defaultsFor(modelType string) familyDefaults {
	switch {
	case modelType == "":
		return familyDefaults{"transformers LlamaConfig", map[string]int{
			"num_attention_heads": 32, "max_position_embeddings": 2048}}
	case strings.HasPrefix(modelType, "llama4"):
		return familyDefaults{"transformers Llama4TextConfig", map[string]int{
			"no_rope_layer_interval": 4, "attention_chunk_size": 8192}}
	case modelType == "qwen3_next":
		return familyDefaults{"transformers Qwen3NextConfig", map[string]int{
			"num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
			"max_position_embeddings": 32768, "full_attention_interval": 4,
			"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
			"linear_num_key_heads": 16, "linear_num_value_heads": 32}}
	case strings.HasPrefix(modelType, "qwen3_5_moe"):
		return familyDefaults{"transformers Qwen3_5MoeTextConfig", map[string]int{
			"num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
			"max_position_embeddings": 32768, "full_attention_interval": 4,
			"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
			"linear_num_key_heads": 16, "linear_num_value_heads": 32}}
	case strings.HasPrefix(modelType, "qwen3_5"):
		return familyDefaults{"transformers Qwen3_5TextConfig", map[string]int{
			"num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
			"max_position_embeddings": 32768, "full_attention_interval": 4,
			"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
			"linear_num_key_heads": 16, "linear_num_value_heads": 32}}
	case strings.HasPrefix(modelType, "gemma3"):
		return familyDefaults{"transformers Gemma3TextConfig", map[string]int{
			"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
			"max_position_embeddings": 131072, "sliding_window_pattern": 6, "sliding_window": 4096}}
	case strings.HasPrefix(modelType, "gemma4"):
		return familyDefaults{"transformers Gemma4TextConfig", map[string]int{
			"num_key_value_heads": 4, "head_dim": 256, "global_head_dim": 512, "sliding_window": 512,
			"sliding_window_pattern": 6, "max_position_embeddings": 131072}}
	case modelType == "nemotron_h":
		return familyDefaults{"transformers NemotronHConfig", map[string]int{
			"mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "chunk_size": 128}}
	case modelType == "jamba":
		return familyDefaults{"transformers JambaConfig", map[string]int{
			"num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 262144,
			"mamba_expand": 2, "mamba_d_state": 16, "mamba_d_conv": 4, "attn_layer_period": 8}}
	case modelType == "mamba" || modelType == "falcon_mamba":
		return familyDefaults{"transformers MambaConfig", map[string]int{
			"expand": 2, "state_size": 16, "conv_kernel": 4}}
	case strings.HasPrefix(modelType, "deepseek"):
		return familyDefaults{"transformers DeepseekV3Config", map[string]int{
			"qk_rope_head_dim": 64}}
	}
	return familyDefaults{source: "transformers " + modelType, ints: map[string]int{}}
}

// KindSummary renders kind counts as "30 gdn, 10 full" in display order.
func KindSummary(counts map[Kind]int) string {
	var parts []string
	for _, k := range kindOrder {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	var extra []string
	for k, n := range counts {
		if !contains(kindOrder, k) && n > 0 {
			extra = append(extra, fmt.Sprintf("%d %s", n, k))
		}
	}
	sort.Strings(extra)
	return strings.Join(append(parts, extra...), ", ")
}

func contains(ks []Kind, k Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}
