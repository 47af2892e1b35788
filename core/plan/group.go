package plan

import (
	"fmt"
	"slices"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
)

// This file is vLLM's get_kv_cache_groups before the group size enters:
// the dispatch between one uniform group, one uniform-type group and
// hybrid groups; page unification; the ordered buckets; and a fixed
// layout's groups (WithLayout). The strided split of every bucket by the
// group size is the rank's (rank.go), the group size the selectors'
// (selector.go).

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

// makeBuckets groups layers in first-appearance order, as layer indices.
// A layer joins the first bucket it can merge with under the rule;
// otherwise it opens a new bucket.
//
// Before vLLM 0.27 (merge false) a bucket holds equal specs only.
func makeBuckets(specs []kvspec.LayerSpec, rule BucketMerge, merge bool) [][]int {
	var out [][]int
	var sets []mergeSet
	for i, s := range specs {
		placed := false
		for j := range out {
			first := specs[out[j][0]].Spec
			var ok bool
			if merge {
				ok = sets[j].add(s.Spec)
			} else {
				ok = first.Equal(s.Spec)
			}
			if !ok && rule == Loose {
				ok = first.LooselyEqual(s.Spec)
			}
			if ok {
				out[j] = append(out[j], i)
				placed = true
				break
			}
		}
		if !placed {
			out = append(out, []int{i})
			sets = append(sets, newMergeSet(s.Spec))
		}
	}
	return out
}

// dispatch is the part of vLLM's dispatch that depends on the specs alone:
// the specs converted for a disabled hybrid manager, then one uniform or
// uniform-type group when the layers allow it (and may choose, free says:
// a fixed layout does not), else the pages unified for hybrid grouping and
// an empty dispatch. It changes specs in place; logs are page
// unification's.
func dispatch(specs []kvspec.LayerSpec, disableHybrid, padPages, free bool) (kind string, logs []string, err error) {
	if len(specs) == 0 {
		return "", nil, fmt.Errorf("plan: the model has no layer with a KV cache")
	}
	if disableHybrid {
		convertForDisabledHybrid(specs)
		if !allMergeable(specs) && !uniformType(specs) {
			return "", nil, flagErr("--disable-hybrid-kv-cache-manager", true, "the layers cannot be converted to one KV cache type (state layers need the hybrid manager)")
		}
	}
	if free {
		if allMergeable(specs) {
			return "uniform", nil, nil
		}
		if uniformType(specs) {
			return "uniform-type", nil, nil
		}
	}
	logs, err = unifyPages(specs, padPages)
	return "", logs, err
}

// looseReasons are the inferred reasons a loose bucket merge gives: one
// for each bucket that holds layers of another head layout than its first.
func looseReasons(specs []kvspec.LayerSpec, buckets [][]int) []string {
	var out []string
	for _, b := range buckets {
		set := newMergeSet(specs[b[0]].Spec)
		for _, li := range b[1:] {
			if !set.add(specs[li].Spec) {
				out = append(out, fmt.Sprintf("bucket merge loose: layer %s shares a bucket with layers of another head layout (same kind, block size, page bytes and window)", specs[li].Layer.Name))
				break
			}
		}
	}
	return out
}

// layoutGroups places the layers of a fixed grouping (a TP-invariant
// layout) instead of bucketing and selecting: each group's layer indices
// in slot order, the layout's bucket index of each group, and vLLM's
// padding warnings for the layout's buckets at its group size. Every
// group's layers must have mergeable specs on this rank.
func layoutGroups(specs []kvspec.LayerSpec, l *Layout) (groups [][]int, bucketOf []int, warnings []string, err error) {
	index := map[string]int{}
	for i, s := range specs {
		index[s.Layer.Name] = i
	}
	if len(l.Buckets) != len(l.Groups) {
		return nil, nil, nil, fmt.Errorf("plan: fixed layout has %d groups but %d bucket indices", len(l.Groups), len(l.Buckets))
	}
	seen := map[string]bool{}
	var bucketOrder, bucketLayers []int // the layout's buckets in first-appearance order, and their layer counts
	for gi, names := range l.Groups {
		if len(names) == 0 {
			return nil, nil, nil, fmt.Errorf("plan: fixed layout group %d is empty", gi)
		}
		var layers []int
		var set mergeSet
		for _, name := range names {
			i, ok := index[name]
			if !ok {
				return nil, nil, nil, fmt.Errorf("plan: fixed layout group %d names layer %s, which has no KV cache here", gi, name)
			}
			if seen[name] {
				return nil, nil, nil, fmt.Errorf("plan: fixed layout names layer %s twice", name)
			}
			seen[name] = true
			if len(layers) == 0 {
				set = newMergeSet(specs[i].Spec)
			} else if !set.add(specs[i].Spec) {
				return nil, nil, nil, fmt.Errorf("plan: fixed layout group %d: layers %s and %s have different specs on this engine (%s vs %s)",
					gi, specs[layers[0]].Layer.Name, name, specs[layers[0]].Spec, specs[i].Spec)
			}
			layers = append(layers, i)
		}
		groups, bucketOf = append(groups, layers), append(bucketOf, l.Buckets[gi])
		j := slices.Index(bucketOrder, l.Buckets[gi])
		if j < 0 {
			j, bucketOrder, bucketLayers = len(bucketOrder), append(bucketOrder, l.Buckets[gi]), append(bucketLayers, 0)
		}
		bucketLayers[j] += len(layers)
	}
	for _, s := range specs {
		if !seen[s.Layer.Name] {
			return nil, nil, nil, fmt.Errorf("plan: fixed layout does not place layer %s", s.Layer.Name)
		}
	}
	if l.GroupSize > 0 {
		for _, n := range bucketLayers {
			if pad := padOf(n, l.GroupSize); pad != 0 {
				warnings = append(warnings, paddingWarning(pad, n))
			}
		}
	}
	return groups, bucketOf, warnings, nil
}
