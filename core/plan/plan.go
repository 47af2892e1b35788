package plan

import (
	"strconv"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
)

// Plan is one engine's KV cache group plan and what it costs, per rank.
type Plan struct {
	Model  string `json:"model"`
	Engine Engine `json:"engine"` // with defaults filled in
	// VLLMVersion is the profile the plan follows, VLLMProfile its label.
	VLLMVersion string       `json:"vllm_version"`
	VLLMProfile string       `json:"vllm_profile"`
	Profile     vllm.Profile `json:"-"`

	BlockSize     int   `json:"block_size"`      // cache block size in tokens (attention, after alignment)
	PageBytes     int64 `json:"page_size_bytes"` // bytes of one layer's block per rank (the unified page)
	BytesPerBlock int64 `json:"bytes_per_block"` // bytes one block id takes across a group's slots

	Groups       []Group `json:"groups"`
	NumGroups    int     `json:"num_groups"`
	GroupSize    int     `json:"group_size"`    // the selector's g (0 unless hybrid)
	Slots        int     `json:"slots"`         // G: the longest group, the number of slot tensors
	PaddingSlots int     `json:"padding_slots"` // Σ (G - len(group)): slot cells no layer uses
	// PaddingBytesPerRequest is Σ (G - len(group)) * blocks * page: the
	// worst-case bytes per request the padding slots reserve on one rank.
	PaddingBytesPerRequest int64 `json:"padding_bytes_per_request"`

	NumBlocks        int64   `json:"num_blocks"`
	BlocksPerRequest int64   `json:"blocks_per_request"`
	MaxConcurrency   float64 `json:"max_concurrency"`
	// KVCacheTokens is the "GPU KV cache size" the version logs:
	// int(max_concurrency * max_model_len) from vLLM 0.21, num_blocks //
	// groups * the smallest block size before (KVCacheTokensRule says
	// which); CapacityTokens is the first figure in every version.
	KVCacheTokens     int64  `json:"kv_cache_tokens"`
	KVCacheTokensRule string `json:"kv_cache_tokens_rule"`
	CapacityTokens    int64  `json:"capacity_tokens"`

	Selector Selector    `json:"selector"`
	Merge    BucketMerge `json:"bucket_merge"`
	Dispatch string      `json:"dispatch"` // uniform, uniform-type, hybrid or fixed

	Inferred        bool     `json:"inferred"`
	InferredReasons []string `json:"inferred_reasons"`
	Warnings        []string `json:"warnings"`
	Logs            []string `json:"logs"`
	Notes           []string `json:"notes"`

	Layers []LayerPlan `json:"layers"`
	Stages []Stage     `json:"stages"`
	// Buckets are what the hybrid group-size selector weighed (nil for
	// any other dispatch): Explain reads them.
	Buckets   []Bucket          `json:"buckets,omitempty"`
	Alignment *kvspec.Alignment `json:"alignment,omitempty"`
	Backend   string            `json:"attention_backend"`

	layerIndex map[string]int // layer name -> index in Layers, built with the plan
	strs       []string       // the array every string slice of the plan lies in
}

// Group is one KV cache group: layers that share block ids, one per slot.
type Group struct {
	Index            int         `json:"index"`
	Kind             model.Kind  `json:"kind"`
	Layers           []string    `json:"layers"` // in slot order
	BlockSize        int         `json:"block_size"`
	PageBytes        int64       `json:"page_size_bytes"`
	BlocksPerRequest int64       `json:"blocks_per_request"`
	Bucket           int         `json:"bucket"`
	UniformType      bool        `json:"uniform_type,omitempty"`
	Spec             kvspec.Spec `json:"-"`
}

// Bucket is one bucket of layers the hybrid selector splits into groups:
// layers of one kind and page, in first-appearance order.
type Bucket struct {
	Kind      model.Kind `json:"kind"`
	Layers    int        `json:"layers"` // L_j
	BlockSize int        `json:"block_size"`
	PageBytes int64      `json:"page_size_bytes"`
	// WorstBytes is b_j: the most one layer of the bucket holds for one
	// request at max-model-len (vLLM's max_memory_usage_bytes), what the
	// padding-bytes selector weighs a padding layer by.
	WorstBytes int64 `json:"worst_bytes_per_layer"`
}

