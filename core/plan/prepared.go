package plan

import (
	"fmt"
	"slices"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
)

// This file is the Planner's path from an engine to a plan: a prepared
// rank (specs, unification, buckets: once per rank key), then, per engine,
// the group size, the strided split, the memory pool and the start-up
// check on a few integers per distinct spec, and last, only for Plan, the
// plan itself. newPlan is the same planner computed step by step; the
// tests hold the two equal.

// rankEntry is a rank prepared for grouping: what groupLayers computes
// before the limits enter. It is never modified once prepared, except for
// its split cache, which the Planner's lock guards.
type rankEntry struct {
	err      error // the error planning any engine of this rank returns (one value for every call)
	rank     *kvspec.Rank
	specs    []kvspec.LayerSpec // the grouping's specs: converted and unified
	dispatch string             // uniform, uniform-type or hybrid
	logs     []string           // the rank's log lines, then page unification's
	buckets  [][]int            // layer indices of each bucket (one bucket of every layer unless hybrid)

	// Layers with equal specs have equal pages and worst cases: each layer
	// has a class, each class one spec.
	class         []int          // layer -> class
	classes       []kvspec.Spec  // class -> spec
	pages         []int64        // class -> page bytes
	bucketClasses [][]int        // bucket -> its distinct classes
	sumPages      int64          // every layer's page: the uniform-type group's page
	loose         []string       // the loose bucket merge's inferred reasons
	profile       []string       // the profile's inferred rules this rank touches
	state         bool           // a state layer among the specs
	splits        map[int]*split // by group size
}

// split is what a plan of a rank takes from its buckets split by one group
// size, shared read-only by the plans that use it.
type split struct {
	index    map[string]int // layer name -> index in the plan's Layers
	warnings []string       // vLLM's padding warnings
}

// prepareRank computes a rank's specs and buckets for a resolved engine;
// an error is kept in the entry.
func prepareRank(m *model.Model, e Engine, prof *vllm.Profile, merge BucketMerge) *rankEntry {
	rank, err := kvspec.ForRank(m, e.specOptions(*prof))
	if err != nil {
		return &rankEntry{err: err}
	}
	specs := rank.Layers
	if extra := extraRetained(m, e); extra > 0 && prof.ExtraRetained {
		for i := range specs {
			if specs[i].Spec.Kind == model.Sliding {
				specs[i].Spec.ExtraRetained = extra
			}
		}
	}
	// What the specs say before dispatch converts and unifies them in
	// place (they are this entry's own, as ForRank made them: not copied).
	reasons, state := profileReasons(*prof, specs, e), false
	for _, s := range specs {
		state = state || s.Spec.Kind.IsState()
	}
	g, err := dispatch(specs, e.DisableHybrid, prof.PadPages, true)
	if err != nil {
		return &rankEntry{err: err}
	}
	r := &rankEntry{rank: rank, specs: g.specs, dispatch: g.dispatch, splits: map[int]*split{}, profile: reasons, state: state}
	if r.dispatch == "" {
		r.dispatch = "hybrid"
		g.buckets = makeBuckets(g.specs, merge, prof.MergeBuckets, kvspec.Limits{})
		if merge == Loose {
			r.loose = looseReasons(g.specs, g.buckets)
		}
	}
	r.logs = append(append([]string(nil), rank.Logs...), g.logs...)
	r.class = make([]int, len(r.specs))
	for i, ls := range r.specs {
		c := -1
		for j := range r.classes {
			if r.classes[j].Equal(ls.Spec) {
				c = j
				break
			}
		}
		if c < 0 {
			c = len(r.classes)
			r.classes = append(r.classes, ls.Spec)
			r.pages = append(r.pages, ls.Spec.PageBytes())
		}
		r.class[i] = c
		r.sumPages += r.pages[c]
	}
	for _, b := range g.buckets {
		r.buckets = append(r.buckets, b.layers)
		var cls []int
		for _, li := range b.layers {
			if c := r.class[li]; !slices.Contains(cls, c) {
				cls = append(cls, c)
			}
		}
		r.bucketClasses = append(r.bucketClasses, cls)
	}
	return r
}

// groups is how many groups bucket j splits into at group size g.
func (r *rankEntry) groups(j, g int) int {
	if r.dispatch != "hybrid" {
		return 1
	}
	return (len(r.buckets[j]) + g - 1) / g
}

