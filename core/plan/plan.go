package plan

import (
	"strconv"
	"strings"

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

	Layers    []LayerPlan       `json:"layers"`
	Stages    []Stage           `json:"stages"`
	Alignment *kvspec.Alignment `json:"alignment,omitempty"`
	Backend   string            `json:"attention_backend"`

	layerIndex map[string]int // layer name -> index in Layers, built with the plan
	strs       []string       // the array every string slice of the plan lies in (Planner plans)
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

// WithLayout plans m for one engine with a fixed grouping.
func WithLayout(m *model.Model, e Engine, l *Layout) (*Plan, error) {
	return newPlan(m, e, l)
}

// newPlan is the planner computed step by step for every engine: WithLayout
// plans with it, and the tests hold the Planner's plans equal to its.
func newPlan(m *model.Model, e Engine, fixed *Layout) (*Plan, error) {
	hybrid := hasState(m)
	e, prof, engineNotes, err := e.resolved(m.MaxModelLen, hybrid, m.MambaAll == "supported")
	if err != nil {
		return nil, err
	}
	rank, err := kvspec.ForRank(m, e.specOptions(prof))
	if err != nil {
		return nil, err
	}
	specs := rank.Layers
	if extra := extraRetained(m, e); extra > 0 && prof.ExtraRetained {
		for i := range specs {
			if specs[i].Spec.Kind == model.Sliding {
				specs[i].Spec.ExtraRetained = extra
			}
		}
	}
	p, err := fromSpecs(specs, e, prof, fixed, stagesOf(m, e.PipelineParallelSize))
	if err != nil {
		return nil, err
	}
	p.Model = m.Name
	p.BlockSize = rank.BlockSize
	p.Alignment = rank.Alignment
	p.Backend = rank.Backend.Name
	p.Logs = append(append([]string(nil), rank.Logs...), p.Logs...)
	p.Notes = append(append(append(append([]string{}, m.Notes...), engineNotes...), rank.Notes...), p.Notes...)
	if e.PipelineParallelSize > 1 && hasRole(m, model.Draft, model.MTP) {
		p.addInferred(reasonDraftStage)
	}
	p.finish()
	if err := p.startupCheck(); err != nil {
		return p, err
	}
	return p, nil
}

// FromSpecs plans layers whose per-rank specs are given directly (one
// pipeline stage). It is the planner without the model and platform steps,
// which is how vLLM's own unit tests drive get_kv_cache_configs.
func FromSpecs(specs []kvspec.LayerSpec, e Engine) (*Plan, error) {
	hybrid := false
	for _, s := range specs {
		hybrid = hybrid || s.Spec.Kind.IsState()
	}
	e, prof, _, err := e.resolved(1, hybrid, true)
	if err != nil {
		return nil, err
	}
	if len(specs) > 0 {
		e.BlockSize = specs[0].Spec.BlockSize
	}
	p, err := fromSpecs(specs, e, prof, nil, nil)
	if err != nil {
		return nil, err
	}
	if len(specs) > 0 {
		p.BlockSize = specs[0].Spec.BlockSize
	}
	p.finish()
	return p, nil
}

func hasState(m *model.Model) bool {
	for _, l := range m.Layers {
		if l.Kind.IsState() {
			return true
		}
	}
	return false
}

// relevant reports whether an inferred rule of the profile touches this
// plan: the rules about state layers for models with state layers, the
// sliding-window reserve for models with windows; the connector's and the
// refusal's rules belong to the transfer and the start-up check.
func relevant(rule string, specs []kvspec.LayerSpec, e Engine) bool {
	state, window := false, false
	for _, s := range specs {
		state = state || s.Spec.Kind.IsState()
		window = window || s.Spec.Kind == model.Sliding || s.Spec.Kind == model.ChunkedLocal
	}
	for _, k := range []struct {
		behaviour string
		need      bool
	}{
		{vllm.BStateDType, state}, {vllm.BSSMHook, state}, {vllm.BPrefix, state},
		{vllm.BMambaMode, state}, {vllm.BStateSpec, state}, {vllm.BSpecRows, state && e.NumSpeculativeTokens > 0},
		{vllm.BAlign, state}, {vllm.BInFlight, window}, {vllm.BAsync, window}, {vllm.BExtraRetained, window && e.NumSpeculativeTokens > 1},
		{vllm.BSelector, true}, {vllm.BBucketMerge, true},
	} {
		if strings.HasPrefix(rule, k.behaviour+" ") {
			return k.need
		}
	}
	return false
}

// profileReasons are the inferred rules of the profile that touch a plan
// of these specs, as inferred reasons.
func profileReasons(prof vllm.Profile, specs []kvspec.LayerSpec, e Engine) []string {
	var out []string
	for _, r := range prof.Inferred() {
		if relevant(r, specs, e) {
			out = append(out, "profile "+prof.Name+": "+r)
		}
	}
	return out
}

func hasRole(m *model.Model, roles ...model.Role) bool {
	for _, l := range m.Layers {
		for _, r := range roles {
			if l.Role == r {
				return true
			}
		}
	}
	return false
}

// extraRetained is vLLM's extra_retained_tokens: with multi-layer MTP
// drafting (more than one MTP layer and more than one speculative token),
// sliding windows retain num_speculative_tokens-1 extra tokens.
func extraRetained(m *model.Model, e Engine) int {
	mtp := 0
	for _, l := range m.Layers {
		if l.Role == model.MTP {
			mtp++
		}
	}
	if min(mtp, e.NumSpeculativeTokens) > 1 {
		return e.NumSpeculativeTokens - 1
	}
	return 0
}

// stagesOf maps each layer name to its pipeline stage, as vLLM's
// get_pp_indices partitions num_hidden_layers: every stage gets
// layers/pp, and the remainder goes one each to the stages before the last.
// Draft and MTP layers run on the last stage.
func stagesOf(m *model.Model, pp int) map[string]int {
	if pp <= 1 {
		return nil
	}
	n := m.HiddenLayers
	sizes := make([]int, pp)
	for i := range sizes {
		sizes[i] = n / pp
	}
	for i := 2; i < n%pp+2; i++ {
		sizes[pp-i]++
	}
	bounds := make([]int, pp)
	acc := 0
	for i, s := range sizes {
		acc += s
		bounds[i] = acc
	}
	out := map[string]int{}
	for _, l := range m.Layers {
		stage := pp - 1
		if l.Role == model.Target {
			for s, b := range bounds {
				if l.Index < b {
					stage = s
					break
				}
			}
		}
		out[l.Name] = stage
	}
	return out
}

func fromSpecs(specs []kvspec.LayerSpec, e Engine, prof vllm.Profile, fixed *Layout, stages map[string]int) (*Plan, error) {
	g, err := groupLayers(specs, e, prof, fixed)
	if err != nil {
		return nil, err
	}
	lim := e.limits(prof)
	p := &Plan{
		Engine:          e,
		VLLMVersion:     prof.Name,
		VLLMProfile:     prof.Label,
		Profile:         prof,
		Selector:        e.Selector,
		Merge:           e.merge(prof),
		Dispatch:        g.dispatch,
		GroupSize:       g.groupSize,
		Warnings:        append([]string{}, g.warnings...),
		InferredReasons: []string{},
		Notes:           []string{},
		Logs:            append([]string{}, g.logs...),
	}
	if g.dispatch != "hybrid" && g.dispatch != "fixed" {
		p.Selector = ""
		p.Merge = ""
	}
	p.Layers = make([]LayerPlan, 0, len(specs))
	p.Groups = make([]Group, 0, len(g.groups))
	for gi, dg := range g.groups {
		first := g.specs[dg.layers[0]].Spec
		grp := Group{Index: gi, Kind: first.Kind, BlockSize: first.BlockSize, Bucket: dg.bucket, UniformType: dg.uniformType, Spec: first}
		for slot, li := range dg.layers {
			ls := g.specs[li]
			grp.Layers = append(grp.Layers, ls.Layer.Name)
			if dg.uniformType {
				grp.PageBytes += ls.Spec.PageBytes()
				grp.BlocksPerRequest = max(grp.BlocksPerRequest, ls.Spec.MaxBlocks(lim))
			}
			p.Layers = append(p.Layers, LayerPlan{
				Name: ls.Layer.Name, Kind: ls.Spec.Kind, Role: ls.Layer.Role, Group: gi, Slot: slot,
				Stage: stages[ls.Layer.Name], Spec: ls.Spec, Page: ls.Spec.PageBytes(), Block: ls.Spec.BlockSize, KVHeads: ls.Spec.KVHeads,
			})
		}
		if !dg.uniformType {
			grp.PageBytes = first.PageBytes()
			grp.BlocksPerRequest = first.MaxBlocks(lim)
		}
		p.Groups = append(p.Groups, grp)
		p.Slots = max(p.Slots, len(dg.layers))
		p.BlocksPerRequest += grp.BlocksPerRequest
	}
	p.layerIndex = make(map[string]int, len(p.Layers))
	for i, l := range p.Layers {
		p.layerIndex[l.Name] = i
	}
	p.NumGroups = len(p.Groups)
	p.PageBytes = p.Groups[0].PageBytes
	if !p.Groups[0].UniformType {
		for _, grp := range p.Groups {
			p.PaddingSlots += p.Slots - len(grp.Layers)
			p.PaddingBytesPerRequest += int64(p.Slots-len(grp.Layers)) * grp.BlocksPerRequest * grp.PageBytes
		}
	}
	p.memory(e, stages)
	if e.merge(prof) == Loose && g.dispatch == "hybrid" {
		for _, r := range looseReasons(g.specs, g.buckets) {
			p.addInferred(r)
		}
	}
	if p.Selector == PaddingBytes && e.GroupSize == 0 && prof.Selector != vllm.SelectorPaddingBytes {
		p.addInferred(paddingBytesReason(prof.Label))
	}
	if p.Selector == Balanced && e.GroupSize == 0 {
		p.addInferred(reasonBalanced)
	}
	for _, r := range profileReasons(prof, specs, e) {
		p.addInferred(r)
	}
	if e.MambaCacheMode == "all" {
		for _, s := range specs {
			if s.Spec.Kind.IsState() {
				p.addInferred(reasonMambaAll)
				break
			}
		}
	}
	return p, nil
}

// memory sizes the pool: bytes per block is the largest group's total page
// bytes (G * page when pages are uniform); num_blocks is the KV memory
// divided by it, the minimum over pipeline stages.
func (p *Plan) memory(e Engine, stages map[string]int) {
	nstages := max(1, e.PipelineParallelSize)
	if stages == nil {
		nstages = 1
	}
	p.Stages = nil
	// Per stage and group: the layers it holds there and their page bytes.
	count := make([]int, nstages*len(p.Groups))
	bytes := make([]int64, nstages*len(p.Groups))
	for _, lp := range p.Layers {
		stage := min(lp.Stage, nstages-1)
		i := stage*len(p.Groups) + lp.Group
		count[i]++
		if p.Groups[lp.Group].UniformType {
			bytes[i] += lp.Page
		} else {
			bytes[i] += p.Groups[lp.Group].PageBytes
		}
	}
	for s := 0; s < nstages; s++ {
		st := Stage{Index: s}
		for g := range p.Groups {
			n := count[s*len(p.Groups)+g]
			st.Layers += n
			st.Slots = max(st.Slots, n)
			st.BytesPerBlock = max(st.BytesPerBlock, bytes[s*len(p.Groups)+g])
		}
		if st.BytesPerBlock > 0 {
			st.NumBlocks = e.KVCacheMemoryBytes / st.BytesPerBlock
		}
		p.Stages = append(p.Stages, st)
	}
	p.NumBlocks = -1
	for _, st := range p.Stages {
		if st.Layers == 0 {
			continue
		}
		if p.NumBlocks < 0 || st.NumBlocks < p.NumBlocks {
			p.NumBlocks = st.NumBlocks
		}
		p.BytesPerBlock = max(p.BytesPerBlock, st.BytesPerBlock)
	}
	if p.NumBlocks < 0 {
		p.NumBlocks = 0
	}
	if e.NumGPUBlocksOverride > 0 {
		p.Logs = append(p.Logs, overrideLog(p.NumBlocks, e.NumGPUBlocksOverride))
		p.NumBlocks = int64(e.NumGPUBlocksOverride)
	}
	if p.BlocksPerRequest > 0 {
		p.MaxConcurrency = float64(p.NumBlocks) / float64(p.BlocksPerRequest)
		p.CapacityTokens = int64(p.MaxConcurrency * float64(e.MaxModelLen))
	}
	p.KVCacheTokens, p.KVCacheTokensRule = p.CapacityTokens, "int(max_concurrency * max_model_len)"
	if p.Profile.KVSizeLine == vllm.SizePerGroup && len(p.Groups) > 0 {
		smallest := p.Groups[0].BlockSize
		for _, g := range p.Groups {
			smallest = min(smallest, g.BlockSize)
		}
		p.KVCacheTokens = p.NumBlocks / int64(len(p.Groups)) * int64(smallest)
		p.KVCacheTokensRule = "num_blocks // groups * smallest block size"
	}
}

func (p *Plan) addInferred(reason string) {
	for _, r := range p.InferredReasons {
		if r == reason {
			return
		}
	}
	p.InferredReasons = append(p.InferredReasons, reason)
	p.Inferred = true
}

// finish appends the capacity log lines vLLM prints.
func (p *Plan) finish() {
	lines := p.capacityLines()
	p.Logs = append(p.Logs, lines[0], lines[1])
}

// capacityLines are vLLM's two capacity log lines, "GPU KV cache size: N
// tokens" and "Maximum concurrency for N tokens per request: X.XXx",
// formatted as fmt's %s and %.2f would (a plan's concurrency is finite).
func (p *Plan) capacityLines() [2]string {
	var buf [96]byte
	b := append(buf[:0], "GPU KV cache size: "...)
	b = appendCommas(b, p.KVCacheTokens)
	b = append(b, " tokens"...)
	size := string(b)
	b = append(buf[:0], "Maximum concurrency for "...)
	b = appendCommas(b, int64(p.Engine.MaxModelLen))
	b = append(b, " tokens per request: "...)
	b = strconv.AppendFloat(b, p.MaxConcurrency, 'f', 2, 64)
	b = append(b, 'x')
	return [2]string{size, string(b)}
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
