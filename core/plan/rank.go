package plan

import (
	"slices"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
)

// This file is the planner's first half, what does not depend on the
// limits or the group size: a rank's specs (the model step, or the specs
// FromSpecs is given), the dispatch, page unification and the buckets (or
// a fixed layout's groups), prepared once per rank key and shared by
// every engine of that rank; and the strided split of the buckets by a
// group size.

// rankEntry is a rank prepared for grouping. It is never modified once
// prepared, except for its split cache, which the Planner's lock guards.
type rankEntry struct {
	err      error // the error planning any engine of this rank returns (one value for every call)
	rank     *kvspec.Rank
	specs    []kvspec.LayerSpec // the grouping's specs: converted and unified
	dispatch string             // uniform, uniform-type, hybrid or fixed
	logs     []string           // the rank's log lines, then page unification's

	// buckets are layer indices, in slot order: hybrid, the buckets, each
	// split by the group size into strided groups; fixed, the layout's
	// groups, one bucket each; otherwise one bucket of every layer.
	buckets   [][]int
	groupSize int      // fixed: the layout's group size
	bucketOf  []int    // fixed: each group's bucket index in the layout (nil: a bucket's own index)
	warnings  []string // fixed: vLLM's padding warnings for the layout's buckets

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

// prepare computes the rank of a resolved engine: its specs, then their
// grouping. An error is kept in the entry.
func (pl *Planner) prepare(e Engine, prof *vllm.Profile, merge BucketMerge) *rankEntry {
	rank, err := pl.rankSpecs(e, prof)
	if err != nil {
		return &rankEntry{err: err}
	}
	return newRankEntry(rank, e, prof, merge, pl.fixed)
}

// rankSpecs is the model step: the per-rank specs of the engine's rank
// (package kvspec), with vLLM's extra retained tokens on sliding windows;
// or a copy of the specs FromSpecs was given, at their first block size.
// The specs are the caller's own: grouping converts and unifies them in
// place.
func (pl *Planner) rankSpecs(e Engine, prof *vllm.Profile) (*kvspec.Rank, error) {
	if pl.fromSpecs {
		rank := &kvspec.Rank{Layers: slices.Clone(pl.specs)}
		if len(rank.Layers) > 0 {
			rank.BlockSize = rank.Layers[0].Spec.BlockSize
		}
		return rank, nil
	}
	rank, err := kvspec.ForRank(pl.m, e.specOptions(*prof))
	if err != nil {
		return nil, err
	}
	if extra := extraRetained(pl.m, e); extra > 0 && prof.ExtraRetained {
		for i := range rank.Layers {
			if rank.Layers[i].Spec.Kind == model.Sliding {
				rank.Layers[i].Spec.ExtraRetained = extra
			}
		}
	}
	return rank, nil
}

// newRankEntry groups a rank's specs for a resolved engine: the dispatch,
// then one bucket of every layer, a fixed layout's groups, or the buckets.
func newRankEntry(rank *kvspec.Rank, e Engine, prof *vllm.Profile, merge BucketMerge, fixed *Layout) *rankEntry {
	specs := rank.Layers
	// What the specs say before dispatch converts and unifies them.
	reasons, state := profileReasons(*prof, specs, e), false
	for _, s := range specs {
		state = state || s.Spec.Kind.IsState()
	}
	kind, logs, err := dispatch(specs, e.DisableHybrid, prof.PadPages, fixed == nil)
	if err != nil {
		return &rankEntry{err: err}
	}
	r := &rankEntry{rank: rank, specs: specs, dispatch: kind, splits: map[int]*split{}, profile: reasons, state: state}
	switch {
	case kind != "":
		r.buckets = [][]int{make([]int, len(specs))}
		for i := range specs {
			r.buckets[0][i] = i
		}
	case fixed != nil:
		r.dispatch, r.groupSize = "fixed", fixed.GroupSize
		if r.buckets, r.bucketOf, r.warnings, err = layoutGroups(specs, fixed); err != nil {
			return &rankEntry{err: err}
		}
	default:
		r.dispatch = "hybrid"
		r.buckets = makeBuckets(specs, merge, prof.MergeBuckets)
		if merge == Loose {
			r.loose = looseReasons(specs, r.buckets)
		}
	}
	r.logs = append(append([]string(nil), rank.Logs...), logs...)
	r.class = make([]int, len(specs))
	for i, ls := range specs {
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
	for _, b := range r.buckets {
		var cls []int
		for _, li := range b {
			if c := r.class[li]; !slices.Contains(cls, c) {
				cls = append(cls, c)
			}
		}
		r.bucketClasses = append(r.bucketClasses, cls)
	}
	return r
}

// strided is vLLM's split of a bucket of l layers by group size g: n =
// ceil(l/g) groups, group i holding the bucket's layers i, i+n, i+2n, ...
// (so that each group spans the model's depth and pipeline stages stay
// balanced). It returns n.
func strided(l, g int) int { return (l + g - 1) / g }

// groups is how many groups bucket j splits into at group size g: the
// strided split in hybrid grouping; other dispatches keep a bucket whole.
func (r *rankEntry) groups(j, g int) int {
	if r.dispatch != "hybrid" {
		return 1
	}
	return strided(len(r.buckets[j]), g)
}

// bucket is the bucket index a plan gives the groups of bucket j.
func (r *rankEntry) bucket(j int) int {
	if r.bucketOf != nil {
		return r.bucketOf[j]
	}
	return j
}

// newSplit computes the layer index and the padding warnings of the
// rank's buckets split by g, in the order the plan lists its layers.
func (r *rankEntry) newSplit(g int) *split {
	sp := &split{index: make(map[string]int, len(r.specs)), warnings: r.warnings}
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

func hasState(m *model.Model) bool {
	for _, l := range m.Layers {
		if l.Kind.IsState() {
			return true
		}
	}
	return false
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

// stagesOf is the pipeline stage of each layer that owns a KV cache (in
// the order of a rank's specs), as vLLM's get_pp_indices partitions
// num_hidden_layers: every stage gets layers/pp, and the remainder goes
// one each to the stages before the last. Draft and MTP layers run on the
// last stage.
func stagesOf(m *model.Model, pp int) []int {
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
	out := make([]int, 0, len(m.Layers))
	for _, l := range m.Layers {
		if !l.OwnsKV() {
			continue
		}
		stage := pp - 1
		if l.Role == model.Target {
			for s, b := range bounds {
				if l.Index < b {
					stage = s
					break
				}
			}
		}
		out = append(out, stage)
	}
	return out
}