// newSplit computes the layer index and the padding warnings of the
// rank's buckets split by g, in the order the plan lists its layers.
func (r *rankEntry) newSplit(g int) *split {
	sp := &split{index: make(map[string]int, len(r.specs))}
	pos := 0
	for j, b := range r.buckets {
		n := r.groups(j, g)
		if r.dispatch == "hybrid" {
			if pad := padOf(len(b), g); pad != 0 {
				sp.warnings = append(sp.warnings, paddingWarning(pad, len(b)))
			}
		}
		for i := 0; i < n; i++ {
			for k := i; k < len(b); k += n {
				sp.index[r.specs[b[k]].Layer.Name] = pos
				pos++
			}
		}
	}
	return sp
}

// call is one engine's planning on a prepared rank: the resolved engine
// and its figures. It lives on the caller's stack: its per-class and
// per-stage figures sit in arrays inside it (slices only for ranks larger
// than those), so that Summary allocates nothing.
type call struct {
	e       Engine // resolved
	pe      *profileEntry
	prof    *vllm.Profile
	notes   modeNotes
	r       *rankEntry
	stage   []int // each layer's pipeline stage (the Planner's); nil at PP 1
	lim     kvspec.Limits
	g       int   // group size (0 unless hybrid)
	whole   int64 // bytes per block of the whole model
	blocks0 int64 // num_blocks before --num-gpu-blocks-override
	sum     Summary
	refusal error // a *RefusalError, or nil

	nclass    int
	blockArr  [16]int64 // class -> worst-case blocks per request at lim
	blockMore []int64   // the same, for ranks of more classes
	cutArr    [16]cut   // bucket -> its strided split at g
	cutMore   []cut     // the same, for ranks of more buckets
	nstage    int
	stageArr  [8]Stage
	stageMore []Stage // the stages, for more pipeline stages than stageArr holds
}

// cut is one bucket's strided split: n groups, the first extra of which
// hold base+1 layers and the rest base (group i holds layers i, i+n, ...).
type cut struct{ n, base, extra int }

// cuts is each bucket's split at the call's group size.
func (c *call) cuts() []cut {
	if c.cutMore != nil {
		return c.cutMore
	}
	return c.cutArr[:len(c.r.buckets)]
}

// blocks is each class's worst-case blocks per request at the call's limits.
func (c *call) blocks() []int64 {
	if c.blockMore != nil {
		return c.blockMore
	}
	return c.blockArr[:c.nclass]
}

// stages is the call's pipeline stages.
func (c *call) stages() []Stage {
	if c.stageMore != nil {
		return c.stageMore
	}
	return c.stageArr[:c.nstage]
}

// run resolves e and computes its figures into c; it returns the errors
// New returns before a plan exists (a refusal is left in c.refusal).
func (pl *Planner) run(c *call, e Engine) error {
	pe := pl.profile(e.VLLMVersion)
	if pe.refused != "" {
		return flagErr("--vllm-version", e.VLLMVersion, pe.refused)
	}
	prof := &pe.prof
	e, notes, err := e.resolve(prof, pl.m.MaxModelLen, pl.state, pl.mambaAll)
	if err != nil {
		return err
	}
	r := pl.rank(&e, pe)
	if r.err != nil {
		return r.err
	}
	c.e, c.pe, c.prof, c.notes, c.r = e, pe, prof, notes, r
	c.lim = limitsOf(&e, prof)
	c.stage = pl.stagesOf(e.PipelineParallelSize)
	c.nclass = len(r.classes)
	if c.nclass > len(c.blockArr) {
		c.blockMore = make([]int64, c.nclass)
	}
	blocks := c.blocks()
	for i := range r.classes {
		blocks[i] = r.classes[i].MaxBlocks(c.lim)
	}
	if r.dispatch == "hybrid" {
		var sizeArr [16]int
		var byteArr [16]int64
		sizes, bytes := sizeArr[:0], byteArr[:0]
		for j, b := range r.buckets {
			var most int64
			for _, cl := range r.bucketClasses[j] {
				most = max(most, blocks[cl]*r.pages[cl])
			}
			sizes, bytes = append(sizes, len(b)), append(bytes, most)
		}
		c.g = chooseGroupSize(e, *prof, sizes, bytes)
	}
	if len(r.buckets) > len(c.cutArr) {
		c.cutMore = make([]cut, len(r.buckets))
	}
	cuts := c.cuts()
	for j, b := range r.buckets {
		n := r.groups(j, c.g)
		cuts[j] = cut{n: n, base: len(b) / n, extra: len(b) % n}
	}
	c.figures(pl)
	c.memory()
	c.refusal = startupCheck(c.e, c.prof, c.stages(), c.whole, c.need)
	return nil
}

