package kvspec

import (
	"fmt"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
)

// Options are the engine settings that shape per-rank specs. The zero value
// of each field means vLLM's default.
type Options struct {
	TensorParallelSize   int    // 0 means 1
	BlockSize            int    // cache_config.block_size; 0 means the platform default (16)
	KVCacheDType         string // auto (model dtype), bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2
	MambaSSMCacheDType   string // auto (model dtype), float32, bfloat16, float16
	MambaCacheMode       string // none (default), align, all
	NumSpeculativeTokens int
	// MaxModelLen sizes a state layer's block in mamba_cache_mode none
	// (vLLM gives it the whole request); 0 leaves the attention block size.
	MaxModelLen int
	// AttentionBackend is vLLM's attention backend name; "" picks the
	// default (FLASH_ATTN, or FLASH_ATTN_MLA for MLA models).
	AttentionBackend string
	// Profile is the vLLM version whose rules apply; the zero value means
	// the newest release.
	Profile vllm.Profile
}

// LayerSpec is one layer with its spec on this rank.
type LayerSpec struct {
	Layer model.Layer
	Spec  Spec
}

// Rank is every KV-owning layer's spec on one rank, after the platform's
// block-size decisions.
type Rank struct {
	Layers    []LayerSpec
	BlockSize int      // cache_config.block_size after platform adjustments
	Backend   Backend  // the attention backend
	Logs      []string // what vLLM logs while deciding it
	Notes     []string // defaults and inferences worth telling the user
	// Alignment describes the hybrid attention/state block-size alignment,
	// nil when the model is not an attention + state hybrid.
	Alignment *Alignment
}

// Alignment is the outcome of vLLM's hybrid block-size alignment: the
// attention block size is raised until one attention page holds at least
// one state page, then the state page is padded to the attention page.
type Alignment struct {
	AttnBytesPerToken int64   `json:"attn_bytes_per_token"` // attn_1: one token's K+V bytes of the target's attention on this rank
	StatePageBytes    int64   `json:"state_page_bytes"`     // the unpadded state page on this rank
	Align             int     `json:"align"`                // max(kernel block multiple, user block size)
	AttnBlockSize     int     `json:"attn_block_size"`      // the smallest aligned block size whose page holds a state page
	AttnPageBytes     int64   `json:"attn_page_bytes"`      // block size * attn_1 = the padded state page
	PadPercent        float64 `json:"pad_percent"`          // state page padding in percent
}

// DTypeBytes returns the element size of a dtype name.
func DTypeBytes(name string) (int, error) {
	switch name {
	case "float32":
		return 4, nil
	case "bfloat16", "float16":
		return 2, nil
	case "fp8", "fp8_e4m3", "fp8_e5m2":
		return 1, nil
	}
	return 0, fmt.Errorf("unknown dtype %q", name)
}

// OptionError reports an engine option that cannot be used with the model.
type OptionError struct {
	Option string // the vLLM flag, e.g. "--tensor-parallel-size"
	Value  string
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("kvspec: %s %s: %s", e.Option, e.Value, e.Reason)
}

func optErr(opt string, v any, format string, args ...any) error {
	return &OptionError{Option: opt, Value: fmt.Sprint(v), Reason: fmt.Sprintf(format, args...)}
}

