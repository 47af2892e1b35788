package xfer

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// This file is kvscope's group-pair path: every D layer takes its tokens
// from the same layer on P, whatever group, slot or block size each side
// gave it. Descriptors follow token runs: a run ends where a P page or a D
// page ends, so pages of different token counts need one descriptor per
// head per run (HND keeps a head's tokens contiguous only inside a page).
// Where both pages are whole and equal, one descriptor moves every head a P
// rank supplies.

// groupPairPath builds the per-layer descriptor pairs.
func (t *Transfer) groupPairPath(opt Options) error {
	pp, dp := t.PRegs[0].plan, t.DRegs[0].plan
	n, hit := t.Request.PromptTokens, t.Request.PrefixHitTokens
	t.DNeed = map[string]Span{}

	// Each D group needs a token span; each P group keeps one.
	dNeed := make([]Span, len(dp.Groups))
	for gi, g := range dp.Groups {
		l, _ := t.DRegs[0].Layer(g.Layers[0])
		dNeed[gi] = Need(l.Kind, l.Window, l.Chunk, n, hit)
	}
	pKept := make([]Span, len(pp.Groups))
	for gi, g := range pp.Groups {
		l, _ := t.PRegs[0].Layer(g.Layers[0])
		pKept[gi] = keptByP(l.Kind, l.Window, l.Chunk, g.BlockSize, t.PComputed)
	}
	var pa, da allocator
	for gi, g := range pp.Groups {
		first, count := pagesOf(pKept[gi], g.BlockSize, g.Kind.IsState())
		t.PPages = append(t.PPages, Pages{BlockSize: g.BlockSize, First: first, IDs: pick(opt, P, gi, pa.take(count))})
	}
	for gi, g := range dp.Groups {
		first, count := pagesOf(dNeed[gi], g.BlockSize, g.Kind.IsState())
		t.DPages = append(t.DPages, Pages{BlockSize: g.BlockSize, First: first, IDs: pick(opt, D, gi, da.take(count))})
	}

	pr := opt.pairing
	if pr == nil {
		var err error
		if pr, err = newPairing(t.PRegs, t.DRegs, !opt.CountOnly); err != nil {
			return err
		}
	}
	for i, it := range pr.items {
		dl, pl := pr.dLayers[i], pr.pLayers[i]
		if !dl.Kind.IsState() {
			t.DNeed[it.name] = dNeed[it.dg]
			if !pKept[it.pg].Contains(dNeed[it.dg]) {
				t.reject("window-missing", "P", fmt.Sprintf("layer %s: D (%s) needs tokens [%d, %d) but P (%s) keeps only [%d, %d)",
					it.name, dl.Kind, dNeed[it.dg].Lo, dNeed[it.dg].Hi, pl.Kind, pKept[it.pg].Lo, pKept[it.pg].Hi),
					"give P and D the same --disable-hybrid-kv-cache-manager setting")
				return nil
			}
		}
	}
	if err := canceled(opt.Ctx); err != nil {
		return err
	}
	return t.groupPairs(opt, pr, dNeed)
}

// pairing is what the group-pair path needs of two sides' registrations
// whatever the request: D's layers in the order their pairs are written
// (by P group, D group, then D's order), every rank's registration of
// each, which layers share token runs (one set per P group, D group and
// block sizes), and the jobs: each D rank's layer segments split into runs
// of the P ranks that supply them, with the rank pairs in first use. A
// prepared deployment makes it once for all its requests; it is read only.
type pairing struct {
	items            []gpItem
	pLayers, dLayers []*LayerReg // [rank*len(items) + item]
	setOf            []int       // per item: its set of token runs, -1 for a state layer
	setItem          []int       // per set: its first item
	jobs             []gpJob     // nil when made for counting only
	order            [][2]int    // (P rank, D rank) in first use, with the jobs
}

