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
	first   map[dlistClass]int // each class's first entry
	region  []int              // per entry
	off     []int64
	len     []int64
}

// dlistClass is one grid of a region: a length and an offset modulo it.
type dlistClass struct {
	region   int
	len, mod int64
}

// classOf is a descriptor's class.
func classOf(at xfer.Loc, n int64) dlistClass {
	return dlistClass{at.Region, n, at.Offset % n}
}

// covers reports whether the layout has a class for every pair.
func (l *dlistLayout) covers(pairs []xfer.Pair, at func(*xfer.Pair) xfer.Loc) bool {
	if l == nil {
		return false
	}
	var last dlistClass
	for i := range pairs {
		c := classOf(at(&pairs[i]), pairs[i].Len)
		if i > 0 && c == last {
			continue // most pairs share their neighbour's class
		}
		if _, ok := l.first[c]; !ok {
			return false
		}
		last = c
	}
	return true
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
		set[classOf(at(p), p.Len)] = true
	}
	l := &dlistLayout{first: map[dlistClass]int{}}
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
		l.first[c] = len(l.off)
		for off := c.mod; off <= size-c.len; off += c.len {
			l.region, l.off, l.len = append(l.region, c.region), append(l.off, off), append(l.len, c.len)
		}
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
	var last dlistClass
	first := -1
	for i := range pairs {
		p := &pairs[i]
		loc := at(p)
		c := classOf(loc, p.Len)
		if first < 0 || c != last {
			f, ok := l.first[c]
			if !ok {
				return nil, fmt.Errorf("transfer: descriptor pair %d: no list entry for region %d [%d, +%d)", i, loc.Region, loc.Offset, p.Len)
			}
			first, last = f, c
		}
		e := first + int((loc.Offset-c.mod)/c.len)
		if e >= len(l.off) || l.region[e] != loc.Region || l.off[e] != loc.Offset {
			return nil, fmt.Errorf("transfer: descriptor pair %d: region %d [%d, +%d) lies past its region's end", i, loc.Region, loc.Offset, p.Len)
		}
		out[i] = int32(e)
	}
	return out, nil
}
