package plan

import (
	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/vllm"
	"slices"
)

// This file is the planner's second half, what every engine pays for on a
// prepared rank: the limits, the group size, the split, the plan's figures
// (groups, slots, padding, blocks per request) and its memory pool
// (stages, num_blocks, concurrency, the KV cache tokens line). The
// start-up check is refusal.go's; the plan itself, its log lines, notes
// and inferred reasons are build.go's and inferred.go's.

// call is one engine's planning on a prepared rank: the resolved engine
// and its figures. It lives on the caller's stack: its per-class and
// per-stage figures sit in arrays inside it (slices only for ranks larger
// than those), so that Summary allocates nothing.
type call struct {
	pl      *Planner
	e       Engine // resolved
	pe      *profileEntry
	prof    *vllm.Profile
	notes   modeNotes
	r       *rankEntry
	stage   []int // each layer's pipeline stage (the Planner's); nil at PP 1
	lim     kvspec.Limits
	g       int   // group size (0 unless hybrid or fixed)
	whole   int64 // bytes per block of the whole model
	blocks0 int64 // num_blocks before --num-gpu-blocks-override
	sum     Summary
	// tokensRule says how sum.KVCacheTokens was computed (Plan.KVCacheTokensRule).
	tokensRule string
	refusal    error // a *RefusalError, or nil

	nclass    int
	blockArr  [16]int64 // class -> worst-case blocks per request at lim
	blockMore []int64   // the same, for ranks of more classes
	// The selector's inputs (hybrid dispatch; selInputs): each bucket's
	// layers L_j and a layer's worst-case bytes per request b_j, in the
	// arrays or, for more than 16 buckets, the slices.
	nsel      int
	sizeArr   [16]int
	byteArr   [16]int64
	sizeMore  []int
	byteMore  []int64
	cutArr    [16]cut // bucket -> its strided split at g
	cutMore   []cut   // the same, for ranks of more buckets
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

// selInputs is the selector's inputs: each bucket's layers and b_j.
func (c *call) selInputs() ([]int, []int64) {
	if c.sizeMore != nil {
		return c.sizeMore, c.byteMore
	}
	return c.sizeArr[:c.nsel], c.byteArr[:c.nsel]
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
// planning returns before a plan exists (a refusal is left in c.refusal).
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
	if pl.fromSpecs && len(pl.specs) > 0 {
		e.BlockSize = pl.specs[0].Spec.BlockSize // the specs' block size is the engine's
	}
	r := pl.rank(&e, pe)
	if r.err != nil {
		return r.err
	}
	c.pl, c.e, c.pe, c.prof, c.notes, c.r = pl, e, pe, prof, notes, r
	c.lim = e.limits(*prof)
	c.stage = pl.stagesOf(e.PipelineParallelSize)
	c.nclass = len(r.classes)
	if c.nclass > len(c.blockArr) {
		c.blockMore = make([]int64, c.nclass)
	}
	blocks := c.blocks()
	for i := range r.classes {
		blocks[i] = r.classes[i].MaxBlocks(c.lim)
	}
	switch r.dispatch {
	case "hybrid":
		var sizeArr [16]int
		var byteArr [16]int64
		sizes, bytes := sizeArr[:0], byteArr[:0]
		for j, b := range r.buckets {
			var most int64 // b_j: the largest worst-case bytes per request of a layer
			for _, cl := range r.bucketClasses[j] {
				most = max(most, blocks[cl]*r.pages[cl])
			}
			sizes, bytes = append(sizes, len(b)), append(bytes, most)
		}
		c.g = chooseGroupSize(e, *prof, sizes, bytes)
		c.nsel = len(sizes)
		if copy(c.sizeArr[:], sizes) < len(sizes) {
			c.sizeMore, c.byteMore = slices.Clone(sizes), slices.Clone(bytes)
		} else {
			copy(c.byteArr[:], bytes)
		}
	case "fixed":
		c.g = r.groupSize
	}
	if len(r.buckets) > len(c.cutArr) {
		c.cutMore = make([]cut, len(r.buckets))
	}
	cuts := c.cuts()
	for j, b := range r.buckets {
		n := r.groups(j, c.g)
		cuts[j] = cut{n: n, base: len(b) / n, extra: len(b) % n}
	}
	c.figures()
	c.memory()
	if !pl.fromSpecs {
		c.refusal = c.startupCheck()
	}
	return nil
}

// group returns group i of bucket j: its layer count, page bytes and
// worst-case blocks per request (the first layer's, or for a uniform-type
// group every layer's page and the largest worst case).
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

// figures fills the summary's grouping figures: groups, slots, padding
// slots and bytes, blocks per request, and whether the plan is inferred.
func (c *call) figures() {
	r, e, s := c.r, &c.e, &c.sum
	s.Engine, s.BlockSize, s.GroupSize, s.Dispatch = c.e, r.rank.BlockSize, c.g, r.dispatch
	s.Selector, s.Merge = e.Selector, e.merge(*c.prof)
	if r.dispatch == "uniform" || r.dispatch == "uniform-type" {
		s.Selector, s.Merge = "", "" // no group size was selected
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
	// Padding: Σ (G - len(group)) slots, each reserving the group's
	// worst-case blocks of its page per request. A uniform-type group has
	// no slots to pad.
	if r.dispatch != "uniform-type" {
		for j := range r.buckets {
			for i := 0; i < c.cuts()[j].n; i++ {
				layers, page, blocks := c.group(j, i)
				s.PaddingSlots += s.Slots - layers
				s.PaddingBytesPerRequest += int64(s.Slots-layers) * blocks * page
			}
		}
	}
	c.inferred(func(string) bool { s.Inferred = true; return false })
}

// memory sizes the pool: per pipeline stage, bytes per block is the
// largest group's page bytes on that stage (G * page when pages are
// uniform, the sum of its pages for a uniform-type group) and num_blocks
// the KV memory divided by it; the plan's num_blocks is the least over
// the stages with layers, unless --num-gpu-blocks-override replaces it.
// Then the concurrency, the capacity and the KV cache tokens line.
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
	// The "GPU KV cache size" line: the capacity from vLLM 0.21, before
	// that num_blocks // groups * the smallest block size.
	s.KVCacheTokens, c.tokensRule = s.CapacityTokens, "int(max_concurrency * max_model_len)"
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
		c.tokensRule = "num_blocks // groups * smallest block size"
	}
}

func (c *call) stageOf(layer int) int {
	if c.stage == nil {
		return 0
	}
	return c.stage[layer]
}