// newPairing makes the pairing of two sides' registrations; withJobs says
// whether to list the jobs (counting alone walks them instead: eachRun).
func newPairing(pRegs, dRegs []*Registration, withJobs bool) (*pairing, error) {
	p := &pairing{items: make([]gpItem, 0, len(dRegs[0].Layers))}
	for _, dl := range dRegs[0].Layers {
		pl, _ := pRegs[0].Layer(dl.Name)
		p.items = append(p.items, gpItem{dl.Name, pl.Group, dl.Group})
	}
	slices.SortStableFunc(p.items, func(a, b gpItem) int { return cmp.Or(cmp.Compare(a.pg, b.pg), cmp.Compare(a.dg, b.dg)) })
	nItems, pTP, dTP := len(p.items), len(pRegs), len(dRegs)
	p.pLayers = make([]*LayerReg, pTP*nItems)
	p.dLayers = make([]*LayerReg, dTP*nItems)
	for i, it := range p.items {
		for r, reg := range pRegs {
			p.pLayers[r*nItems+i], _ = reg.Layer(it.name)
		}
		for j, reg := range dRegs {
			p.dLayers[j*nItems+i], _ = reg.Layer(it.name)
		}
	}
	// Consecutive attention layers of one (P group, D group) and block
	// sizes share their token runs: the same pages and D's span.
	p.setOf = make([]int, nItems)
	for i, it := range p.items {
		p.setOf[i] = -1
		pl, dl := p.pLayers[i], p.dLayers[i]
		if dl.Kind.IsState() {
			continue
		}
		if n := len(p.setItem); n > 0 && i > 0 && p.setOf[i-1] == n-1 && p.items[i-1].pg == it.pg && p.items[i-1].dg == it.dg &&
			p.pLayers[i-1].BlockSize == pl.BlockSize && p.dLayers[i-1].BlockSize == dl.BlockSize {
			p.setOf[i] = n - 1
			continue
		}
		p.setOf[i] = len(p.setItem)
		p.setItem = append(p.setItem, i)
	}
	if !withJobs {
		return p, nil
	}
	// A job per P rank that supplies a D rank's layer segment: one each
	// where D's TP is a multiple of P's, P/D where P's is of D's (others
	// grow).
	segs := 0
	for i := range p.items {
		segs += len(p.dLayers[i].Segments)
	}
	p.jobs = make([]gpJob, 0, segs*dTP*max(1, pTP/dTP))
	var err error
	p.order, err = p.eachRun(pTP, dTP, func(j, i, si int, _ *Segment, run indexRun) {
		p.jobs = append(p.jobs, gpJob{d: j, item: i, seg: si, run: run})
	})
	return p, err
}

// eachRun calls fn with every D rank's layer segment's runs of the P ranks
// that supply them, in the order pairs are written: by D rank, then layer
// (items), segment and run; it returns the rank pairs (P rank, D rank)
// those runs make, in first use.
func (p *pairing) eachRun(pTP, dTP int, fn func(j, i, si int, ds *Segment, run indexRun)) ([][2]int, error) {
	nItems := len(p.items)
	var runs []indexRun
	var order [][2]int
	for j := range dTP {
		for i := range p.items {
			dl := p.dLayers[j*nItems+i]
			for si := range dl.Segments {
				ds := &dl.Segments[si]
				pSeg := func(r int) Segment { return p.pLayers[r*nItems+i].Segments[si] }
				var err error
				if runs, err = appendIndexRuns(runs[:0], *ds, pSeg, pTP, dTP, j); err != nil {
					return nil, fmt.Errorf("xfer: layer %s %s on D rank %d: %w", p.items[i].name, ds.Name, j, err)
				}
				for _, run := range runs {
					if !slices.Contains(order, [2]int{run.Rank, j}) {
						order = append(order, [2]int{run.Rank, j})
					}
					fn(j, i, si, ds, run)
				}
			}
		}
	}
	return order, nil
}

// gpItem is one D layer on the group-pair path: its name and the P and D
// groups it moves between.
type gpItem struct {
	name   string
	pg, dg int
}

// gpJob is one run of indices of one segment of one layer that one P rank
// supplies to one D rank: the unit the group-pair path writes pairs for.
type gpJob struct {
	d, item, seg int
	run          indexRun
}

// tokenRun is one run of tokens inside one P page and one D page, with
// the blocks that hold those pages and the rows the run starts at.
type tokenRun struct {
	lo, hi         int   // token range
	pBlock, dBlock int64 // block ids
	pRow, dRow     int64 // first row in each page
	rows           int64
	whole          bool // both pages whole and equal: one pair moves every head
}

