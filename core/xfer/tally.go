package xfer

import (
	"context"
	"sort"
)

// This file is NIXL's merge rule and the tallies built on it. NIXL's
// makeXferReq (v1.4) merges consecutive descriptors of one prepared list
// that are contiguous on both sides, in the same regions and of one
// length (real NIXL's telemetry descCount agrees; see agent/transfer's
// NIXL tests). Everything that totals pairs does so through a tally:
// vLLM's path pair by pair (pairsTally), the group-pair path run by run
// for a set of token runs and then job by job (runsAt, pairWriter), and
// MergedCount.

// pairEnd is a pair's addresses and length, all NIXL's merging reads.
type pairEnd struct {
	src, dst Loc
	len      int64
}

// continues reports whether a pair of n bytes from src to dst continues
// last, so that NIXL merges them: same length, same regions, each side
// starting where last ended. It is the merge rule's one statement.
func continues(last pairEnd, src, dst Loc, n int64) bool {
	return last.len == n && last.src.Region == src.Region && last.dst.Region == dst.Region &&
		last.src.Offset+n == src.Offset && last.dst.Offset+n == dst.Offset
}

// tally totals a run of one rank pair's pairs in the order they are
// posted: descriptors, bytes, and descriptors left once NIXL merges
// contiguous ones, from the run's first and last pairs alone, so that two
// runs' tallies join into that of both. The zero value is an empty run.
type tally struct {
	descs, merged int
	bytes         int64
	first, last   pairEnd
}

// add tallies the next pair: n bytes from src to dst.
func (c *tally) add(src, dst Loc, n int64) {
	if c.descs == 0 {
		c.open(src, dst, n)
	} else {
		c.extend(src, dst, n)
	}
}

// open tallies the first pair of an empty tally. open and extend are add's
// two cases, each small enough to be inlined into a loop over many pairs.
func (c *tally) open(src, dst Loc, n int64) {
	// Field by field: a composite literal goes through a stack temporary.
	c.first.src, c.first.dst, c.first.len = src, dst, n
	c.last = c.first
	c.descs, c.merged, c.bytes = 1, 1, n
}

// extend tallies the next pair of a tally that holds one already.
func (c *tally) extend(src, dst Loc, n int64) {
	if !continues(c.last, src, dst, n) {
		c.merged++
	}
	c.last.src, c.last.dst, c.last.len = src, dst, n
	c.descs++
	c.bytes += n
}

// addStrided tallies count pairs of n bytes each, the first from src to
// dst and each later one pStride bytes after the one before on P and
// dStride on D (a run of heads in one page). The later pairs all stand as
// the second does to the first, so the rule is asked once for them.
func (c *tally) addStrided(src, dst Loc, n int64, count int, pStride, dStride int64) {
	if c.descs == 0 { // add, inlined
		c.open(src, dst, n)
	} else {
		c.extend(src, dst, n)
	}
	more := count - 1
	if more <= 0 {
		return
	}
	if !continues(c.last, Loc{src.Region, src.Offset + pStride}, Loc{dst.Region, dst.Offset + dStride}, n) {
		c.merged += more
	}
	c.descs += more
	c.bytes += int64(more) * n
	c.last.src.Offset += int64(more) * pStride
	c.last.dst.Offset += int64(more) * dStride
}

// join appends o's pairs, which follow c's: o's first merges into c's
// last where it continues it.
func (c *tally) join(o *tally) {
	switch {
	case o.descs == 0:
		return
	case c.descs == 0:
		*c = *o
		return
	}
	c.merged += o.merged
	if continues(c.last, o.first.src, o.first.dst, o.first.len) {
		c.merged--
	}
	c.descs += o.descs
	c.bytes += o.bytes
	c.last = o.last
}

