package xfer

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
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

	pr := opt.pairing
	if pr == nil {
		var err error
		if pr, err = newPairing(t.PRegs, t.DRegs, !opt.CountOnly); err != nil {
			return err
		}
	}
	t.DNeed = make(map[string]Span, len(pr.items))
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
	for i, it := range pr.items {
		dl, pl := pr.dLayers[i], pr.pLayers[i]
		if !dl.Kind.IsState() {
			t.DNeed[it.name] = dNeed[it.dg]
			if !pKept[it.pg].Contains(dNeed[it.dg]) {
				t.reject("window-missing", "P", fmt.Sprintf("layer %s: D (%s) needs tokens [%d, %d) but P (%s) keeps only [%d, %d)",
					it.name, dl.Kind, dNeed[it.dg].Lo, dNeed[it.dg].Hi, pl.Kind, pKept[it.pg].Lo, pKept[it.pg].Hi),
					"give P and D the same --disable-hybrid-kv-cache-manager setting")
				t.listPages(opt, pKept, dNeed)
				return nil
			}
		}
	}
	if err := canceled(opt.Ctx); err != nil {
		return err
	}
	return t.groupPairs(opt, pr, pKept, dNeed)
}

// listPages sets the pages each group of each side holds: those of the
// tokens P keeps and D needs, numbered from block 1 on each side (or as
// opt.Blocks says).
func (t *Transfer) listPages(opt Options, pKept, dNeed []Span) {
	var pa, da allocator
	for gi, g := range t.PRegs[0].plan.Groups {
		first, count := pagesOf(pKept[gi], g.BlockSize, g.Kind.IsState())
		t.PPages = append(t.PPages, Pages{BlockSize: g.BlockSize, First: first, IDs: pick(opt, P, gi, pa.take(count))})
	}
	for gi, g := range t.DRegs[0].plan.Groups {
		first, count := pagesOf(dNeed[gi], g.BlockSize, g.Kind.IsState())
		t.DPages = append(t.DPages, Pages{BlockSize: g.BlockSize, First: first, IDs: pick(opt, D, gi, da.take(count))})
	}
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
	jobsOf           [][]int32   // per rank pair (P rank * D's TP + D rank): its jobs in order, with the jobs
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
	if p.order, err = p.eachRun(pTP, dTP, func(j, i, si int, _ *Segment, run indexRun) {
		p.jobs = append(p.jobs, gpJob{d: j, item: i, seg: si, run: run})
	}); err != nil {
		return nil, err
	}
	for ji := range p.jobs {
		jb := &p.jobs[ji]
		pl, dl := p.pLayers[jb.run.Rank*nItems+jb.item], p.dLayers[jb.d*nItems+jb.item]
		ps, ds := &pl.Segments[jb.seg], &dl.Segments[jb.seg]
		jb.at = placeJob(p.items[jb.item], string(dl.Kind), ps, ds, &pRegs[jb.run.Rank].Regions[ps.Region], &dRegs[jb.d].Regions[ds.Region], jb.run)
	}
	p.jobsOf = make([][]int32, pTP*dTP)
	for ji := range p.jobs {
		k := p.jobs[ji].run.Rank*dTP + p.jobs[ji].d
		p.jobsOf[k] = append(p.jobsOf[k], int32(ji))
	}
	return p, nil
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
	at           jobPlace // set once the jobs are listed
}

// jobPlace is what writing one job's pairs reads of both sides'
// registrations, gathered into the job once (a request's writer then
// chases no pointers into the layers: after megabytes of pairs, each of
// those reads missed the cache).
type jobPlace struct {
	f            jobFields
	kind         string // the D layer's kind (the group pairs' tally)
	attn, latent bool   // an attention segment; the latent (token-major)
	pLen, dLen   int64  // block bytes on each side
	pAt, dAt     int64  // the run's first head (or channel) in a block on each side
	pRowB, dRowB int64  // a token row of the segment on each side
	pIdxB, dIdxB int64  // a head (or channel) of the segment on each side
	geo          [5]int64
	heads        int64
}