// tokenRuns are the token runs of one (P group, D group) pair of block
// sizes over D's span, and how many of them are whole pages.
type tokenRuns struct {
	runs  []tokenRun
	whole int
	one   *oneHead // the one-head pairs' offsets, for the last geometry asked
}

// oneHead is what a one-head job (a rank pair's run of one head) needs of
// a set's token runs under one geometry: each run's pair as offsets from
// the head's place in a block on each side, and how the runs chain. The
// jobs of a set's layers' K and V share one geometry, as a rule, and so
// this.
type oneHead struct {
	geo    [5]int64 // P's block and row bytes, D's block, row and head bytes
	offs   []runOff
	breaks int   // runs after the first that do not continue the run before
	bytes  int64 // all runs' bytes
}

// runOff is one token run's pair under a geometry: its offsets from the
// head's place in a block on each side, its length and its tokens.
type runOff struct {
	src, dst, len int64
	lo, hi        int
}

// oneHeadGeometry is the geometry a one-head job's offsets depend on.
func oneHeadGeometry(ps, ds *Segment, pr, dr *Region) [5]int64 {
	return [5]int64{pr.BlockLen, ps.RowBytes, dr.BlockLen, ds.RowBytes, ds.IndexBytes}
}

// oneHead is the set's one-head offsets under geometry geo, worked out
// on first use.
func (s *tokenRuns) oneHead(geo [5]int64) *oneHead {
	if s.one != nil && s.one.geo == geo {
		return s.one
	}
	pLen, pRowB, dLen, dRowB, dIdxB := geo[0], geo[1], geo[2], geo[3], geo[4]
	h := &oneHead{geo: geo, offs: make([]runOff, len(s.runs))}
	for i := range s.runs {
		r := &s.runs[i]
		o := runOff{src: r.pBlock*pLen + r.pRow*pRowB, dst: r.dBlock*dLen + r.dRow*dRowB, len: r.rows * dRowB, lo: r.lo, hi: r.hi}
		if r.whole {
			o.len = dIdxB
		}
		// Whether a run continues the one before does not depend on the
		// head's place: both sides shift by it alike.
		if i > 0 {
			last := &h.offs[i-1]
			if !continues(Loc{Offset: last.src}, Loc{Offset: last.dst}, last.len, Loc{Offset: o.src}, Loc{Offset: o.dst}, o.len) {
				h.breaks++
			}
		}
		h.offs[i] = o
		h.bytes += o.len
	}
	s.one = h
	return h
}

// groupPairs writes every descriptor pair in two passes: the first counts
// each job's pairs (a D rank's layer segment's run of P ranks: pairing);
// the second writes each rank pair's pairs into a slice of exactly their
// number (pairWriter), totalling them as it goes. Nothing grows and
// nothing is copied.
func (t *Transfer) groupPairs(opt Options, pr *pairing, dNeed []Span) error {
	pTP, dTP := len(t.PRegs), len(t.DRegs)
	// Each set's token runs over its layers' span.
	sets := make([]tokenRuns, len(pr.setItem))
	for s, i := range pr.setItem {
		it := pr.items[i]
		sets[s] = t.tokenRuns(dNeed[it.dg], pr.pLayers[i].BlockSize, pr.dLayers[i].BlockSize, it.pg, it.dg)
	}
	// pairsOf is how many pairs a job writes.
	pairsOf := func(item int, ds *Segment, run indexRun) int {
		if !ds.IsAttention() {
			return 1
		}
		set := &sets[pr.setOf[item]]
		if ds.Name == SegLatent {
			return len(set.runs)
		}
		return set.whole + (len(set.runs)-set.whole)*(run.Hi-run.Lo)
	}
	counts := make([]int, pTP*dTP)
	if pr.jobs == nil { // counting only, the jobs not listed
		order, err := pr.eachRun(pTP, dTP, func(j, i, _ int, ds *Segment, run indexRun) {
			counts[run.Rank*dTP+j] += pairsOf(i, ds, run)
		})
		if err != nil {
			return err
		}
		t.countedRankPairs(order, counts)
		return nil
	}
	nItems := len(pr.items)
	jobPairs := make([]int, len(pr.jobs))
	for ji, jb := range pr.jobs {
		n := pairsOf(jb.item, &pr.dLayers[jb.d*nItems+jb.item].Segments[jb.seg], jb.run)
		jobPairs[ji] = n
		counts[jb.run.Rank*dTP+jb.d] += n
	}
	t.countedRankPairs(pr.order, counts)
	if opt.CountOnly {
		return nil
	}
	// Pass 2: each rank pair's pairs in a slice of exactly their number
	// (or, when the caller keeps none, one job's worth reused), tallied as
	// they are written: no pass over them afterwards.
	total := 0
	for _, c := range counts {
		total += c
	}
	w := &pairWriter{t: t, opt: opt, items: pr.items, jobs: pr.jobs, jobPairs: jobPairs, sets: sets, setOf: pr.setOf,
		pLayers: pr.pLayers, dLayers: pr.dLayers, dTP: dTP, counts: counts,
		pairs: make([][]Pair, pTP*dTP), chains: make([]chain, pTP*dTP)}
	groups, err := w.writeAll(total)
	if err != nil {
		return err
	}
	for i := range t.RankPairs {
		rp := &t.RankPairs[i]
		k := rp.P*dTP + rp.D
		c := w.chains[k]
		rp.Descs, rp.Merged, rp.Bytes = c.descs, c.merged, c.bytes
		if opt.KeepPairs {
			rp.Pairs = w.pairs[k]
		}
	}
	t.GroupPairs = groups.pairs()
	t.tallied = true
	return nil
}

