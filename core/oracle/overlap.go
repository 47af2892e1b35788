package oracle

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kvscope/kvscope/core/xfer"
)

// This file is the rule that no D byte is written twice. Two descriptors
// onto one byte race in NIXL (which lands last is not defined), and one
// that runs past its own bytes writes what the next would have written:
// where both sides' layouts agree there, the bytes alone read back right,
// and only the descriptors show the fault.

// dWrite is one pair's range of D bytes: its D rank's region, the range,
// and the pair's place among the transfer's pairs (rank pairs in order).
type dWrite struct {
	rank, region int
	lo, hi       int64
	pair         int
}

// overlapVerdict is the wrong verdict on the first two pairs (in D's
// order) that write a D byte in common, or nil when no two do. Its
// counts are the whole transfer's, as a verdict on the bytes would give.
func overlapVerdict(x *xfer.Transfer) *Result {
	n := 0
	for _, rp := range x.RankPairs {
		n += len(rp.Pairs)
	}
	ws := make([]dWrite, 0, n)
	var bytes int64
	at := 0
	for _, rp := range x.RankPairs {
		for _, p := range rp.Pairs {
			ws = append(ws, dWrite{rank: rp.D, region: p.Dst.Region, lo: p.Dst.Offset, hi: p.Dst.Offset + p.Len, pair: at})
			bytes += p.Len
			at++
		}
	}
	// Pairs mostly come in D's order already, which the sort passes over
	// in one sweep.
	slices.SortFunc(ws, func(a, b dWrite) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.region, b.region), cmp.Compare(a.lo, b.lo), cmp.Compare(a.pair, b.pair))
	})
	reach := 0 // the write reaching furthest so far in this region
	for k := 1; k < len(ws); k++ {
		w, r := &ws[k], &ws[reach]
		if w.rank != r.rank || w.region != r.region {
			reach = k
			continue
		}
		if w.lo < r.hi && w.hi > w.lo && r.hi > r.lo {
			return overlapping(x, at, bytes, r.pair, w.pair)
		}
		if w.hi > r.hi {
			reach = k
		}
	}
	return nil
}

// overlapping is the verdict on pairs a and b (places among all pairs),
// b's bytes starting inside a's: it names b's layer, index and token.
func overlapping(x *xfer.Transfer, pairs int, bytes int64, a, b int) *Result {
	first, _ := pairAt(x, a)
	second, rp := pairAt(x, b)
	token := second.Tokens.Lo
	if second.Tokens.Len() == 0 {
		token = -1 // a state row or padding
	}
	return &Result{Verdict: Wrong, Pairs: pairs, Bytes: bytes, Mismatch: &Mismatch{
		DRank: rp.D, Region: second.Dst.Region, Block: int(second.Dst.Offset / x.DRegs[rp.D].Regions[second.Dst.Region].BlockLen),
		Layer: second.Layer, Segment: string(second.Seg), Index: second.Lo, Token: token,
		What: fmt.Sprintf("written twice: this descriptor's %d B at D offset %d start inside the %d B at %d of another (layer %s %s, index %d, token %d)",
			second.Len, second.Dst.Offset, first.Len, first.Dst.Offset, first.Layer, first.Seg, first.Lo, first.Tokens.Lo)}}
}

// pairAt is the transfer's n-th pair, counting every rank pair's in order,
// and its rank pair.
func pairAt(x *xfer.Transfer, n int) (*xfer.Pair, *xfer.RankPair) {
	for i := range x.RankPairs {
		rp := &x.RankPairs[i]
		if n < len(rp.Pairs) {
			return &rp.Pairs[n], rp
		}
		n -= len(rp.Pairs)
	}
	return nil, nil
}
