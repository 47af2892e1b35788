package transfer

import (
	"fmt"
	"sort"

	"github.com/kvscope/kvscope/core/xfer"
)

// dlist is one side's descriptor list of a rank pair, in the form NIXL's
// prepXferDlist takes it, and the index of every pair's descriptor in it
// (what makeXferReq takes), in the pairs' order.
//
// The list is laid out so that NIXL merges exactly the pairs
// xfer.MergedCount merges. NIXL (v1.4, makeXferReq) merges consecutive
// indices only inside one run of its prepared list, a run being entries of
// one length and one buffer at a constant stride, and only when the run is
// dense (stride == length) on both sides. NIXL finds runs greedily in list
// order and extends a one-entry run with any stride, so a list of just the
// used descriptors would split runs in the wrong places. buildDlist
// therefore sorts each region's descriptors into classes (one length l, one
// offset modulo l) and lists every class as a dense grid: every slot of
// step l from its lowest used offset to its highest, used or not (as
// vLLM's lists hold every block of a region). Two pairs that are back to
// back on this side and of one length fall in one class at consecutive
// slots, so their indices are consecutive inside one dense run. Classes of
// one region and length come in descending order of their lowest offset:
// each class then starts below where the last one ended, so NIXL starts a
// new run there rather than stretching a one-entry class over it.
type dlist struct {
	region []int   // per entry: the region
	off    []int64 // per entry: the offset in it
	len    []int64 // per entry: the length
	idx    []int32 // per pair: its entry
}

// dlistClass is one grid of a region: a length and an offset modulo it.
type dlistClass struct {
	region   int
	len, mod int64
}

// buildDlist lays out one side of pairs: at(p) is pair p's location on
// this side. Classes come in ascending order of region and length, then
// descending order of their lowest used offset.
func buildDlist(pairs []xfer.Pair, at func(p *xfer.Pair) xfer.Loc) (*dlist, error) {
	if len(pairs) > 1<<31-1 {
		return nil, fmt.Errorf("transfer: %d descriptor pairs in one request: NIXL indexes them with a C int", len(pairs))
	}
	type span struct{ lo, hi int64 } // lowest and highest used offset
	spans := map[dlistClass]*span{}
	for i := range pairs {
		p := &pairs[i]
		if p.Len <= 0 {
			return nil, fmt.Errorf("transfer: descriptor pair %d has length %d", i, p.Len)
		}
		l := at(p)
		c := dlistClass{l.Region, p.Len, l.Offset % p.Len}
		if s, ok := spans[c]; ok {
			s.lo, s.hi = min(s.lo, l.Offset), max(s.hi, l.Offset)
		} else {
			spans[c] = &span{l.Offset, l.Offset}
		}
	}
	classes := make([]dlistClass, 0, len(spans))
	for c := range spans {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool {
		a, b := classes[i], classes[j]
		if a.region != b.region {
			return a.region < b.region
		}
		if a.len != b.len {
			return a.len < b.len
		}
		return spans[a].lo > spans[b].lo
	})
	d := &dlist{idx: make([]int32, len(pairs))}
	first := make(map[dlistClass]int, len(classes))
	for _, c := range classes {
		s := spans[c]
		first[c] = len(d.off)
		for off := s.lo; off <= s.hi; off += c.len {
			d.region, d.off, d.len = append(d.region, c.region), append(d.off, off), append(d.len, c.len)
		}
	}
	if len(d.off) > 1<<31-1 {
		return nil, fmt.Errorf("transfer: %d descriptors in one prepared list: NIXL indexes them with a C int", len(d.off))
	}
	for i := range pairs {
		p := &pairs[i]
		l := at(p)
		c := dlistClass{l.Region, p.Len, l.Offset % p.Len}
		d.idx[i] = int32(first[c] + int((l.Offset-spans[c].lo)/c.len))
	}
	return d, nil
}
