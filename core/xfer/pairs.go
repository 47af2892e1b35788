package xfer

import (
	"fmt"
	"runtime"
	"sync/atomic"
)

// This file is kvscope's group-pair path: every D layer takes its tokens
// from the same layer on P, whatever group, slot or block size each side
// gave it. Descriptors follow token runs: a run ends where a P page or a D
// page ends, so pages of different token counts need one descriptor per
// head per run (HND keeps a head's tokens contiguous only inside a page).
// Where both pages are whole and equal, one descriptor moves every head a P
// rank supplies.
//
// The path in steps, a file each: pairing.go lays out two sides'
// registrations once per deployment (the layers in the order their pairs
// are written, the sets of layers that share token runs, and the jobs: a
// D rank's layer segment's run of the P ranks that supply it); runs.go
// lists a request's token runs and says how many pairs a job writes over
// them (pairsPerRun) and where (runPair); schedule.go cuts the jobs into
// tasks for as many workers as the transfer is worth; kernels.go writes
// a job's pairs; tally.go holds NIXL's merge rule and the tallies every
// path totals its pairs with.

// groupPairPath builds the per-layer descriptor pairs.
func (t *Transfer) groupPairPath(opt Options) error {
	pp, dp := t.PRegs[0].plan, t.DRegs[0].plan
	n, hit := t.Request.PromptTokens, t.Request.PrefixHitTokens

	pr := opt.pairing
	if pr == nil {
		var err error
		if pr, err = newPairing(t.PRegs, t.DRegs, opt.Output != CountPairs); err != nil {
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

// groupPairs counts every descriptor pair and then writes or tallies
// them: each set's token runs are listed once (listRuns), each job's pairs
// counted from them (pairsOver); then each rank pair's pairs are written
// into a slice of exactly their number, or, where the caller keeps none,
// tallied without being written (pairWriter). Nothing grows and nothing
// is copied.
func (t *Transfer) groupPairs(opt Options, pr *pairing, pKept, dNeed []Span) error {
	pTP, dTP := len(t.PRegs), len(t.DRegs)
	t.listPages(opt, pKept, dNeed)
	sets := t.listRuns(pr, dNeed)
	setOf := func(item int) *tokenRuns {
		if s := pr.setOf[item]; s >= 0 {
			return &sets[s]
		}
		return nil
	}
	counts := make([]int, pTP*dTP)
	if opt.Output == CountPairs { // the jobs walked, not listed
		order, err := pr.eachRun(pTP, dTP, func(j, i, _ int, ds *Segment, run indexRun) {
			counts[run.Rank*dTP+j] += pairsOver(setOf(i), ds.IsAttention(), ds.Name == SegLatent, run.Hi-run.Lo)
		})
		if err != nil {
			return err
		}
		t.countedRankPairs(order, counts)
		return nil
	}
	jobPairs := make([]int, len(pr.jobs))
	total := 0
	for ji := range pr.jobs {
		jb := &pr.jobs[ji]
		n := pairsOver(setOf(jb.item), jb.at.attn, jb.at.shape.latent, int(jb.at.shape.heads))
		jobPairs[ji] = n
		counts[jb.run.Rank*dTP+jb.d] += n
		total += n
	}
	t.countedRankPairs(pr.order, counts)
	// As many workers as a transfer this long is worth, no more than there
	// are tasks of writing. Pairs only tallied take one: a few µs a
	// thousand pairs, less than a goroutine's start.
	workers := 1
	if opt.Output == KeepPairs && total >= parallelPairs {
		workers = min(runtime.GOMAXPROCS(0), total/taskPairs)
	}
	w := &pairWriter{t: t, opt: opt, keep: opt.Output == KeepPairs, pr: pr, jobPairs: jobPairs, sets: sets, dTP: dTP, counts: counts,
		pairs: make([][]Pair, pTP*dTP), ready: make([]atomic.Bool, pTP*dTP)}
	groups, tallies, err := w.writeAll(workers)
	if err != nil {
		return err
	}
	for i := range t.RankPairs {
		rp := &t.RankPairs[i]
		k := rp.P*dTP + rp.D
		c := tallies[k]
		rp.Descs, rp.Merged, rp.Bytes = c.descs, c.merged, c.bytes
		if w.keep {
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