// ForRank computes the spec of every KV-owning layer of m on one rank.
// All ranks of one engine have equal specs, so the rank index is not an input.
func ForRank(m *model.Model, o Options) (*Rank, error) {
	tp := o.TensorParallelSize
	if tp == 0 {
		tp = 1
	}
	if tp < 0 {
		return nil, optErr("--tensor-parallel-size", tp, "must be positive")
	}
	if err := checkTP(m, tp); err != nil {
		return nil, err
	}
	r := &Rank{}
	kvName := o.KVCacheDType
	if kvName == "" || kvName == "auto" {
		kvName = m.DType
	}
	kvBytes, err := DTypeBytes(kvName)
	if err != nil {
		return nil, optErr("--kv-cache-dtype", o.KVCacheDType, "want auto, bfloat16, float16, fp8, fp8_e4m3 or fp8_e5m2")
	}
	prof := o.Profile
	if prof.Name == "" {
		prof = vllm.For(vllm.Newest())
	}
	convBytes, ssmBytes, notes, err := stateDTypes(m, o, prof, kvBytes)
	if err != nil {
		return nil, err
	}
	r.Notes = append(r.Notes, notes...)
	mode := o.MambaCacheMode
	switch mode {
	case "":
		mode = "none"
	case "none", "align", "all":
	default:
		return nil, optErr("--mamba-cache-mode", mode, "want none, align or all")
	}
	if mode == "all" && hasState(m) {
		switch m.MambaAll {
		case "reject":
			return nil, optErr("--mamba-cache-mode", mode, "this model does not support Mamba prefix caching (vLLM raises NotImplementedError); use none or align")
		case "unknown":
			return nil, optErr("--mamba-cache-mode", mode, "kvscope has not read whether vLLM supports Mamba prefix caching for this model; use none or align")
		case "align", "":
			mode = "align"
			r.Logs = append(r.Logs, "Mamba prefix caching mode all is not supported by this model; using align.")
		}
	}
	if o.NumSpeculativeTokens < 0 {
		return nil, optErr("--num-speculative-tokens", o.NumSpeculativeTokens, "must not be negative")
	}
	backendName := o.AttentionBackend
	if backendName == "" && m.HasKind(model.MLA) && kvBytes == 1 {
		backendName = "FLASHMLA" // FLASH_ATTN_MLA takes no fp8 KV cache
	}
	backend, err := LookupBackend(backendName, m.HasKind(model.MLA))
	if err != nil {
		return nil, err
	}
	r.Backend = backend
	align := backend.minKernelBlock()
	switch {
	case prof.Align == vllm.Align16:
		align = 16
	case prof.MLAHybridAlign128 && backend.MLA && hasState(m):
		align = max(align, 128)
	}
	bs := o.BlockSize
	if bs < 0 {
		return nil, optErr("--block-size", bs, "must be positive")
	}
	if bs == 0 {
		bs = 16
	}
	if !backend.Supports(bs) && !hasState(m) {
		if o.BlockSize != 0 {
			r.Logs = append(r.Logs, fmt.Sprintf("Block size %d is not supported by the %s backend; using %d.", bs, backend.Name, backend.preferred()))
		}
		bs = backend.preferred()
	}

	r.Layers = make([]LayerSpec, 0, len(m.Layers))
	// State layers of one kind and dimensions share their shapes and
	// dtype sizes (read-only, as every Spec's slices are): a hybrid model
	// has tens of them, alike.
	var stateBytes []int
	type stateKey struct {
		kind model.Kind
		dims model.StateDims
	}
	var shapesOf map[stateKey][][]int
	for _, l := range m.Layers {
		if !l.OwnsKV() {
			continue
		}
		s := Spec{Kind: l.Kind, BlockSize: bs}
		switch {
		case l.Kind == model.MLA:
			s.KVHeads, s.HeadSize, s.DTypeBytes = 1, l.HeadDim, kvBytes
		case l.Kind.IsAttention():
			s.KVHeads = max(1, l.KVHeads/tp)
			s.HeadSize, s.HeadSizeV, s.DTypeBytes = l.HeadDim, l.HeadDimV, kvBytes
			s.Window, s.Chunk = l.Window, l.Chunk
		case l.Kind.IsState():
			k := stateKey{kind: l.Kind}
			if l.State != nil {
				k.dims = *l.State
			}
			shapes, ok := shapesOf[k]
			if !ok {
				shapes = StateShapes(l, tp, specRows(prof, l.Kind, o.NumSpeculativeTokens))
				if shapesOf == nil {
					shapesOf, stateBytes = map[stateKey][][]int{}, []int{convBytes, ssmBytes}
				}
				shapesOf[k] = shapes
			}
			s.Shapes, s.StateDTypeBytes = shapes, stateBytes
			s.MambaMode = mode
			s.SpecBlocks = specBlocks(prof, mode, o.NumSpeculativeTokens)
		}
		r.Layers = append(r.Layers, LayerSpec{Layer: l, Spec: s})
	}

	if attn, ok := m.TargetAttention(); ok && hasState(m) {
		a, err := alignHybrid(m, r, attn, tp, kvBytes, bs, align, mode, prof.Align == vllm.AlignBackendUser)
		if err != nil {
			return nil, err
		}
		r.Alignment = a
		if bs < a.AttnBlockSize {
			bs = a.AttnBlockSize
			r.Logs = append(r.Logs, fmt.Sprintf("Setting attention block size to %d tokens to ensure that attention page size is >= mamba page size.", bs))
		}
		a.AttnPageBytes = int64(bs) * a.AttnBytesPerToken
		a.PadPercent = 100 * float64(a.AttnPageBytes-a.StatePageBytes) / float64(a.StatePageBytes)
		if a.AttnPageBytes != a.StatePageBytes {
			r.Logs = append(r.Logs, fmt.Sprintf("Padding mamba page size by %.2f%% to ensure that mamba page size and attention page size are exactly equal.", a.PadPercent))
		}
		for i := range r.Layers {
			s := &r.Layers[i].Spec
			s.BlockSize = bs
			if s.Kind.IsState() && a.AttnPageBytes != s.RealPageBytes() {
				s.PagePadded = a.AttnPageBytes
			}
		}
	}
	// vLLM's MambaSpec block size: the whole request in mode none, the
	// attention block in align, the chunk-aligned block in all.
	for i := range r.Layers {
		s := &r.Layers[i].Spec
		if !s.Kind.IsState() {
			continue
		}
		switch {
		case mode == "none" && o.MaxModelLen > 0:
			s.BlockSize = o.MaxModelLen
		case mode == "all" && r.Alignment != nil:
			s.BlockSize = r.Alignment.AttnBlockSize
		}
	}
	r.BlockSize = bs
	return r, nil
}