// countedRankPairs sets the transfer's rank pairs, in order, with their
// descriptor counts (all a count-only transfer has of them).
func (t *Transfer) countedRankPairs(order [][2]int, counts []int) {
	dTP := len(t.DRegs)
	t.RankPairs = make([]RankPair, 0, len(order))
	for _, k := range order {
		rp := t.rankPair(k[0], k[1])
		rp.Descs = counts[k[0]*dTP+k[1]]
		t.RankPairs = append(t.RankPairs, rp)
	}
}

// parallelPairs is how many pairs a transfer must have before its rank
// pairs are written by more than one worker: below it, a second worker's
// wake-up (40–80 µs on this project's 2-core VM) is most of what it would
// save. (There, alternating runs: 39,872 pairs took 0.38 ms on two
// workers and 0.39 ms on one; 108,512 took 0.92 ms and 1.16 ms.)
const parallelPairs = 1 << 14

// pairWriter writes the group-pair path's jobs. A rank pair (one NIXL
// transfer) is written by one worker, in its jobs' order, so its pairs
// and its chain come out the same whoever writes them; a long transfer's
// rank pairs are taken, the largest first, by as many workers as there
// are cores (one in the browser), each making and filling its rank pairs'
// slices. The calling goroutine is the first worker, so a helper that
// starts late only takes what is left.
type pairWriter struct {
	t        *Transfer
	opt      Options
	items    []gpItem
	jobs     []gpJob
	jobPairs []int // per job: its pairs
	sets     []tokenRuns
	setOf    []int // per item: its set (pairing.setOf)
	pLayers  []*LayerReg
	dLayers  []*LayerReg
	dTP      int
	counts   []int // per rank pair (P rank * dTP + D rank)

	// Per rank pair, each written by the worker that took it alone.
	pairs  [][]Pair
	chains []chain

	order []int        // rank pairs, the largest first
	jobOf [][]int32    // per rank pair, its jobs in order
	taken atomic.Int32 // how many of order the workers have taken
}