// placeJob gathers what writing the pairs of item it's segment ps (on P,
// ds on D, in regions pr and dr) for run needs; kind is D's layer kind.
func placeJob(it gpItem, kind string, ps, ds *Segment, pr, dr *Region, run indexRun) jobPlace {
	return jobPlace{
		f:    it.fields(pr.Index, dr.Index, ds.Name, run),
		kind: kind, attn: ds.IsAttention(), latent: ds.Name == SegLatent,
		pLen: pr.BlockLen, dLen: dr.BlockLen,
		pAt:   ps.Offset + int64(run.Lo-ps.Lo)*ps.IndexBytes,
		dAt:   ds.Offset + int64(run.Lo-ds.Lo)*ds.IndexBytes,
		pRowB: ps.RowBytes, dRowB: ds.RowBytes, pIdxB: ps.IndexBytes, dIdxB: ds.IndexBytes,
		geo:   oneHeadGeometry(ps, ds, pr, dr),
		heads: int64(run.Hi - run.Lo),
	}
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
		// Written in place, field by field (as every hot loop here: a
		// composite goes through a temporary whose 8-byte stores its
		// 16-byte copy then stalls on).
		o := &h.offs[i]
		o.src, o.dst, o.len, o.lo, o.hi = r.pBlock*pLen+r.pRow*pRowB, r.dBlock*dLen+r.dRow*dRowB, r.rows*dRowB, r.lo, r.hi
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
		h.bytes += o.len
	}
	s.one = h
	return h
}