// group returns group i of bucket j: its layer count, page bytes and
// worst-case blocks per request.
func (c *call) group(j, i int) (layers int, page, blocks int64) {
	r, k := c.r, c.cuts()[j]
	layers = k.base
	if i < k.extra {
		layers++
	}
	if r.dispatch == "uniform-type" {
		for _, b := range c.blocks() {
			blocks = max(blocks, b)
		}
		return layers, r.sumPages, blocks
	}
	cl := r.class[r.buckets[j][i]]
	return layers, r.pages[cl], c.blocks()[cl]
}

// figures fills the summary's grouping figures: groups, slots, padding,
// blocks per request.
func (c *call) figures(pl *Planner) {
	r, e, s := c.r, &c.e, &c.sum
	s.Engine, s.BlockSize, s.GroupSize, s.Dispatch = c.e, r.rank.BlockSize, c.g, r.dispatch
	s.Selector, s.Merge = e.Selector, e.merge(*c.prof)
	if r.dispatch != "hybrid" {
		s.Selector, s.Merge = "", ""
	}
	for j := range r.buckets {
		for i := 0; i < c.cuts()[j].n; i++ {
			layers, page, blocks := c.group(j, i)
			if s.NumGroups == 0 {
				s.PageBytes = page
			}
			s.NumGroups++
			s.Slots = max(s.Slots, layers)
			s.BlocksPerRequest += blocks
			if r.dispatch == "uniform-type" {
				c.whole = max(c.whole, page)
			} else {
				c.whole = max(c.whole, int64(layers)*page)
			}
		}
	}
	if r.dispatch != "uniform-type" {
		for j := range r.buckets {
			for i := 0; i < c.cuts()[j].n; i++ {
				layers, page, blocks := c.group(j, i)
				s.PaddingSlots += s.Slots - layers
				s.PaddingBytesPerRequest += int64(s.Slots-layers) * blocks * page
			}
		}
	}
	s.Inferred = len(r.loose) > 0 || len(r.profile) > 0 ||
		s.Selector == PaddingBytes && e.GroupSize == 0 && c.prof.Selector != vllm.SelectorPaddingBytes ||
		s.Selector == Balanced && e.GroupSize == 0 ||
		e.MambaCacheMode == "all" && r.state ||
		e.PipelineParallelSize > 1 && pl.drafts
}

// memory is Plan.memory on the call's figures: the stages, num_blocks,
// concurrency and the capacity lines' tokens.
func (c *call) memory() {
	r, e, s := c.r, &c.e, &c.sum
	nstages := 1
	if c.stage != nil {
		nstages = e.PipelineParallelSize
	}
	uniformType := r.dispatch == "uniform-type"
	c.nstage = nstages
	if nstages > len(c.stageArr) {
		c.stageMore = make([]Stage, nstages)
	}
	for st := 0; st < nstages; st++ {
		stage := Stage{Index: st}
		for j, b := range r.buckets {
			n := c.cuts()[j].n
			for i := 0; i < n; i++ {
				layers, page, _ := c.group(j, i)
				count, bytes := layers, int64(layers)*page
				if uniformType {
					bytes = page
				}
				if c.stage != nil {
					count, bytes = 0, 0
					for k := i; k < len(b); k += n {
						if c.stage[b[k]] != st {
							continue
						}
						count++
						if uniformType {
							bytes += r.pages[r.class[b[k]]]
						} else {
							bytes += page
						}
					}
				}
				stage.Layers += count
				stage.Slots = max(stage.Slots, count)
				stage.BytesPerBlock = max(stage.BytesPerBlock, bytes)
			}
		}
		if stage.BytesPerBlock > 0 {
			stage.NumBlocks = e.KVCacheMemoryBytes / stage.BytesPerBlock
		}
		c.stages()[st] = stage
	}
	s.NumBlocks = -1
	for _, st := range c.stages() {
		if st.Layers == 0 {
			continue
		}
		if s.NumBlocks < 0 || st.NumBlocks < s.NumBlocks {
			s.NumBlocks = st.NumBlocks
		}
		s.BytesPerBlock = max(s.BytesPerBlock, st.BytesPerBlock)
	}
	if s.NumBlocks < 0 {
		s.NumBlocks = 0
	}
	c.blocks0 = s.NumBlocks
	if e.NumGPUBlocksOverride > 0 {
		s.NumBlocks = int64(e.NumGPUBlocksOverride)
	}
	if s.BlocksPerRequest > 0 {
		s.MaxConcurrency = float64(s.NumBlocks) / float64(s.BlocksPerRequest)
		s.CapacityTokens = int64(s.MaxConcurrency * float64(e.MaxModelLen))
	}
	s.KVCacheTokens = s.CapacityTokens
	if c.prof.KVSizeLine == vllm.SizePerGroup && s.NumGroups > 0 {
		smallest := 0
		for j, b := range r.buckets {
			for i := 0; i < c.cuts()[j].n; i++ {
				bs := r.classes[r.class[b[i]]].BlockSize
				if smallest == 0 || bs < smallest {
					smallest = bs
				}
			}
		}
		s.KVCacheTokens = s.NumBlocks / int64(s.NumGroups) * int64(smallest)
	}
}