// writeAll writes every job, on one worker or several, and returns the
// group pairs' totals.
func (w *pairWriter) writeAll(total int) (*groupTally, error) {
	n := 1
	if total >= parallelPairs {
		n = min(runtime.GOMAXPROCS(0), len(w.t.RankPairs))
	}
	w.order = make([]int, len(w.t.RankPairs))
	for i, rp := range w.t.RankPairs {
		w.order[i] = rp.P*w.dTP + rp.D
	}
	sort.SliceStable(w.order, func(a, b int) bool { return w.counts[w.order[a]] > w.counts[w.order[b]] })
	w.jobOf = make([][]int32, len(w.counts))
	for ji, jb := range w.jobs {
		k := jb.run.Rank*w.dTP + jb.d
		w.jobOf[k] = append(w.jobOf[k], int32(ji))
	}
	if n > 1 {
		// Each set's one-head offsets, worked out here once rather than by
		// every worker that meets the set (a worker whose job wants
		// another geometry works out its own).
		for ji := range w.jobs {
			jb := &w.jobs[ji]
			_, ps, ds, pr, dr := w.where(jb)
			if !ds.IsAttention() || ds.Name == SegLatent || jb.run.Hi-jb.run.Lo != 1 {
				continue
			}
			if set := &w.sets[w.setOf[jb.item]]; set.one == nil {
				set.oneHead(oneHeadGeometry(ps, ds, pr, dr))
			}
		}
	}
	tallies := make([]*groupTally, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A fault in a helper comes back as an error: a server recovers
			// a handler's own panics, not its helpers'.
			defer func() {
				if r := recover(); r != nil {
					errs[i] = fmt.Errorf("xfer: writing pairs: %v", r)
				}
			}()
			tallies[i], errs[i] = w.write()
		}()
	}
	tallies[0], errs[0] = w.write()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for _, g := range tallies[1:] {
		tallies[0].merge(g)
	}
	return tallies[0], nil
}

// where is a job's D layer, its segments on both sides and their regions.
func (w *pairWriter) where(jb *gpJob) (dl *LayerReg, ps, ds *Segment, pr, dr *Region) {
	nItems := len(w.items)
	pl := w.pLayers[jb.run.Rank*nItems+jb.item]
	dl = w.dLayers[jb.d*nItems+jb.item]
	ps, ds = &pl.Segments[jb.seg], &dl.Segments[jb.seg]
	return dl, ps, ds, &w.t.PRegs[jb.run.Rank].Regions[ps.Region], &w.t.DRegs[jb.d].Regions[ds.Region]
}

// write takes rank pairs until none is left and writes their jobs.
func (w *pairWriter) write() (*groupTally, error) {
	t, nItems := w.t, len(w.items)
	sets := slices.Clone(w.sets) // the one-head offsets it works out are its own
	groups := newGroupTally(len(t.PRegs[0].plan.Groups), len(t.DRegs[0].plan.Groups), nItems)
	var scratch []Pair // one job's pairs, when the caller keeps none
	for {
		i := int(w.taken.Add(1)) - 1
		if i >= len(w.order) {
			return groups, nil
		}
		k := w.order[i]
		var all []Pair
		if w.opt.KeepPairs {
			all = make([]Pair, w.counts[k])
			w.pairs[k] = all
		}
		at, last := 0, -1
		c := &w.chains[k]
		for _, ji := range w.jobOf[k] {
			jb := &w.jobs[ji]
			if jb.item != last {
				if err := canceled(w.opt.Ctx); err != nil {
					return nil, err
				}
				last = jb.item
			}
			it := w.items[jb.item]
			dl, ps, ds, pr, dr := w.where(jb)
			n := w.jobPairs[ji]
			var out []Pair
			if w.opt.KeepPairs {
				out = all[at : at+n]
				at += n
			} else {
				if cap(scratch) < n {
					scratch = make([]Pair, n)
				}
				out = scratch[:n]
			}
			before := c.bytes
			if ds.IsAttention() {
				attnPairs(out, it, ps, ds, pr, dr, jb.run, &sets[w.setOf[jb.item]], c)
			} else {
				out[0] = t.stateRun(it.name, ps, ds, pr, dr, jb.run, it.pg, it.dg)
				c.push(out[0].Src, out[0].Dst, out[0].Len)
			}
			if n > 0 {
				groups.add(it, jb.item, string(dl.Kind), n, c.bytes-before)
			}
		}
	}
}

// chain tallies one rank pair's pairs in the order they are posted: its
// descriptors, bytes, and descriptors left once NIXL merges contiguous
// runs (mergesWith), from the last pair's addresses alone.
type chain struct {
	descs, merged int
	bytes         int64
	src, dst      Loc   // the last pair's
	len           int64 // the last pair's
}

// push tallies the next pair.
func (c *chain) push(src, dst Loc, n int64) {
	if c.descs == 0 || !continues(c.src, c.dst, c.len, src, dst, n) {
		c.merged++
	}
	c.src, c.dst, c.len = src, dst, n
	c.descs++
	c.bytes += n
}

