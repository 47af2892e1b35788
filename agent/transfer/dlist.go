package transfer

import (
	"fmt"
	"math"
	"sort"

	"github.com/kvscope/kvscope/core/xfer"
)

// A dlistLayout is one rank's descriptor list in the form NIXL's
// prepXferDlist takes it: prepared once, as vLLM's connector prepares its
// lists at the handshake, and then indexed by every request (makeXferReq
// takes the pairs' indices into it).
//
// The list is laid out so that NIXL merges exactly the pairs
// xfer.MergedCount merges. NIXL (v1.4, makeXferReq) merges consecutive
// indices only inside one run of its prepared list, a run being entries of
// one length and one buffer at a constant stride, and only when the run is
// dense (stride == length) on both sides. NIXL finds runs greedily in list
// order and extends a one-entry run with any stride, so a list of just the
// used descriptors would split runs in the wrong places. The layout
// therefore sorts descriptors into classes (a region, a length l, an
// offset modulo l) and lists every class as a dense grid over its whole
// region: every slot of step l from the class's first offset to the
// region's end (as vLLM's lists hold every block of a region). Two pairs
// back to back on this side and of one length fall in one class at
// consecutive slots, so their indices are consecutive inside one dense
// run. Classes of one region and length come in descending order of their
// first offset: each class then starts below where the last one ended, so
// NIXL starts a new run there rather than stretching a one-entry class.
type dlistLayout struct {
	classes []dlistClass
	grid    map[dlistClass]dlistGrid // where each class's entries lie
	region  []int                    // per entry
	off     []int64
	len     []int64
}

// dlistClass is one grid of a region: a length and an offset modulo it.
type dlistClass struct {
	region   int
	len, mod int64
}

// dlistGrid is where a class's entries lie in the list.
type dlistGrid struct {
	first, count int
}

// classOf is a descriptor's class and its slot in the class's grid (one
// division gives both).
func classOf(at xfer.Loc, n int64) (dlistClass, int64) {
	slot := at.Offset / n
	return dlistClass{at.Region, n, at.Offset - slot*n}, slot
}

// newLayout lays out the classes of pairs, and those of old (a layout a
// later request outgrew), over regions of the given sizes.
func newLayout(old *dlistLayout, pairs []xfer.Pair, at func(*xfer.Pair) xfer.Loc, regionBytes func(region int) (int64, error)) (*dlistLayout, error) {
	set := map[dlistClass]bool{}
	if old != nil {
		for _, c := range old.classes {
			set[c] = true
		}
	}
	for i := range pairs {
		p := &pairs[i]
		if p.Len <= 0 {
			return nil, fmt.Errorf("transfer: descriptor pair %d has length %d", i, p.Len)
		}
		c, _ := classOf(at(p), p.Len)
		set[c] = true
	}
	l := &dlistLayout{grid: map[dlistClass]dlistGrid{}}
	for c := range set {
		l.classes = append(l.classes, c)
	}
	sort.Slice(l.classes, func(i, j int) bool {
		a, b := l.classes[i], l.classes[j]
		if a.region != b.region {
			return a.region < b.region
		}
		if a.len != b.len {
			return a.len < b.len
		}
		return a.mod > b.mod
	})
	for _, c := range l.classes {
		size, err := regionBytes(c.region)
		if err != nil {
			return nil, err
		}
		first := len(l.off)
		for off := c.mod; off <= size-c.len; off += c.len {
			l.region, l.off, l.len = append(l.region, c.region), append(l.off, off), append(l.len, c.len)
		}
		l.grid[c] = dlistGrid{first, len(l.off) - first}
		if len(l.off) > math.MaxInt32 {
			return nil, fmt.Errorf("transfer: more than %d descriptors in one prepared list: NIXL indexes them with a C int", math.MaxInt32)
		}
	}
	return l, nil
}

// indices are the pairs' entries, in the pairs' order; a pair of a class
// the layout lacks, or outside its region, is an error.
func (l *dlistLayout) indices(pairs []xfer.Pair, at func(*xfer.Pair) xfer.Loc) ([]int32, error) {
	out := make([]int32, len(pairs))
	if err := l.indexAll(pairs, at, out); err != nil {
		return nil, err
	}
	return out, nil
}

// indexAll is indices written into out (len(pairs) long).
func (l *dlistLayout) indexAll(pairs []xfer.Pair, at func(*xfer.Pair) xfer.Loc, out []int32) error {
	i, err := l.index(pairs, at, out)
	if err == nil && i >= 0 {
		loc := at(&pairs[i])
		err = fmt.Errorf("transfer: descriptor pair %d: no list entry for region %d [%d, +%d)", i, loc.Region, loc.Offset, pairs[i].Len)
	}
	return err
}

// index writes the pairs' entries into out (len(pairs) long), in the
// pairs' order, up to the first pair of a class the layout lacks, whose
// index it returns (-1 when the layout has every pair's class). A pair
// outside its region is an error.
func (l *dlistLayout) index(pairs []xfer.Pair, at func(*xfer.Pair) xfer.Loc, out []int32) (int, error) {
	out = out[:len(pairs)]
	var last dlistClass
	var g dlistGrid
	for i := range pairs {
		p := &pairs[i]
		loc := at(p)
		c, slot := classOf(loc, p.Len)
		if i == 0 || c != last {
			var ok bool
			if g, ok = l.grid[c]; !ok {
				return i, nil
			}
			last = c
		}
		// Entry first+slot is the class's (so of this region and length)
		// and lies at mod+slot*len, this pair's offset, if slot is one of
		// the class's slots.
		if slot < 0 || slot >= int64(g.count) {
			return -1, fmt.Errorf("transfer: descriptor pair %d: region %d [%d, +%d) lies past its region's end", i, loc.Region, loc.Offset, p.Len)
		}
		out[i] = int32(g.first + int(slot))
	}
	return -1, nil
}