// stateDTypes resolves the element sizes of the conv and SSM states: the
// KV cache dtype for both in versions with one state dtype; otherwise the
// model dtype for conv, and for SSM --mamba-ssm-cache-dtype, whose auto is
// the model dtype unless the version's config hook for the model family
// says otherwise.
func stateDTypes(m *model.Model, o Options, prof vllm.Profile, kvBytes int) (conv, ssm int, notes []string, err error) {
	if prof.SingleStateDType {
		switch o.MambaSSMCacheDType {
		case "", "auto":
		default:
			return 0, 0, nil, optErr("--mamba-ssm-cache-dtype", o.MambaSSMCacheDType, "vLLM %s has no such flag: its Mamba state takes the KV cache dtype", prof.Name)
		}
		if m.HasKind(model.KDA) { // inferred: KDA came after these versions
			ssm, notes = kdaRecurrent(o, nil)
			return kvBytes, ssm, notes, nil
		}
		return kvBytes, kvBytes, nil, nil
	}
	conv, err = DTypeBytes(m.DType)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("kvspec: model dtype: %w", err)
	}
	ssm = conv
	switch o.MambaSSMCacheDType {
	case "", "auto":
		if !hasState(m) {
			break
		}
		name, note := prof.SSMDType(m.ModelType, m.MambaSSMDType, m.DType)
		if ssm, err = DTypeBytes(name); err != nil {
			return 0, 0, nil, fmt.Errorf("kvspec: SSM dtype: %w", err)
		}
		if note != "" {
			notes = append(notes, note)
		} else if m.MambaSSMDType != "" && m.MambaSSMDType != m.DType {
			notes = append(notes, fmt.Sprintf("--mamba-ssm-cache-dtype auto keeps the model dtype %s for the SSM state in %s, although the checkpoint declares %s (pass --mamba-ssm-cache-dtype %s to plan that)", m.DType, prof.Label, m.MambaSSMDType, m.MambaSSMDType))
		}
	case "float32", "bfloat16", "float16":
		if hasState(m) && prof.SSMFlagIgnored(m.ModelType) {
			notes = append(notes, fmt.Sprintf("vLLM %s ignores --mamba-ssm-cache-dtype %s for this model: both states take the conv dtype %s", prof.Name, o.MambaSSMCacheDType, m.DType))
			break
		}
		ssm, _ = DTypeBytes(o.MambaSSMCacheDType)
	default:
		return 0, 0, nil, optErr("--mamba-ssm-cache-dtype", o.MambaSSMCacheDType, "want auto, float32, bfloat16 or float16")
	}
	if m.HasKind(model.KDA) {
		ssm, notes = kdaRecurrent(o, notes)
	}
	return conv, ssm, notes, nil
}