// need is Plan.neededBytes on the call's figures: what one request of
// maxLen tokens needs on the worker of stage s (s < 0: the whole model).
func (c *call) need(s, maxLen int) int64 {
	r := c.r
	blocks := c.blocks()
	if maxLen != c.lim.MaxModelLen {
		lim := kvspec.Limits{MaxModelLen: maxLen, InFlightTokens: c.lim.InFlightTokens}
		var buf [16]int64
		blocks = buf[:0]
		for i := range r.classes {
			blocks = append(blocks, r.classes[i].MaxBlocks(lim))
		}
	}
	all := s < 0 || c.nstage == 1
	bpb := c.whole
	if s >= 0 {
		bpb = c.stages()[s].BytesPerBlock
	}
	switch c.prof.Refusal {
	case vllm.RefusalLayers:
		var total int64
		for li, cl := range r.class {
			if all || c.stageOf(li) == s {
				total += blocks[cl] * r.pages[cl]
			}
		}
		return total
	case vllm.RefusalGroup0:
		return bpb * c.groupBlocks(blocks, 0, 0, s, all)
	}
	var total int64
	for j := range r.buckets {
		for i := 0; i < c.cuts()[j].n; i++ {
			total += c.groupBlocks(blocks, j, i, s, all)
		}
	}
	return bpb * total
}

func (c *call) stageOf(layer int) int {
	if c.stage == nil {
		return 0
	}
	return c.stage[layer]
}

// groupBlocks is Plan.groupBlocks: the largest worst case of group i of
// bucket j among its layers on stage s (every stage when all is set).
func (c *call) groupBlocks(blocks []int64, j, i, s int, all bool) int64 {
	r := c.r
	b, n := r.buckets[j], c.cuts()[j].n
	var most int64
	for k := i; k < len(b); k += n {
		if all || c.stageOf(b[k]) == s {
			most = max(most, blocks[r.class[b[k]]])
		}
	}
	return most
}

