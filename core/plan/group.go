package plan

import (
	"fmt"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
)

// This file is vLLM's get_kv_cache_groups: the dispatch between one uniform
// group, one uniform-type group and hybrid groups; page unification; the
// ordered buckets; and the strided split of every bucket by the group size.

// grouping is the result of grouping: the groups (as indices into the
// unified specs) and how they were chosen.
type grouping struct {
	specs     []kvspec.LayerSpec // after conversion and page unification
	groups    []draftGroup
	buckets   []bucket
	groupSize int    // g (0 when not a hybrid split)
	dispatch  string // "uniform", "uniform-type", "hybrid" or "fixed"
	warnings  []string
	logs      []string
}

type draftGroup struct {
	layers      []int // indices into specs, in slot order
	bucket      int
	uniformType bool // one group whose layers have different pages
}

type bucket struct {
	layers []int
	spec   kvspec.Spec // the first layer's spec
	bytes  int64       // b_j: the largest worst-case bytes per request of a layer
}

// convertForDisabledHybrid is vLLM's unify_hybrid_kv_cache_specs: with the
// hybrid manager disabled, sliding-window and chunked layers become full
// attention that records its window (MLA counts as full attention).
func convertForDisabledHybrid(specs []kvspec.LayerSpec) {
	hasFull := false
	for _, s := range specs {
		hasFull = hasFull || s.Spec.Kind == model.Full || s.Spec.Kind == model.MLA
	}
	if !hasFull {
		return
	}
	for i := range specs {
		if k := specs[i].Spec.Kind; k == model.Sliding || k == model.ChunkedLocal {
			specs[i].Spec.Kind = model.Full
		}
	}
}

// mergeSet tracks what vLLM's merge of a list of specs accepts: specs equal
// in every field, except that full-attention specs may record a window or
// a chunk, as long as no two record different windows (or chunks) and no
// spec set records both.
type mergeSet struct {
	first         kvspec.Spec
	window, chunk int
}

func newMergeSet(s kvspec.Spec) mergeSet { return mergeSet{first: s, window: s.Window, chunk: s.Chunk} }

// add reports whether s merges with the set, and adds it if so.
func (m *mergeSet) add(s kvspec.Spec) bool {
	a, b := m.first, s
	if a.Kind != model.Full || b.Kind != model.Full {
		return a.Equal(b)
	}
	a.Window, a.Chunk, b.Window, b.Chunk = 0, 0, 0, 0
	if !a.Equal(b) {
		return false
	}
	w, c := m.window, m.chunk
	if s.Window != 0 {
		if w != 0 && w != s.Window {
			return false
		}
		w = s.Window
	}
	if s.Chunk != 0 {
		if c != 0 && c != s.Chunk {
			return false
		}
		c = s.Chunk
	}
	if w != 0 && c != 0 {
		return false
	}
	m.window, m.chunk = w, c
	return true
}

func allMergeable(specs []kvspec.LayerSpec) bool {
	set := newMergeSet(specs[0].Spec)
	for _, s := range specs[1:] {
		if !set.add(s.Spec) {
			return false
		}
	}
	return true
}

// typeFamily is the class vLLM's UniformTypeKVCacheSpecs compares:
// full attention and MLA (an MLAAttentionSpec is a FullAttentionSpec),
// sliding window, chunked local, or any Mamba state.
func typeFamily(k model.Kind) string {
	switch {
	case k == model.Full || k == model.MLA:
		return "full"
	case k.IsState():
		return "state"
	}
	return string(k)
}

// uniformType reports whether the layers form vLLM's
// UniformTypeKVCacheSpecs: one block size and one type family (full with
// any window, sliding with one window, chunked with one chunk, or state
// with one speculative block count), whatever their page sizes.
func uniformType(specs []kvspec.LayerSpec) bool {
	first := specs[0].Spec
	for _, ls := range specs[1:] {
		s := ls.Spec
		if s.BlockSize != first.BlockSize || typeFamily(s.Kind) != typeFamily(first.Kind) {
			return false
		}
		switch {
		case s.Kind == model.Sliding && s.Window != first.Window:
			return false
		case s.Kind == model.ChunkedLocal && s.Chunk != first.Chunk:
			return false
		case s.Kind.IsState() && s.SpecBlocks != first.SpecBlocks:
			return false
		}
	}
	return true
}