// kdaRecurrent is the element size of a KDA layer's recurrent state:
// float32 whatever the flags say, as vLLM's kda_state_dtype gives it (the
// conv states take the conv dtype). --mamba-ssm-cache-dtype does not reach
// it, so setting it to another dtype earns a note.
func kdaRecurrent(o Options, notes []string) (int, []string) {
	switch o.MambaSSMCacheDType {
	case "", "auto", "float32":
	default:
		notes = append(notes, fmt.Sprintf("--mamba-ssm-cache-dtype %s does not apply to KDA layers: vLLM keeps their recurrent state in float32", o.MambaSSMCacheDType))
	}
	return 4, notes
}

// specRows is how many conv rows speculative tokens add to a state layer
// of this kind in this version.
func specRows(prof vllm.Profile, k model.Kind, spec int) int {
	switch {
	case k == model.GatedDeltaNet && prof.GDNSpecRows, k == model.Mamba2 && prof.Mamba2SpecRows:
		return spec
	}
	return 0
}

// specBlocks is how many blocks speculative tokens add to a state layer's
// worst case per request in this version and mode.
func specBlocks(prof vllm.Profile, mode string, spec int) int {
	if mode == "all" && prof.AllSpecBlocks || mode != "all" && prof.StateSpecBlocks {
		return spec
	}
	return 0
}

func hasState(m *model.Model) bool {
	for _, l := range m.Layers {
		if l.Kind.IsState() {
			return true
		}
	}
	return false
}

// alignHybrid is vLLM's Platform._align_hybrid_block_size: the smallest
// block size, a multiple of align, whose attention page holds a state page.
//
// From vLLM 0.19 the alignment is the larger of the backend's smallest
// kernel block and --block-size (userAligns); before, the kernel block
// alone.
func alignHybrid(m *model.Model, r *Rank, attn model.Layer, tp, kvBytes, bs, align int, mode string, userAligns bool) (*Alignment, error) {
	one := Spec{Kind: attn.Kind, BlockSize: 1, KVHeads: max(1, attn.KVHeads/tp), HeadSize: attn.HeadDim, HeadSizeV: attn.HeadDimV, DTypeBytes: kvBytes}
	if attn.Kind == model.MLA {
		one.KVHeads = 1
	}
	attn1 := one.RealPageBytes()
	var statePage int64
	for _, l := range r.Layers {
		if l.Layer.Role == model.Target && l.Spec.Kind.IsState() {
			statePage = l.Spec.RealPageBytes()
			break
		}
	}
	a := &Alignment{AttnBytesPerToken: attn1, StatePageBytes: statePage, Align: align}
	if userAligns {
		a.Align = max(align, bs)
	}
	if statePage == 0 || attn1 == 0 {
		a.AttnBlockSize = bs
		return a, nil
	}
	if mode == "all" {
		chunk := int64(a.Align)
		if m.MambaChunkSize > 0 {
			chunk = int64(lcm(m.MambaChunkSize, a.Align))
		}
		a.AttnBlockSize = int(chunk * ceilDiv(ceilDiv(statePage, attn1), chunk))
	} else {
		a.AttnBlockSize = a.Align * int(ceilDiv(statePage, int64(a.Align)*attn1))
	}
	return a, nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b int) int { return a / gcd(a, b) * b }

