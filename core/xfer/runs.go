package xfer

// This file is the group-pair path's token runs: D's span of a layer
// split where a P page or a D page ends, so that each run lies inside one
// page on each side. A run's pairs follow from its pages and rows alone;
// how many pairs a job writes follows from how many runs its set has.

// tokenRun is one run of tokens inside one P page and one D page, with
// the blocks that hold those pages and the rows the run starts at.
type tokenRun struct {
	lo, hi         int   // token range
	pBlock, dBlock int64 // block ids
	pRow, dRow     int64 // first row in each page
	rows           int64
	whole          bool // both pages whole and equal: one pair moves every head
}

// tokenRuns are the token runs of one set of layers (one (P group, D
// group) pair of block sizes) over D's span, and how many of them are
// whole pages.
type tokenRuns struct {
	runs  []tokenRun
	whole int
	last  *runsAt // the runs under the shape last asked for (at)
}

// listRuns lists the token runs of every set of pr's layers for the
// request's pages (listPages) and D's spans: every count of pairs and
// every pair is read from these lists.
func (t *Transfer) listRuns(pr *pairing, dNeed []Span) []tokenRuns {
	sets := make([]tokenRuns, len(pr.setItem))
	for s, i := range pr.setItem {
		it := pr.items[i]
		sets[s] = t.tokenRuns(dNeed[it.dg], pr.pLayers[i].BlockSize, pr.dLayers[i].BlockSize, it.pg, it.dg)
	}
	return sets
}

// tokenRuns splits span, D's span of one set's layers, into runs that end
// where a P page (bsP tokens, of P group pg) or a D page (bsD tokens, of D
// group dg) ends, with their blocks.
func (t *Transfer) tokenRuns(span Span, bsP, bsD, pg, dg int) tokenRuns {
	var out tokenRuns
	if span.Len() <= 0 {
		return out
	}
	n, _ := runCount(span, bsP, bsD)
	out.runs = make([]tokenRun, 0, n) // the room runCount says the runs take
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
		} else { // only if runCount were short (TestRunCount holds it exact)
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
// pages are one. tokenRuns sizes its list by it.
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

// pairsOver is how many pairs a job writes over its set's token runs (set
// is nil for a state job): one for a state segment, else pairsPerRun for
// each run.
func pairsOver(set *tokenRuns, attn, latent bool, heads int) int {
	if !attn {
		return 1
	}
	whole, split := set.whole, len(set.runs)-set.whole
	return whole*pairsPerRun(latent, true, heads) + split*pairsPerRun(latent, false, heads)
}

// pairsPerRun is how many pairs an attention job of heads heads (or
// channels) writes for one token run: one for the latent (token-major) and
// where both pages are whole and equal (one pair moves every head), else
// one per head (HND keeps a head's tokens contiguous only inside a page).
func pairsPerRun(latent, whole bool, heads int) int {
	if latent || whole {
		return 1
	}
	return heads
}

// shape is what an attention job's pairs over its set's token runs
// depend on, but for where its first head lies in a block: each side's
// block, token row and head (or channel) bytes, its heads, and whether it
// is the latent.
type shape struct {
	pLen, pRowB, pIdxB int64
	dLen, dRowB, dIdxB int64
	heads              int64
	latent             bool
}

// runPair is the first pair a job of shape sh writes for token run r, its
// first head at offset 0 in a block on both sides, and how many it writes
// for the run (pairsPerRun): each next one a head on, pIdxB bytes on P and
// dIdxB on D.
func (sh *shape) runPair(r *tokenRun) (src, dst, n int64, count int) {
	src, dst = r.pBlock*sh.pLen+r.pRow*sh.pRowB, r.dBlock*sh.dLen+r.dRow*sh.dRowB
	n = r.rows * sh.dRowB
	if r.whole && !sh.latent {
		n = sh.heads * sh.dIdxB // every head of both pages (a whole run starts a page: rows 0)
	}
	return src, dst, n, pairsPerRun(sh.latent, r.whole, int(sh.heads))
}

// runsAt is a set's token runs under one shape: the tally of a job's pairs
// over them, its first head at offset 0 in region 0 on both sides (a job
// moves it to its own place: tally.moved), and for a one-head shape each
// run's pair (runOff), which the one-head kernel writes from. Moving a
// job's heads within a block moves both sides of every pair alike, so one
// tally serves every job of the shape.
type runsAt struct {
	shape shape
	tally tally
	offs  []runOff // one-head shapes only
}

// runOff is one token run's pair under a one-head shape: its offsets from
// the head's place in a block on each side, its length and its tokens.
type runOff struct {
	src, dst, len int64
	lo, hi        int
}

// at is the set's runs under shape sh, worked out on first use (the last
// shape asked for is kept: a set's layers' K and V share one, as a rule).
func (s *tokenRuns) at(sh *shape) *runsAt {
	if s.last != nil && s.last.shape == *sh {
		return s.last
	}
	ra := &runsAt{shape: *sh}
	g := *sh // a copy the stores below cannot alias
	oneHead := g.heads == 1 && !g.latent
	if oneHead {
		ra.offs = make([]runOff, len(s.runs))
	}
	var c tally // in a local, stored once at the end
	for i := range s.runs {
		r := &s.runs[i]
		src, dst, n, count := g.runPair(r)
		switch {
		case count > 1:
			c.addStrided(Loc{Offset: src}, Loc{Offset: dst}, n, count, g.pIdxB, g.dIdxB)
		case i == 0:
			c.open(Loc{Offset: src}, Loc{Offset: dst}, n)
		default: // most of a request's tallying, inlined
			c.extend(Loc{Offset: src}, Loc{Offset: dst}, n)
		}
		if oneHead {
			o := &ra.offs[i] // written in place, field by field
			o.src, o.dst, o.len, o.lo, o.hi = src, dst, n, r.lo, r.hi
		}
	}
	ra.tally = c
	s.last = ra
	return ra
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