// LayerPlan places one layer: its group, its slot and its spec on a rank.
type LayerPlan struct {
	Name    string      `json:"name"`
	Kind    model.Kind  `json:"kind"`
	Role    model.Role  `json:"role"`
	Group   int         `json:"group"`
	Slot    int         `json:"slot"`
	Stage   int         `json:"stage"`
	Spec    kvspec.Spec `json:"-"`
	Page    int64       `json:"page_size_bytes"`
	Block   int         `json:"block_size"`
	KVHeads int         `json:"kv_heads_per_rank,omitempty"`
}

// Stage is one pipeline-parallel stage's projection of the plan.
type Stage struct {
	Index         int   `json:"index"`
	Layers        int   `json:"layers"`
	Slots         int   `json:"slots"`
	BytesPerBlock int64 `json:"bytes_per_block"`
	NumBlocks     int64 `json:"num_blocks"`
}

// Layout is a grouping that can be imposed on an engine instead of its own
// selection: the TP-invariant plan uses one layout on both sides.
type Layout struct {
	GroupSize int        `json:"group_size"`
	Groups    [][]string `json:"groups"`  // layer names per group, in slot order
	Buckets   []int      `json:"buckets"` // bucket index of each group
}

// New plans m for one engine. m must already carry any draft or MTP layers.
// It prepares a Planner for the one plan; a caller that plans one model
// for many engines keeps a Planner instead.
func New(m *model.Model, e Engine) (*Plan, error) {
	pl, err := NewPlanner(m)
	if err != nil {
		return nil, err
	}
	return pl.Plan(e)
}

// WithLayout plans m for one engine with a fixed grouping: the layout's
// groups and group size in place of the buckets and the selector's split
// (dispatch "fixed"); every other step is New's.
func WithLayout(m *model.Model, e Engine, l *Layout) (*Plan, error) {
	pl, err := NewPlanner(m)
	if err != nil {
		return nil, err
	}
	pl.fixed = l
	return pl.Plan(e)
}

// FromSpecs plans layers whose per-rank specs are given directly (one
// pipeline stage). It is the planner without the model and platform steps,
// which is how vLLM's own unit tests drive get_kv_cache_configs: the specs
// stand for the rank's (their first block size is the engine's), there is
// no model (its max model len is 1, its notes none), the engine's notes
// are not told, and the start-up check does not run.
func FromSpecs(specs []kvspec.LayerSpec, e Engine) (*Plan, error) {
	pl := newPlanner(&model.Model{MaxModelLen: 1})
	pl.fromSpecs, pl.specs, pl.mambaAll = true, specs, true
	for _, s := range specs {
		pl.state = pl.state || s.Spec.Kind.IsState()
	}
	return pl.Plan(e)
}

// LogLines returns vLLM's log lines for the plan in the order vLLM prints
// them, each prefixed with its level: platform and unification lines,
// padding warnings, then the capacity lines.
func (p *Plan) LogLines() []string {
	var out []string
	n := len(p.Logs)
	capacity := 2
	if n < capacity {
		capacity = n
	}
	for _, l := range p.Logs[:n-capacity] {
		out = append(out, "INFO    "+l)
	}
	for _, w := range p.Warnings {
		out = append(out, "WARNING "+w)
	}
	for _, l := range p.Logs[n-capacity:] {
		out = append(out, "INFO    "+l)
	}
	return out
}

// Layout returns the plan's grouping, to impose it elsewhere or compare.
func (p *Plan) Layout() *Layout {
	l := &Layout{GroupSize: p.GroupSize}
	for _, g := range p.Groups {
		l.Groups = append(l.Groups, append([]string(nil), g.Layers...))
		l.Buckets = append(l.Buckets, g.Bucket)
	}
	return l
}

// LayerByName finds a layer's placement: through the index built with
// the plan (a copy whose Layers changed falls back to a scan).
func (p *Plan) LayerByName(name string) (LayerPlan, bool) {
	if i, ok := p.layerIndex[name]; ok && i < len(p.Layers) && p.Layers[i].Name == name {
		return p.Layers[i], true
	}
	for _, l := range p.Layers {
		if l.Name == name {
			return l, true
		}
	}
	return LayerPlan{}, false
}

// commas formats n with thousands separators, as vLLM's "{:,}" does.
func commas(n int64) string {
	var buf [32]byte
	return string(appendCommas(buf[:0], n))
}

// appendCommas appends n with thousands separators to b.
func appendCommas(b []byte, n int64) []byte {
	var digits [24]byte
	d := strconv.AppendInt(digits[:0], n, 10)
	if d[0] == '-' {
		b, d = append(b, '-'), d[1:]
	}
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, c)
	}
	return b
}

// Commas formats n with thousands separators.
func Commas(n int64) string { return commas(n) }