// unifyPages is vLLM's unify_kv_cache_spec_page_size (newest): every page
// becomes the largest page; a state page is padded, an attention layer whose
// page divides the largest gets a proportionally larger block size, and
// other attention pages are padded. MLA pages that do not divide are an
// error, as in vLLM.
//
// Versions before vLLM 0.12 (pad false) raise NotImplementedError for any
// page that does not divide the largest.
func unifyPages(specs []kvspec.LayerSpec, pad bool) ([]string, error) {
	var largest int64
	for _, s := range specs {
		largest = max(largest, s.Spec.PageBytes())
	}
	var logs []string
	counts := map[string]int{}
	for i := range specs {
		s := &specs[i].Spec
		page := s.PageBytes()
		var line string
		switch {
		case page == largest:
			continue
		case s.Kind.IsState():
			s.PagePadded = largest
			line = fmt.Sprintf("%s page of %d B padded to %d B", s.Kind, page, largest)
		case largest%page == 0:
			ratio := int(largest / page)
			*s = s.WithBlockSize(s.BlockSize * ratio)
			line = fmt.Sprintf("%s page of %d B: block size x%d to %d tokens", s.Kind, page, ratio, s.BlockSize)
		case s.Kind != model.MLA && pad:
			s.PagePadded = largest
			line = fmt.Sprintf("%s page of %d B padded to %d B", s.Kind, page, largest)
		default:
			return nil, fmt.Errorf("plan: layer %s: %s page of %d B does not divide the largest page of %d B (vLLM: NotImplementedError)", specs[i].Layer.Name, s.Kind, page, largest)
		}
		if counts[line] == 0 {
			logs = append(logs, line)
		}
		counts[line]++
	}
	for i, line := range logs {
		logs[i] = fmt.Sprintf("Unifying page sizes: %d layer(s): %s", counts[line], line)
	}
	return logs, nil
}

// makeBuckets groups layers in first-appearance order. A layer joins the
// first bucket it can merge with under the rule; otherwise it opens a new
// bucket.
//
// Before vLLM 0.27 (merge false) a bucket holds equal specs only.
func makeBuckets(specs []kvspec.LayerSpec, rule BucketMerge, merge bool, lim kvspec.Limits) []bucket {
	var out []bucket
	var sets []mergeSet
	for i, s := range specs {
		placed := false
		for j := range out {
			var ok bool
			if merge {
				ok = sets[j].add(s.Spec)
			} else {
				ok = out[j].spec.Equal(s.Spec)
			}
			if !ok && rule == Loose {
				ok = out[j].spec.LooselyEqual(s.Spec)
			}
			if ok {
				out[j].layers = append(out[j].layers, i)
				out[j].bytes = max(out[j].bytes, s.Spec.MaxMemoryBytes(lim))
				placed = true
				break
			}
		}
		if !placed {
			out = append(out, bucket{layers: []int{i}, spec: s.Spec, bytes: s.Spec.MaxMemoryBytes(lim)})
			sets = append(sets, newMergeSet(s.Spec))
		}
	}
	return out
}

// splitBuckets splits bucket j into ceil(L_j/g) groups, strided
// (layers[i::n]), so that each group spans the model's depth and pipeline
// stages stay balanced. It returns vLLM's padding warnings, computed
// against g.
func splitBuckets(buckets []bucket, g int) ([]draftGroup, []string) {
	var groups []draftGroup
	var warnings []string
	for bi, b := range buckets {
		l := len(b.layers)
		n := (l + g - 1) / g
		if pad := padOf(l, g); pad != 0 {
			warnings = append(warnings, paddingWarning(pad, l))
		}
		for i := 0; i < n; i++ {
			var members []int
			for k := i; k < l; k += n {
				members = append(members, b.layers[k])
			}
			groups = append(groups, draftGroup{layers: members, bucket: bi})
		}
	}
	return groups, warnings
}

// groupLayers runs vLLM's dispatch on one rank's specs.
func groupLayers(specs []kvspec.LayerSpec, e Engine, prof vllm.Profile, fixed *Layout) (*grouping, error) {
	r, err := dispatch(append([]kvspec.LayerSpec(nil), specs...), e.DisableHybrid, prof.PadPages, fixed == nil)
	if err != nil || r.dispatch != "" {
		return r, err
	}
	lim := e.limits(prof)
	if fixed != nil {
		return r, r.applyLayout(fixed, lim)
	}
	r.dispatch = "hybrid"
	r.buckets = makeBuckets(r.specs, e.merge(prof), prof.MergeBuckets, lim)
	sizes := make([]int, len(r.buckets))
	bytes := make([]int64, len(r.buckets))
	for j, b := range r.buckets {
		sizes[j], bytes[j] = len(b.layers), b.bytes
	}
	r.groupSize = chooseGroupSize(e, prof, sizes, bytes)
	r.groups, r.warnings = splitBuckets(r.buckets, r.groupSize)
	return r, nil
}

