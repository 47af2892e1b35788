package plan

import "github.com/kvscope/kvscope/core/vllm"

// This file holds the group-size selectors: given the bucket sizes L_j (and,
// for padding-bytes, each bucket's worst-case bytes per layer b_j), each
// returns the group size g that every bucket is split by; chooseGroupSize
// picks the engine's.

// mainThreshold is the classic rule's threshold in vLLM main
// (kv_cache_utils.py at commit 002f10e0) and from release 0.18.
const mainThreshold = 1.5

// classicGroupSize is vLLM's released rule: g is the smallest bucket,
// unless the largest bucket is under threshold times the smallest (a float
// comparison), in which case g is the largest. threshold 0 is the rule of
// vLLM 0.10 and 0.11 (always the smallest); the version profile says which
// threshold holds (1.25 from 0.12, 1.5 from 0.18).
func classicGroupSize(sizes []int, threshold float64) int {
	mn, mx := sizes[0], sizes[0]
	for _, l := range sizes {
		mn, mx = min(mn, l), max(mx, l)
	}
	if float64(mx) < threshold*float64(mn) {
		return mx
	}
	return mn
}

// padOf is the padding layers of one bucket of l layers at group size g.
func padOf(l, g int) int { return (g - l%g) % g }

// balancedGroupSize is vLLM PR #49472's rule: the g in 1..max L that
// minimises padding slots + lambda * groups, where padding slots are
// Σ_j (ceil(L_j/g)*g - L_j); ties go to fewer groups.
func balancedGroupSize(sizes []int, lambda float64) int {
	mx := 0
	for _, l := range sizes {
		mx = max(mx, l)
	}
	best, bestCost, bestGroups := 0, 0.0, 0
	for g := 1; g <= mx; g++ {
		pad, groups := 0, 0
		for _, l := range sizes {
			q := (l + g - 1) / g // one division gives both: padOf(l, g) = q*g - l
			pad, groups = pad+q*g-l, groups+q
		}
		cost := float64(pad) + lambda*float64(groups)
		if best == 0 || cost < bestCost || (cost == bestCost && groups < bestGroups) {
			best, bestCost, bestGroups = g, cost, groups
		}
	}
	return best
}

// paddingBytesGroupSize is vLLM PR #58207's rule, as read from its diff
// (reference/padding-bytes-selector.md §1): candidates run from
// min(max(min L, minLayers), max L) to max L; the cost of g is first the
// padding bytes Σ_j b_j * (-L_j mod g), then the group count; the first
// candidate with the smallest (bytes, groups) wins.
func paddingBytesGroupSize(sizes []int, bytes []int64, minLayers int) int {
	lo, mx := paddingBytesRange(sizes, minLayers)
	best, bestBytes, bestGroups := 0, int64(0), 0
	for g := lo; g <= mx; g++ {
		cost, _, groups := paddingCost(sizes, bytes, g)
		if best == 0 || cost < bestBytes || (cost == bestBytes && groups < bestGroups) {
			best, bestBytes, bestGroups = g, cost, groups
		}
	}
	return best
}

// paddingBytesRange is the padding-bytes selector's candidates, lo..hi.
func paddingBytesRange(sizes []int, minLayers int) (lo, hi int) {
	mn, mx := sizes[0], sizes[0]
	for _, l := range sizes {
		mn, mx = min(mn, l), max(mx, l)
	}
	return min(max(mn, minLayers), mx), mx
}

// paddingCost is what group size g costs buckets of sizes layers whose
// layers hold bytes each at worst: the padding bytes Σ_j b_j * (-L_j mod
// g), the padding slots Σ_j (-L_j mod g) and the groups Σ_j ceil(L_j/g).
func paddingCost(sizes []int, bytes []int64, g int) (padBytes int64, padSlots, groups int) {
	for j, l := range sizes {
		q := (l + g - 1) / g // one division gives both: padOf(l, g) = q*g - l
		padBytes += bytes[j] * int64(q*g-l)
		padSlots += q*g - l
		groups += q
	}
	return padBytes, padSlots, groups
}

// chooseGroupSize applies the fixed override or the engine's selector to
// buckets of sizes layers whose worst-case bytes per request of a layer
// are bytes (what padding-bytes weighs). Classic is the version's
// released rule (main's in the branch profile).
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