// StateShapes returns a recurrent layer's per-rank state shapes, conv first
// then SSM, as vLLM's MambaStateShapeCalculator does. spec speculative
// tokens add rows to the conv state of Mamba2 and gated delta net layers.
func StateShapes(l model.Layer, tp, spec int) [][]int {
	st := l.State
	switch l.Kind {
	case model.Mamba1:
		return [][]int{{st.ConvKernel - 1, st.Intermediate / tp}, {st.Intermediate / tp, st.StateSize}}
	case model.Mamba2:
		groups := st.Groups
		if groups%tp != 0 {
			groups = tp // groups are replicated to follow the head shards
		}
		convDim := st.Intermediate + 2*groups*st.StateSize
		return [][]int{{st.ConvKernel - 1 + spec, convDim / tp}, {st.Heads / tp, st.HeadDim, st.StateSize}}
	case model.GatedDeltaNet:
		convDim := st.KeyHeadDim*st.KeyHeads*2 + st.ValueHeadDim*st.ValueHeads
		return [][]int{{st.ConvKernel - 1 + spec, convDim / tp}, {st.ValueHeads / tp, st.ValueHeadDim, st.KeyHeadDim}}
	case model.KDA:
		// vLLM's MambaStateShapeCalculator.kda_state_shape: q, k and v
		// conv states of (K-1) x heads*head_dim/tp each (one packed conv
		// state of three times that in later versions: the same bytes in
		// the same order, given the channel-major layout), and a recurrent
		// state of heads/tp x head_dim x head_dim. It takes no rows for
		// speculative tokens.
		return [][]int{{st.ConvKernel - 1, 3 * st.Heads * st.HeadDim / tp}, {st.Heads / tp, st.HeadDim, st.HeadDim}}
	}
	return nil
}

// checkTP rejects a tensor-parallel size that does not divide what vLLM
// shards: query heads, KV heads (or is divided by them), and state heads.
func checkTP(m *model.Model, tp int) error {
	const flag = "--tensor-parallel-size"
	if m.AttentionHeads > 0 && m.AttentionHeads%tp != 0 {
		return optErr(flag, tp, "must divide num_attention_heads = %d", m.AttentionHeads)
	}
	for _, l := range m.Layers {
		switch {
		case l.Kind == model.MLA:
		case l.Kind.IsAttention():
			if l.KVHeads >= tp && l.KVHeads%tp != 0 {
				return optErr(flag, tp, "must divide the %d KV heads of layer %s", l.KVHeads, l.Name)
			}
			if l.KVHeads < tp && tp%l.KVHeads != 0 {
				return optErr(flag, tp, "must be a multiple of the %d KV heads of layer %s to replicate them", l.KVHeads, l.Name)
			}
		case l.Kind == model.Mamba1:
			if l.State.Intermediate%tp != 0 {
				return optErr(flag, tp, "must divide the Mamba intermediate size %d of layer %s", l.State.Intermediate, l.Name)
			}
		case l.Kind == model.Mamba2:
			if l.State.Heads%tp != 0 {
				return optErr(flag, tp, "must divide mamba_num_heads = %d", l.State.Heads)
			}
			if l.State.Groups%tp != 0 && l.State.Groups != 1 {
				return optErr(flag, tp, "must divide n_groups = %d (vLLM replicates groups only when n_groups is 1)", l.State.Groups)
			}
		case l.Kind == model.KDA:
			if l.State.Heads%tp != 0 {
				return optErr(flag, tp, "must divide the %d KDA heads (linear_attn_config.num_heads)", l.State.Heads)
			}
		case l.Kind == model.GatedDeltaNet:
			if l.State.KeyHeads%tp != 0 {
				return optErr(flag, tp, "must divide linear_num_key_heads = %d", l.State.KeyHeads)
			}
			if l.State.ValueHeads%tp != 0 {
				return optErr(flag, tp, "must divide linear_num_value_heads = %d", l.State.ValueHeads)
			}
		}
	}
	return nil
}