// dispatch is the part of vLLM's dispatch that depends on the specs alone:
// the specs converted for a disabled hybrid manager, then one uniform or
// uniform-type group when the layers allow it (and may choose, free says:
// a fixed layout does not), else the pages unified for hybrid grouping and
// dispatch left empty. It changes specs, which the grouping keeps: callers
// pass a copy of specs they still need.
func dispatch(specs []kvspec.LayerSpec, disableHybrid, padPages, free bool) (*grouping, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("plan: the model has no layer with a KV cache")
	}
	r := &grouping{specs: specs}
	if disableHybrid {
		convertForDisabledHybrid(specs)
		if !allMergeable(specs) && !uniformType(specs) {
			return nil, flagErr("--disable-hybrid-kv-cache-manager", true, "the layers cannot be converted to one KV cache type (state layers need the hybrid manager)")
		}
	}
	if free {
		all := make([]int, len(specs))
		for i := range all {
			all[i] = i
		}
		if allMergeable(specs) {
			r.dispatch = "uniform"
			r.groups = []draftGroup{{layers: all}}
			r.buckets = []bucket{{layers: all, spec: specs[0].Spec}}
			return r, nil
		}
		if uniformType(specs) {
			r.dispatch = "uniform-type"
			r.groups = []draftGroup{{layers: all, uniformType: true}}
			r.buckets = []bucket{{layers: all, spec: specs[0].Spec}}
			return r, nil
		}
	}
	logs, err := unifyPages(specs, padPages)
	if err != nil {
		return nil, err
	}
	r.logs = logs
	return r, nil
}

// looseReasons are the inferred reasons a loose bucket merge gives: one
// for each bucket that holds layers of another head layout than its first.
func looseReasons(specs []kvspec.LayerSpec, buckets []bucket) []string {
	var out []string
	for _, b := range buckets {
		set := newMergeSet(b.spec)
		for _, li := range b.layers[1:] {
			if !set.add(specs[li].Spec) {
				out = append(out, fmt.Sprintf("bucket merge loose: layer %s shares a bucket with layers of another head layout (same kind, block size, page bytes and window)", specs[li].Layer.Name))
				break
			}
		}
	}
	return out
}

// chooseGroupSize applies the fixed override or the engine's selector.
// Classic is the version's released rule (main's in the branch profile).
func chooseGroupSize(e Engine, prof vllm.Profile, sizes []int, bytes []int64) int {
	switch {
	case e.GroupSize > 0:
		return e.GroupSize
	case e.Selector == Min:
		return classicGroupSize(sizes, 0)
	case e.Selector == Classic:
		threshold := prof.Threshold
		if prof.Selector == vllm.SelectorPaddingBytes {
			threshold = mainThreshold
		}
		return classicGroupSize(sizes, threshold)
	case e.Selector == Balanced:
		return balancedGroupSize(sizes, e.BalancedLambda)
	default:
		return paddingBytesGroupSize(sizes, bytes, e.MinGroupLayers)
	}
}

// applyLayout uses a fixed grouping (a TP-invariant layout) instead of
// bucketing and selecting. Every group's layers must have mergeable specs
// on this rank.
func (r *grouping) applyLayout(l *Layout, lim kvspec.Limits) error {
	index := map[string]int{}
	for i, s := range r.specs {
		index[s.Layer.Name] = i
	}
	r.dispatch = "fixed"
	r.groupSize = l.GroupSize
	seen := map[string]bool{}
	bucketOf := map[int]int{}
	if len(l.Buckets) != len(l.Groups) {
		return fmt.Errorf("plan: fixed layout has %d groups but %d bucket indices", len(l.Groups), len(l.Buckets))
	}
	for gi, names := range l.Groups {
		if len(names) == 0 {
			return fmt.Errorf("plan: fixed layout group %d is empty", gi)
		}
		var g draftGroup
		g.bucket = l.Buckets[gi]
		var set mergeSet
		for _, name := range names {
			i, ok := index[name]
			if !ok {
				return fmt.Errorf("plan: fixed layout group %d names layer %s, which has no KV cache here", gi, name)
			}
			if seen[name] {
				return fmt.Errorf("plan: fixed layout names layer %s twice", name)
			}
			seen[name] = true
			if len(g.layers) == 0 {
				set = newMergeSet(r.specs[i].Spec)
			} else if !set.add(r.specs[i].Spec) {
				return fmt.Errorf("plan: fixed layout group %d: layers %s and %s have different specs on this engine (%s vs %s)",
					gi, r.specs[g.layers[0]].Layer.Name, name, r.specs[g.layers[0]].Spec, r.specs[i].Spec)
			}
			g.layers = append(g.layers, i)
		}
		r.groups = append(r.groups, g)
		if _, ok := bucketOf[g.bucket]; !ok {
			bucketOf[g.bucket] = len(r.buckets)
			r.buckets = append(r.buckets, bucket{spec: r.specs[g.layers[0]].Spec})
		}
		b := &r.buckets[bucketOf[g.bucket]]
		b.layers = append(b.layers, g.layers...)
		for _, i := range g.layers {
			b.bytes = max(b.bytes, r.specs[i].Spec.MaxMemoryBytes(lim))
		}
	}
	for _, s := range r.specs {
		if !seen[s.Layer.Name] {
			return fmt.Errorf("plan: fixed layout does not place layer %s", s.Layer.Name)
		}
	}
	for _, b := range r.buckets {
		if l.GroupSize <= 0 {
			break
		}
		if pad := padOf(len(b.layers), l.GroupSize); pad != 0 {
			r.warnings = append(r.warnings, paddingWarning(pad, len(b.layers)))
		}
	}
	return nil
}