// reuse returns s resized to n and zeroed, in s's array when it is large
// enough.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// plan builds the Plan of the call's figures into p, as newPlan builds
// it, reusing p's arrays (a plan PlanInto wrote before) where they are
// large enough.
func (c *call) plan(pl *Planner, p *Plan) {
	r, e, prof, s := c.r, &c.e, c.prof, &c.sum
	sp := pl.split(r, c.g)
	oldStrs, oldGroups, oldLayers, oldStages, oldAlign := p.strs, p.Groups, p.Layers, p.Stages, p.Alignment
	*p = Plan{
		Model: pl.m.Name, Engine: c.e, VLLMVersion: prof.Name, VLLMProfile: prof.Label, Profile: *prof,
		BlockSize: s.BlockSize, PageBytes: s.PageBytes, BytesPerBlock: s.BytesPerBlock,
		NumGroups: s.NumGroups, GroupSize: s.GroupSize, Slots: s.Slots, PaddingSlots: s.PaddingSlots,
		PaddingBytesPerRequest: s.PaddingBytesPerRequest,
		NumBlocks:              s.NumBlocks, BlocksPerRequest: s.BlocksPerRequest, MaxConcurrency: s.MaxConcurrency,
		KVCacheTokens: s.KVCacheTokens, KVCacheTokensRule: "int(max_concurrency * max_model_len)", CapacityTokens: s.CapacityTokens,
		Selector: s.Selector, Merge: s.Merge, Dispatch: s.Dispatch,
		Backend:    r.rank.Backend.Name,
		layerIndex: sp.index,
	}
	if prof.KVSizeLine == vllm.SizePerGroup && s.NumGroups > 0 {
		p.KVCacheTokensRule = "num_blocks // groups * smallest block size"
	}
	if a := r.rank.Alignment; a != nil {
		if oldAlign == nil {
			oldAlign = new(kvspec.Alignment)
		}
		*oldAlign = *a
		p.Alignment = oldAlign
	}
	// Every string slice of the plan in one array: the groups' layer
	// names, then room for the logs, the notes, the warnings and the
	// inferred reasons, each capped so that appending to one cannot
	// overwrite the next.
	engineNotes := c.notes.render(prof)
	nlogs := len(r.logs) + 3
	nnotes := len(pl.m.Notes) + len(engineNotes) + len(r.rank.Notes)
	nreasons := len(r.loose) + len(r.profile) + 4
	strs := reuse(oldStrs, len(r.specs)+nlogs+nnotes+len(sp.warnings)+nreasons)
	p.strs = strs
	names, rest := strs[:len(r.specs)], strs[len(r.specs):]
	carve := func(n int) []string {
		out := rest[:0:n]
		rest = rest[n:]
		return out
	}
	p.Logs, p.Notes, p.Warnings, p.InferredReasons = carve(nlogs), carve(nnotes), carve(len(sp.warnings)), carve(nreasons)

	uniformType := r.dispatch == "uniform-type"
	p.Groups = reuse(oldGroups, s.NumGroups)
	p.Layers = reuse(oldLayers, len(r.specs))
	gi, li := 0, 0
	for j, b := range r.buckets {
		n := c.cuts()[j].n
		for i := 0; i < n; i++ {
			_, page, blocks := c.group(j, i)
			grp := &p.Groups[gi]
			grp.Spec = r.specs[b[i]].Spec
			grp.Index, grp.Kind, grp.BlockSize, grp.PageBytes = gi, grp.Spec.Kind, grp.Spec.BlockSize, page
			grp.BlocksPerRequest, grp.Bucket, grp.UniformType = blocks, j, uniformType
			start := li
			for k, slot := i, 0; k < len(b); k, slot = k+n, slot+1 {
				ls := &r.specs[b[k]]
				lp := &p.Layers[li]
				lp.Name, lp.Kind, lp.Role, lp.Spec = ls.Layer.Name, ls.Spec.Kind, ls.Layer.Role, ls.Spec
				lp.Group, lp.Slot, lp.Stage = gi, slot, c.stageOf(b[k])
				lp.Page, lp.Block, lp.KVHeads = r.pages[r.class[b[k]]], ls.Spec.BlockSize, ls.Spec.KVHeads
				names[li] = lp.Name
				li++
			}
			grp.Layers = names[start:li:li]
			gi++
		}
	}
	p.Stages = append(oldStages[:0], c.stages()...)

	p.Logs = append(p.Logs, r.logs...)
	if e.NumGPUBlocksOverride > 0 {
		p.Logs = append(p.Logs, overrideLog(c.blocks0, e.NumGPUBlocksOverride))
	}
	p.Notes = append(append(append(p.Notes, pl.m.Notes...), engineNotes...), r.rank.Notes...)
	p.Warnings = append(p.Warnings, sp.warnings...)

	for _, reason := range r.loose {
		p.addInferred(reason)
	}
	if p.Selector == PaddingBytes && e.GroupSize == 0 && prof.Selector != vllm.SelectorPaddingBytes {
		p.addInferred(c.pe.paddingBy)
	}
	if p.Selector == Balanced && e.GroupSize == 0 {
		p.addInferred(reasonBalanced)
	}
	for _, reason := range r.profile {
		p.addInferred(reason)
	}
	if e.MambaCacheMode == "all" && r.state {
		p.addInferred(reasonMambaAll)
	}
	if e.PipelineParallelSize > 1 && pl.drafts {
		p.addInferred(reasonDraftStage)
	}
	p.finish()
}

// The inferred reasons both of the planner's paths give.
const (
	reasonBalanced   = "selector balanced follows vLLM PR #49472, which vLLM main does not carry"
	reasonMambaAll   = "mamba cache mode all: the state kernel chunk (64 for gated delta net, 128 otherwise) is assumed"
	reasonDraftStage = "draft and MTP layers are placed on the last pipeline stage"
)

// paddingBytesReason is the inferred reason of the padding-bytes selector
// in a profile that does not carry it.
func paddingBytesReason(label string) string {
	return "selector padding-bytes follows vLLM PR #58207's diff, which " + label + " does not carry"
}

// overrideLog is vLLM's line for --num-gpu-blocks-override.
func overrideLog(numBlocks int64, override int) string {
	return fmt.Sprintf("Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d", numBlocks, override)
}

// paddingWarning is vLLM's warning for pad padding layers in a bucket of
// layers layers.
func paddingWarning(pad, layers int) string {
	return fmt.Sprintf("Add %d padding layers, may waste at most %.2f%% KV cache memory", pad, 100*float64(pad)/float64(layers))
}