// groupPairs writes every descriptor pair in two passes: the first counts
// each job's pairs (a D rank's layer segment's run of P ranks: pairing)
// from how many token runs each set has (runCount, without listing them:
// all a count needs); the second lists the token runs and writes each
// rank pair's pairs into a slice of exactly their number (pairWriter),
// totalling them as it goes, or, where the caller keeps no pairs, only
// totals them. Nothing grows and nothing is copied.
func (t *Transfer) groupPairs(opt Options, pr *pairing, pKept, dNeed []Span) error {
	pTP, dTP := len(t.PRegs), len(t.DRegs)
	// How many token runs each set has over its layers' span, and how
	// many of them are whole pages.
	runs, whole := make([]int, len(pr.setItem)), make([]int, len(pr.setItem))
	for s, i := range pr.setItem {
		runs[s], whole[s] = runCount(dNeed[pr.items[i].dg], pr.pLayers[i].BlockSize, pr.dLayers[i].BlockSize)
	}
	// pairsOf is how many pairs a job of an item's segment (attention or
	// not, latent or not) writes for a run of heads.
	pairsOf := func(item int, attn, latent bool, heads int) int {
		if !attn {
			return 1
		}
		s := pr.setOf[item]
		if latent {
			return runs[s]
		}
		return whole[s] + (runs[s]-whole[s])*heads
	}
	counts := make([]int, pTP*dTP)
	if pr.jobs == nil { // counting only, the jobs not listed
		order, err := pr.eachRun(pTP, dTP, func(j, i, _ int, ds *Segment, run indexRun) {
			counts[run.Rank*dTP+j] += pairsOf(i, ds.IsAttention(), ds.Name == SegLatent, run.Hi-run.Lo)
		})
		if err != nil {
			return err
		}
		t.countedRankPairs(order, counts)
		t.listPages(opt, pKept, dNeed)
		return nil
	}
	jobPairs := make([]int, len(pr.jobs))
	total := 0
	for ji := range pr.jobs {
		jb := &pr.jobs[ji]
		n := pairsOf(jb.item, jb.at.attn, jb.at.latent, int(jb.at.heads))
		jobPairs[ji] = n
		counts[jb.run.Rank*dTP+jb.d] += n
		total += n
	}
	t.countedRankPairs(pr.order, counts)
	if opt.CountOnly {
		t.listPages(opt, pKept, dNeed)
		return nil
	}
	// Pass 2, on as many workers as a transfer this long is worth: the
	// helpers start now, while this one lists the token runs and makes
	// the slices. Pairs only tallied, not written, take one: a few µs a
	// thousand pairs, less than a helper's start.
	workers := 1
	if opt.KeepPairs && total >= parallelPairs {
		// No more than there are tasks of writing, on a host of many cores.
		workers = min(runtime.GOMAXPROCS(0), total/taskPairs)
	}
	crew := startCrew(workers - 1)
	defer crew.dismiss()
	t.listPages(opt, pKept, dNeed)
	sets := make([]tokenRuns, len(pr.setItem))
	for s, i := range pr.setItem {
		it := pr.items[i]
		sets[s] = t.tokenRuns(dNeed[it.dg], pr.pLayers[i].BlockSize, pr.dLayers[i].BlockSize, it.pg, it.dg, runs[s])
		if len(sets[s].runs) != runs[s] || sets[s].whole != whole[s] {
			return fmt.Errorf("xfer: layer %s: %d token runs (%d whole) listed, %d (%d) counted", it.name, len(sets[s].runs), sets[s].whole, runs[s], whole[s])
		}
	}
	w := &pairWriter{t: t, opt: opt, pr: pr, jobPairs: jobPairs, sets: sets, dTP: dTP, counts: counts,
		pairs: make([][]Pair, pTP*dTP), ready: make([]atomic.Bool, pTP*dTP)}
	groups, chains, err := w.writeAll(crew, workers)
	if err != nil {
		return err
	}
	for i := range t.RankPairs {
		rp := &t.RankPairs[i]
		k := rp.P*dTP + rp.D
		c := chains[k]
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

// parallelPairs is how many pairs a transfer must have before more than
// one worker writes them: below it, a helper's start (100–250 µs on this
// project's 2-core VM) is longer than the writing.
const parallelPairs = 1 << 14

// taskPairs is about how many pairs one writing task holds: a run of a
// rank pair's jobs (a few µs of writing), so that workers share a
// transfer evenly whenever a helper starts.
const taskPairs = 4096

// pairWriter writes the group-pair path's jobs as a list of tasks the
// workers take in turn: first making each rank pair's slice (when the
// pairs are kept), then, rank pair (one NIXL transfer) by rank pair, runs
// of its jobs, each written where the jobs before it end and tallied in a
// chain of its own; a rank pair's chain is its tasks' chains joined in
// order, so the pairs and the tallies come out the same whoever writes
// them.
type pairWriter struct {
	t        *Transfer
	opt      Options
	pr       *pairing
	jobPairs []int // per job: its pairs
	sets     []tokenRuns
	dTP      int
	counts   []int // per rank pair (P rank * dTP + D rank)

	// Per rank pair: its slice, and whether it is made yet.
	pairs [][]Pair
	ready []atomic.Bool

	tasks   []pairTask
	chains  []chain       // per task
	tallies []*groupTally // per worker
	taken   atomic.Int32  // how many tasks the workers have taken
}

// pairTask is one task of a pairWriter: making rank pair k's slice, or
// writing jobs [lo, hi) of its list (pairing.jobsOf) from its pair at on.
type pairTask struct {
	k, lo, hi, at int
	makes         bool
}

// writeAll lists the tasks, gives them to the crew (workers in all, the
// caller among them) and returns the group pairs' totals and each rank
// pair's chain.
func (w *pairWriter) writeAll(crew *crew, workers int) (*groupTally, []chain, error) {
	if w.opt.KeepPairs {
		// A slice each, so that workers share the zeroing. (One for all
		// left a helper waiting while the caller zeroed it; and on one
		// worker with the collector running, 108,512 pairs took 8.3 ms
		// against 5.3 with a slice each, medians of six runs alternating,
		// the profile full of the write barrier's slow path: likely its
		// one allocation starts a cycle that marks through all the
		// writing, where the allocations that follow a first slice pay
		// assists that end the marking before the writing starts.)
		for _, rp := range w.t.RankPairs {
			w.tasks = append(w.tasks, pairTask{k: rp.P*w.dTP + rp.D, makes: true})
		}
	}
	for _, rp := range w.t.RankPairs {
		k := rp.P*w.dTP + rp.D
		jobs := w.pr.jobsOf[k]
		for lo, at := 0, 0; lo < len(jobs); {
			hi, n := lo, 0
			for hi < len(jobs) && (n == 0 || n+w.jobPairs[jobs[hi]] <= taskPairs) {
				n += w.jobPairs[jobs[hi]]
				hi++
			}
			w.tasks = append(w.tasks, pairTask{k: k, lo: lo, hi: hi, at: at})
			lo, at = hi, at+n
		}
	}
	w.chains = make([]chain, len(w.tasks))
	w.tallies = make([]*groupTally, workers)
	if workers > 1 {
		// Each set's one-head offsets, worked out here once rather than by
		// every worker that meets the set (a worker whose job wants
		// another geometry works out its own).
		for ji := range w.pr.jobs {
			jb := &w.pr.jobs[ji]
			if !jb.at.attn || jb.at.latent || jb.at.heads != 1 {
				continue
			}
			if set := &w.sets[w.pr.setOf[jb.item]]; set.one == nil {
				set.oneHead(jb.at.geo)
			}
		}
	}
	if err := crew.run(w.write); err != nil {
		return nil, nil, err
	}
	chains := make([]chain, len(w.counts))
	for i, tk := range w.tasks {
		chains[tk.k].join(&w.chains[i])
	}
	groups := w.tallies[0]
	for _, g := range w.tallies[1:] {
		if g != nil {
			groups.merge(g)
		}
	}
	return groups, chains, nil
}

// write is worker's part: it takes tasks until none is left.
func (w *pairWriter) write(worker int) error {
	t := w.t
	sets := slices.Clone(w.sets) // the one-head offsets it works out are its own
	groups := newGroupTally(len(t.PRegs[0].plan.Groups), len(t.DRegs[0].plan.Groups), len(w.pr.items))
	w.tallies[worker] = groups
	keep := w.opt.KeepPairs
	for {
		i := int(w.taken.Add(1)) - 1
		if i >= len(w.tasks) {
			return nil
		}
		tk := &w.tasks[i]
		if tk.makes {
			w.pairs[tk.k] = make([]Pair, w.counts[tk.k])
			w.ready[tk.k].Store(true)
			continue
		}
		if err := canceled(w.opt.Ctx); err != nil {
			return err
		}
		var all []Pair
		if keep {
			// The rank pairs' slices are the first tasks: this one's is
			// made, or being made by another worker.
			for !w.ready[tk.k].Load() {
				runtime.Gosched()
			}
			all = w.pairs[tk.k]
		}
		at := tk.at
		// Tallied in a chain of the worker's own, stored once the task is
		// done: the tasks' chains lie side by side, and a chain written
		// pair by pair where another worker writes its neighbour's
		// bounces their cache line between the cores.
		var own chain
		c := &own
		for _, ji := range w.pr.jobsOf[tk.k][tk.lo:tk.hi] {
			jb := &w.pr.jobs[ji]
			n := w.jobPairs[ji]
			// Pairs the caller keeps none of are tallied, not written.
			var out []Pair
			if keep {
				out = all[at : at+n]
				at += n
			}
			before, empty := c.bytes, c.descs == 0
			var first pairEnd
			if jb.at.attn {
				first = attnPairs(out, &jb.at, &sets[w.pr.setOf[jb.item]], c)
			} else {
				var q *Pair
				if keep {
					q = &out[0]
				}
				first = stateRun(q, &jb.at, t.PPages[jb.at.f.pg].IDs[0], t.DPages[jb.at.f.dg].IDs[0], c)
			}
			if n > 0 {
				if empty {
					c.first = first
				}
				groups.add(jb.at.f.pg, jb.at.f.dg, jb.item, jb.at.kind, n, c.bytes-before)
			}
		}
		w.chains[i] = own
	}
}

// pairEnd is a pair's addresses and length, all NIXL's merging reads.
type pairEnd struct {
	src, dst Loc
	len      int64
}

// chain tallies a run of one rank pair's pairs in the order they are
// posted: its descriptors, bytes, and descriptors left once NIXL merges
// contiguous runs (continues), from its first and last pairs alone; two
// runs' chains join into that of both.
type chain struct {
	descs, merged int
	bytes         int64
	first, last   pairEnd // first is set by the chain's writer
}

// opens says whether a pair that follows the chain's pairs opens a merged
// descriptor: it is the first, or it does not continue the last.
func (c *chain) opens(src, dst Loc, n int64) bool {
	return c.descs == 0 || !continues(c.last.src, c.last.dst, c.last.len, src, dst, n)
}

// push tallies the next pair (but for the chain's first, which its
// writer records: chain.first). Its test is opens written out, which
// keeps push small enough to inline.
func (c *chain) push(src, dst Loc, n int64) {
	if c.descs == 0 || !continues(c.last.src, c.last.dst, c.last.len, src, dst, n) {
		c.merged++
	}
	// Field by field: a composite goes through a temporary on the stack
	// whose 8-byte stores the 16-byte copy then stalls on.
	c.last.src, c.last.dst, c.last.len = src, dst, n
	c.descs++
	c.bytes += n
}

// join appends o's pairs, which follow c's: o's first opens no merged
// descriptor where it continues c's last.
func (c *chain) join(o *chain) {
	switch {
	case o.descs == 0:
		return
	case c.descs == 0:
		*c = *o
		return
	}
	c.merged += o.merged
	if continues(c.last.src, c.last.dst, c.last.len, o.first.src, o.first.dst, o.first.len) {
		c.merged--
	}
	c.descs += o.descs
	c.bytes += o.bytes
	c.last = o.last
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
// page (bsP tokens) or a D page (bsD tokens) ends, with their blocks; n
// is how many runCount says there are (the slice's room).
func (t *Transfer) tokenRuns(span Span, bsP, bsD, pg, dg, n int) tokenRuns {
	out := tokenRuns{runs: make([]tokenRun, 0, n)}
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
		i := len(out.runs)
		if i < cap(out.runs) {
			out.runs = out.runs[:i+1]
		} else { // not if n, runCount's, is right: the caller checks
			out.runs = append(out.runs, tokenRun{})
		}
		r := &out.runs[i] // every field set, in place
		r.lo, r.hi, r.pBlock, r.dBlock = tok, end, int64(pBlock), int64(dBlock)
		r.pRow, r.dRow, r.rows, r.whole = int64(tok-(pEnd-bsP)), int64(tok-(dEnd-bsD)), int64(rows), rows == bsP && rows == bsD
		if r.whole {
			out.whole++
		}
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

// runCount is how many token runs tokenRuns makes of span for P pages of
// bsP tokens and D pages of bsD, and how many of them are whole pages,
// without listing them: a run ends at each page end inside the span, of
// either side (once where both end), and is whole where the two sides'
// pages are one.
func runCount(span Span, bsP, bsD int) (runs, whole int) {
	if span.Len() <= 0 {
		return 0, 0
	}
	inside := func(b int) int { return (span.Hi-1)/b - span.Lo/b } // multiples of b in (Lo, Hi)
	runs = 1 + inside(bsP) + inside(bsD) - inside(lcm(bsP, bsD))
	if bsP == bsD {
		whole = max(0, span.Hi/bsP-ceilDiv(span.Lo, bsP))
	}
	return runs, whole
}

// attnPairs writes the descriptors of one attention segment for one run
// of heads supplied by one P rank, token run by token run: the latent
// (token-major) in one pair per token run; K or V heads in one pair per
// token run where both pages are whole and equal, else one per head (HND
// keeps a head's tokens contiguous only inside a page). out has exactly
// their number, or is nil where the caller keeps no pairs: then they are
// tallied, not written. It returns the job's first pair's ends (a chain
// joined after another's reads them).
func attnPairs(out []Pair, at *jobPlace, set *tokenRuns, c *chain) (first pairEnd) {
	runs := set.runs
	f := at.f
	pIdx, dIdx := f.pIdx, f.dIdx
	pLen, dLen := at.pLen, at.dLen
	pHeads, dHeads := at.pAt, at.dAt // the run's first head in a block
	pRowB, dRowB := at.pRowB, at.dRowB
	pIdxB, dIdxB := at.pIdxB, at.dIdxB
	ch := *c // tallied in a local, stored once at the end
	k := 0
	if at.latent {
		for _, r := range runs {
			src, dst, n := r.pBlock*pLen+pHeads+r.pRow*pRowB, r.dBlock*dLen+dHeads+r.dRow*dRowB, r.rows*dRowB
			if k == 0 {
				first = pairEnd{Loc{pIdx, src}, Loc{dIdx, dst}, n}
			}
			if out != nil {
				f.put(&out[k], src, dst, n, Span{r.lo, r.hi})
			}
			k++
			ch.push(Loc{pIdx, src}, Loc{dIdx, dst}, n) // from registers: reading the pair back stalls
		}
		*c = ch
		return first
	}
	heads := at.heads
	if heads == 1 {
		// One head a run (a rank holds one KV head, as at D TP ≥ the KV
		// heads): one pair per token run, whole or not, at offsets the set
		// works out once, and chained as the set says but for the first.
		h := set.oneHead(at.geo)
		offs := h.offs
		if len(offs) == 0 {
			return first
		}
		o0, last := &offs[0], &offs[len(offs)-1]
		first = pairEnd{Loc{pIdx, pHeads + o0.src}, Loc{dIdx, dHeads + o0.dst}, o0.len}
		if ch.opens(first.src, first.dst, first.len) {
			ch.merged++
		}
		ch.merged += h.breaks
		ch.descs += len(offs)
		ch.bytes += h.bytes
		ch.last = pairEnd{Loc{pIdx, pHeads + last.src}, Loc{dIdx, dHeads + last.dst}, last.len}
		*c = ch
		if out == nil {
			return first
		}
		out = out[:len(offs)]
		for i := range offs {
			o := &offs[i]
			f.put(&out[i], pHeads+o.src, dHeads+o.dst, o.len, Span{o.lo, o.hi})
		}
		return first
	}
	one := f // a head at a time, where runs are not whole
	for _, r := range runs {
		pAt, dAt := r.pBlock*pLen+pHeads, r.dBlock*dLen+dHeads
		tokens := Span{r.lo, r.hi}
		if r.whole {
			if k == 0 {
				first = pairEnd{Loc{pIdx, pAt}, Loc{dIdx, dAt}, heads * dIdxB}
			}
			if out != nil {
				f.put(&out[k], pAt, dAt, heads*dIdxB, tokens)
			}
			k++
			ch.push(Loc{pIdx, pAt}, Loc{dIdx, dAt}, heads*dIdxB)
			continue
		}
		pAt += r.pRow * pRowB
		dAt += r.dRow * dRowB
		length := r.rows * dRowB
		if k == 0 {
			first = pairEnd{Loc{pIdx, pAt}, Loc{dIdx, dAt}, length}
		}
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
			ch.last.src, ch.last.dst = Loc{pIdx, pAt + more*pIdxB}, Loc{dIdx, dAt + more*dIdxB}
		}
		if out == nil {
			k += int(heads)
			continue
		}
		for h := f.lo; h < f.hi; h++ {
			one.lo, one.hi = h, h+1
			one.put(&out[k], pAt, dAt, length, tokens)
			k++
			pAt += pIdxB
			dAt += dIdxB
		}
	}
	*c = ch
	return first
}

// jobFields are the fields every pair of one job shares: the regions, the
// layer and segment, the heads (or channels) and the groups.
type jobFields struct {
	pIdx, dIdx     int
	layer          string
	seg            SegName
	lo, hi, pg, dg int
}

// fields are the fields the pairs of a job of it share: regions pIdx and
// dIdx, segment seg, the run's heads or channels.
func (it gpItem) fields(pIdx, dIdx int, seg SegName, run indexRun) jobFields {
	return jobFields{pIdx: pIdx, dIdx: dIdx, layer: it.name, seg: seg, lo: run.Lo, hi: run.Hi, pg: it.pg, dg: it.dg}
}

// put writes one pair of the job: every field, each once. (Pair's shared
// fields as two embedded blocks copied whole, 13 stores a pair rather
// than 17, generated 4 % faster on one worker with the collector held off,
// runs alternating; not kept: it reshapes Pair for its users, and while
// the collector marks, a block holding the layer's and segment's strings
// takes a runtime call a pair for its write barrier.)
func (f *jobFields) put(q *Pair, src, dst, n int64, tokens Span) {
	q.Src = Loc{f.pIdx, src}
	q.Dst = Loc{f.dIdx, dst}
	q.Len = n
	q.SrcID, q.DstID = -1, -1
	q.Layer, q.Seg = f.layer, f.seg
	q.Lo, q.Hi = f.lo, f.hi
	q.Tokens = tokens
	q.PGroup, q.DGroup = f.pg, f.dg
}

// stateRun writes the descriptor of a state job (one state segment's run
// of channels or heads from one P rank: the final state, in P's block
// pBlock and D's dBlock) to q, unless q is nil, tallies it in c and
// returns it.
func stateRun(q *Pair, at *jobPlace, pBlock, dBlock int, c *chain) pairEnd {
	src, dst, n := int64(pBlock)*at.pLen+at.pAt, int64(dBlock)*at.dLen+at.dAt, at.heads*at.dIdxB
	if q != nil {
		at.f.put(q, src, dst, n, Span{})
	}
	c.push(Loc{at.f.pIdx, src}, Loc{at.f.dIdx, dst}, n) // from registers: reading the pair back stalls
	return pairEnd{Loc{at.f.pIdx, src}, Loc{at.f.dIdx, dst}, n}
}