// moved is c's run, whose pairs lie in one region on each side, placed
// elsewhere: every pair's P side in region pIdx, pShift bytes on, and its
// D side in region dIdx, dShift bytes on (a set's tally placed at a job's
// first head: runsAt). Moving both sides of every pair alike keeps which
// pairs continue which, so only the ends change.
func (c *tally) moved(pIdx int, pShift int64, dIdx int, dShift int64) tally {
	m := *c
	m.first.src, m.first.dst = Loc{pIdx, c.first.src.Offset + pShift}, Loc{dIdx, c.first.dst.Offset + dShift}
	m.last.src, m.last.dst = Loc{pIdx, c.last.src.Offset + pShift}, Loc{dIdx, c.last.dst.Offset + dShift}
	return m
}

// MergedCount is the number of descriptors NIXL posts for pairs after
// merging runs of consecutive pairs that are contiguous on both sides
// (same regions, each starting where the previous ended) and of one
// length. NIXL merges only inside a dense run of its prepared list, and a
// run holds descriptors of one length: pairs of different lengths are
// never merged, back to back or not.
func MergedCount(pairs []Pair) int {
	var c tally
	for i := range pairs {
		c.add(pairs[i].Src, pairs[i].Dst, pairs[i].Len)
	}
	return c.merged
}

// groupTally totals the group pairs as the group-pair path writes its
// jobs: per (P group, D group) its descriptors, bytes and layers, and its
// kind (that of its first D layer: a group's layers share one).
type groupTally struct {
	nD    int
	gps   []GroupPair
	used  []bool
	layer []bool // per item: its layer counted
	keyOf []int  // per counted item: its group pair
}

func newGroupTally(nP, nD, items int) *groupTally {
	return &groupTally{nD: nD, gps: make([]GroupPair, nP*nD), used: make([]bool, nP*nD), layer: make([]bool, items), keyOf: make([]int, items)}
}

// add tallies one job's n pairs, of bytes bytes in all, of the item
// (index item, D layer kind kind) between P group pg and D group dg.
func (g *groupTally) add(pg, dg, item int, kind string, n int, bytes int64) {
	k := pg*g.nD + dg
	gp := &g.gps[k]
	if !g.used[k] {
		g.used[k] = true
		*gp = GroupPair{PGroup: pg, DGroup: dg, Kind: kind}
	}
	gp.Descs += n
	gp.Bytes += bytes
	if !g.layer[item] {
		g.layer[item] = true
		g.keyOf[item] = k
		gp.Layers++
	}
}

// merge adds o's totals (another worker's, over other rank pairs) to g's.
func (g *groupTally) merge(o *groupTally) {
	for k := range o.gps {
		if !o.used[k] {
			continue
		}
		if !g.used[k] {
			g.used[k] = true
			g.gps[k] = GroupPair{PGroup: o.gps[k].PGroup, DGroup: o.gps[k].DGroup, Kind: o.gps[k].Kind}
		}
		g.gps[k].Descs += o.gps[k].Descs
		g.gps[k].Bytes += o.gps[k].Bytes
	}
	for item, counted := range o.layer {
		if counted && !g.layer[item] {
			g.layer[item], g.keyOf[item] = true, o.keyOf[item]
			g.gps[o.keyOf[item]].Layers++
		}
	}
}

// pairs are the group pairs used, ordered by P group, then D group.
func (g *groupTally) pairs() []GroupPair {
	out := []GroupPair{}
	for k, gp := range g.gps {
		if g.used[k] {
			out = append(out, gp)
		}
	}
	return out
}

// pairsTally totals pairs already written (vLLM's path), a batch at a
// time: per rank pair its tally, and per (P group, D group) the group
// pairs. A long prompt's pairs need not all be held to be counted (see
// foldPairs).
type pairsTally struct {
	gps    map[[2]int]*GroupPair
	layers map[[2]int]map[string]bool
	order  [][2]int
	ranks  map[[2]int]*rankTally
}

// rankTally is where one rank pair's tally stands: its pairs' tally and
// the group pair its last pair fell in (a run and a group pair continue
// across batches).
type rankTally struct {
	tally
	group     *GroupPair
	last      [2]int
	lastLayer string
}