// groupTally totals the group pairs as jobs are written: per (P group, D
// group) its descriptors, bytes and layers, and its kind (that of its
// first D layer: a group's layers share one).
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

// add tallies one job's n pairs, of bytes bytes in all, of item it (index
// item, D layer kind kind).
func (g *groupTally) add(it gpItem, item int, kind string, n int, bytes int64) {
	k := it.pg*g.nD + it.dg
	gp := &g.gps[k]
	if !g.used[k] {
		g.used[k] = true
		*gp = GroupPair{PGroup: it.pg, DGroup: it.dg, Kind: kind}
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

// pagesOf is the first page and page count covering a token span; a state
// group has one block.
func pagesOf(s Span, blockSize int, state bool) (int, int) {
	if state {
		return 0, 1
	}
	if s.Len() == 0 {
		return 0, 0
	}
	first := s.Lo / blockSize
	return first, ceilDiv(s.Hi, blockSize) - first
}

// tokenRuns splits D's span of one layer into runs that end where a P
// page (bsP tokens) or a D page (bsD tokens) ends, with their blocks.
func (t *Transfer) tokenRuns(span Span, bsP, bsD, pg, dg int) tokenRuns {
	out := tokenRuns{runs: make([]tokenRun, 0, span.Len()/bsP+span.Len()/bsD+2)}
	if span.Len() <= 0 {
		return out
	}
	// The pages the run starts in and where they end, stepped forward
	// (no division a run).
	pPage, dPage := span.Lo/bsP, span.Lo/bsD
	pEnd, dEnd := (pPage+1)*bsP, (dPage+1)*bsD
	for tok := span.Lo; tok < span.Hi; {
		end := min(span.Hi, pEnd, dEnd)
		pBlock, _ := t.PPages[pg].Block(pPage)
		dBlock, _ := t.DPages[dg].Block(dPage)
		rows := end - tok
		r := tokenRun{lo: tok, hi: end, pBlock: int64(pBlock), dBlock: int64(dBlock),
			pRow: int64(tok - (pEnd - bsP)), dRow: int64(tok - (dEnd - bsD)), rows: int64(rows), whole: rows == bsP && rows == bsD}
		if r.whole {
			out.whole++
		}
		out.runs = append(out.runs, r)
		tok = end
		if tok == pEnd {
			pPage, pEnd = pPage+1, pEnd+bsP
		}
		if tok == dEnd {
			dPage, dEnd = dPage+1, dEnd+bsD
		}
	}
	return out
}

// attnPairs writes the descriptors of one attention segment for one run
// of heads supplied by one P rank, token run by token run: the latent
// (token-major) in one pair per token run; K or V heads in one pair per
// token run where both pages are whole and equal, else one per head (HND
// keeps a head's tokens contiguous only inside a page). out has exactly
// their number.
func attnPairs(out []Pair, it gpItem, ps, ds *Segment, pr, dr *Region, run indexRun, set *tokenRuns, c *chain) {
	runs := set.runs
	pIdx, dIdx := pr.Index, dr.Index
	pLen, dLen := pr.BlockLen, dr.BlockLen
	pHeads := ps.Offset + int64(run.Lo-ps.Lo)*ps.IndexBytes // the run's first head in a block
	dHeads := ds.Offset + int64(run.Lo-ds.Lo)*ds.IndexBytes
	pRowB, dRowB := ps.RowBytes, ds.RowBytes
	pIdxB, dIdxB := ps.IndexBytes, ds.IndexBytes
	name, seg, pg, dg := it.name, ds.Name, it.pg, it.dg
	ch := *c // tallied in a local, stored once at the end
	// Each pair is the job's constant fields, then its own.
	tmpl := Pair{Src: Loc{Region: pIdx}, Dst: Loc{Region: dIdx}, SrcID: -1, DstID: -1, Layer: name, Seg: seg, Lo: run.Lo, Hi: run.Hi, PGroup: pg, DGroup: dg}
	k := 0
	if seg == SegLatent {
		for _, r := range runs {
			q := &out[k]
			k++
			*q = tmpl
			q.Src.Offset = r.pBlock*pLen + ps.Offset + r.pRow*pRowB
			q.Dst.Offset = r.dBlock*dLen + ds.Offset + r.dRow*dRowB
			q.Len = r.rows * dRowB
			q.Tokens = Span{r.lo, r.hi}
			ch.push(q.Src, q.Dst, q.Len)
		}
		*c = ch
		return
	}
	heads := int64(run.Hi - run.Lo)
	if heads == 1 {
		// One head a run (a rank holds one KV head, as at D TP ≥ the KV
		// heads): one pair per token run, whole or not, at offsets the set
		// works out once, and chained as the set says but for the first.
		h := set.oneHead(oneHeadGeometry(ps, ds, pr, dr))
		offs := h.offs
		if len(offs) == 0 {
			return
		}
		first, last := &offs[0], &offs[len(offs)-1]
		if ch.descs == 0 || !continues(ch.src, ch.dst, ch.len, Loc{pIdx, pHeads + first.src}, Loc{dIdx, dHeads + first.dst}, first.len) {
			ch.merged++
		}
		ch.merged += h.breaks
		ch.descs += len(offs)
		ch.bytes += h.bytes
		ch.src, ch.dst, ch.len = Loc{pIdx, pHeads + last.src}, Loc{dIdx, dHeads + last.dst}, last.len
		*c = ch
		out = out[:len(offs)]
		for i := range offs {
			o := &offs[i]
			q := &out[i]
			*q = tmpl
			q.Src.Offset, q.Dst.Offset, q.Len = pHeads+o.src, dHeads+o.dst, o.len
			q.Tokens = Span{o.lo, o.hi}
		}
		return
	}
	for _, r := range runs {
		pAt, dAt := r.pBlock*pLen+pHeads, r.dBlock*dLen+dHeads
		tokens := Span{r.lo, r.hi}
		if r.whole {
			q := &out[k]
			k++
			*q = tmpl
			q.Src.Offset, q.Dst.Offset, q.Len = pAt, dAt, heads*dIdxB
			q.Tokens = tokens
			ch.push(q.Src, q.Dst, q.Len)
			continue
		}
		pAt += r.pRow * pRowB
		dAt += r.dRow * dRowB
		length := r.rows * dRowB
		// The first head's pair may continue the pair before it; each
		// later one, of the same length and regions, continues its
		// predecessor exactly when a head's stride is that length on both
		// sides.
		ch.push(Loc{pIdx, pAt}, Loc{dIdx, dAt}, length)
		if more := heads - 1; more > 0 {
			ch.descs += int(more)
			ch.bytes += more * length
			if pIdxB != length || dIdxB != length {
				ch.merged += int(more)
			}
			ch.src, ch.dst = Loc{pIdx, pAt + more*pIdxB}, Loc{dIdx, dAt + more*dIdxB}
		}
		for h := run.Lo; h < run.Hi; h++ {
			q := &out[k]
			k++
			*q = tmpl
			q.Src.Offset, q.Dst.Offset, q.Len = pAt, dAt, length
			q.Lo, q.Hi = h, h+1
			q.Tokens = tokens
			pAt += pIdxB
			dAt += dIdxB
		}
	}
	*c = ch
}

// stateRun is the descriptor of one state segment's run of channels (or
// heads) from one P rank: the final state, one block on each side.
func (t *Transfer) stateRun(name string, ps, ds *Segment, pr, dr *Region, run indexRun, pg, dg int) Pair {
	pBlock, dBlock := t.PPages[pg].IDs[0], t.DPages[dg].IDs[0]
	return Pair{
		Src:   Loc{pr.Index, int64(pBlock)*pr.BlockLen + ps.Offset + int64(run.Lo-ps.Lo)*ps.IndexBytes},
		Dst:   Loc{dr.Index, int64(dBlock)*dr.BlockLen + ds.Offset + int64(run.Lo-ds.Lo)*ds.IndexBytes},
		Len:   int64(run.Hi-run.Lo) * ds.IndexBytes,
		SrcID: -1, DstID: -1, Layer: name, Seg: ds.Name, Lo: run.Lo, Hi: run.Hi, PGroup: pg, DGroup: dg,
	}
}
