package plan

import (
	"math/rand/v2"
	"testing"
)

// The selectors count padding and groups with one division per bucket
// and candidate; these are their definitions, term by term.
func definedPaddingBytes(sizes []int, bytes []int64, minLayers int) int {
	mn, mx := sizes[0], sizes[0]
	for _, l := range sizes {
		mn, mx = min(mn, l), max(mx, l)
	}
	best, bestBytes, bestGroups := 0, int64(0), 0
	for g := min(max(mn, minLayers), mx); g <= mx; g++ {
		var cost int64
		groups := 0
		for j, l := range sizes {
			cost += bytes[j] * int64(padOf(l, g))
			groups += (l + g - 1) / g
		}
		if best == 0 || cost < bestBytes || (cost == bestBytes && groups < bestGroups) {
			best, bestBytes, bestGroups = g, cost, groups
		}
	}
	return best
}

func definedBalanced(sizes []int, lambda float64) int {
	mx := 0
	for _, l := range sizes {
		mx = max(mx, l)
	}
	best, bestCost, bestGroups := 0, 0.0, 0
	for g := 1; g <= mx; g++ {
		pad, groups := 0, 0
		for _, l := range sizes {
			pad += padOf(l, g)
			groups += (l + g - 1) / g
		}
		cost := float64(pad) + lambda*float64(groups)
		if best == 0 || cost < bestCost || (cost == bestCost && groups < bestGroups) {
			best, bestCost, bestGroups = g, cost, groups
		}
	}
	return best
}

func TestSelectorsMatchTheirDefinitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		n := 1 + rng.IntN(6)
		sizes, bytes := make([]int, n), make([]int64, n)
		for j := range sizes {
			sizes[j] = 1 + rng.IntN(64)
			bytes[j] = int64(1+rng.IntN(4)) << (10 + rng.IntN(20))
		}
		minLayers := 1 + rng.IntN(8)
		lambda := []float64{0.5, 1, 2.5}[rng.IntN(3)]
		if got, want := paddingBytesGroupSize(sizes, bytes, minLayers), definedPaddingBytes(sizes, bytes, minLayers); got != want {
			t.Fatalf("padding-bytes %v %v min %d: g %d, want %d", sizes, bytes, minLayers, got, want)
		}
		if got, want := balancedGroupSize(sizes, lambda), definedBalanced(sizes, lambda); got != want {
			t.Fatalf("balanced %v lambda %v: g %d, want %d", sizes, lambda, got, want)
		}
	}
}