// add tallies pairs of rank pair rp, after those tallied before.
func (t *Transfer) add(ctx context.Context, rp *RankPair, pairs []Pair) error {
	a := t.sums
	if a == nil {
		a = &pairsTally{gps: map[[2]int]*GroupPair{}, layers: map[[2]int]map[string]bool{}, ranks: map[[2]int]*rankTally{}}
		t.sums = a
	}
	r := a.ranks[[2]int{rp.P, rp.D}]
	if r == nil {
		r = &rankTally{lastLayer: "\x00"}
		a.ranks[[2]int{rp.P, rp.D}] = r
	}
	for n, p := range pairs {
		if n&(1<<16-1) == 0 && n > 0 {
			if err := canceled(ctx); err != nil {
				return err
			}
		}
		r.tally.add(p.Src, p.Dst, p.Len)
		k := [2]int{p.PGroup, p.DGroup}
		if r.group != nil && k == r.last {
			r.group.Descs++
			r.group.Bytes += p.Len
			if p.Layer != r.lastLayer && p.Layer != "" {
				a.layers[k][p.Layer] = true
				r.lastLayer = p.Layer
			}
			continue
		}
		r.last, r.lastLayer = k, p.Layer
		g, ok := a.gps[k]
		if !ok {
			kind := ""
			if reg, ok := t.DRegs[rp.D].Layer(p.Layer); ok {
				kind = string(reg.Kind)
			}
			g = &GroupPair{PGroup: p.PGroup, DGroup: p.DGroup, Kind: kind}
			a.gps[k] = g
			a.layers[k] = map[string]bool{}
			a.order = append(a.order, k)
		}
		r.group = g
		g.Descs++
		g.Bytes += p.Len
		if p.Layer != "" {
			a.layers[k][p.Layer] = true
		}
	}
	return nil
}

// foldAt is how many pairs a rank pair holds, when the caller keeps none,
// before they are tallied and let go (foldPairs).
const foldAt = 1 << 16

// foldPairs tallies rp's pairs and empties it, when the caller keeps no
// pairs and rp holds foldAt or more: a 2^20-token prompt's millions of
// pairs (hundreds of MB, which the collector would walk) never exist at
// once.
func (t *Transfer) foldPairs(opt Options, rp *RankPair) error {
	if opt.Output == KeepPairs || len(rp.Pairs) < foldAt {
		return nil
	}
	if err := t.add(opt.Ctx, rp, rp.Pairs); err != nil {
		return err
	}
	rp.Pairs = rp.Pairs[:0]
	return nil
}

// finish tallies the pairs the rank pairs still hold and totals the
// transfer: per rank pair, per group pair, in all. It walks every pair
// (millions for a long prompt), so it stops, as the pairs' making does,
// once ctx is done.
func (t *Transfer) finish(ctx context.Context, keep bool) error {
	for i := range t.RankPairs {
		if err := canceled(ctx); err != nil {
			return err
		}
		rp := &t.RankPairs[i]
		if !t.tallied {
			if err := t.add(ctx, rp, rp.Pairs); err != nil {
				return err
			}
			r := t.sums.ranks[[2]int{rp.P, rp.D}]
			rp.Descs, rp.Merged, rp.Bytes = r.descs, r.merged, r.bytes
		}
		t.Bytes += rp.Bytes
		t.Descs += rp.Descs
		t.Merged += rp.Merged
		if !keep {
			rp.Pairs = nil
		}
	}
	if t.sums == nil {
		return nil
	}
	a := t.sums
	sort.Slice(a.order, func(i, j int) bool {
		if a.order[i][0] != a.order[j][0] {
			return a.order[i][0] < a.order[j][0]
		}
		return a.order[i][1] < a.order[j][1]
	})
	for _, k := range a.order {
		g := a.gps[k]
		g.Layers = len(a.layers[k])
		t.GroupPairs = append(t.GroupPairs, *g)
	}
	t.sums = nil
	return nil
}
