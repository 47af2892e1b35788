package xfer

// This file is the group-pair path's kernels: the loops that write one
// job's pairs, and the tallies of what they write. A pair's fields are
// written one by one, in place (a composite literal goes through a stack
// temporary), and its addresses come from runPair, the one statement of
// where a job's pairs lie; an attention job's tally comes from its set's,
// so pairs only tallied are never written.

// attnPairs writes the descriptors of one attention segment for one run
// of heads supplied by one P rank (the job placed at) over its set's token
// runs: per run, pairsPerRun pairs from runPair. out has exactly their
// number (pairsOver).
func attnPairs(out []Pair, at *jobPlace, set *tokenRuns) {
	f := at.f
	sh := &at.shape
	pAt, dAt := at.pAt, at.dAt // the job's first head in a block
	if sh.heads == 1 && !sh.latent {
		// One head a run (a rank holds one KV head, as at D TP ≥ the KV
		// heads): one pair per token run, at offsets the set works out
		// once per shape.
		offs := set.at(sh).offs
		out = out[:len(offs)]
		for i := range offs {
			o := &offs[i]
			f.put(&out[i], pAt+o.src, dAt+o.dst, o.len, Span{o.lo, o.hi})
		}
		return
	}
	// A head at a time where a run's pages are not whole, its strides in
	// locals (the pairs' stores may alias sh).
	one := f
	pIdxB, dIdxB := sh.pIdxB, sh.dIdxB
	k := 0
	for i := range set.runs {
		r := &set.runs[i]
		src, dst, n, count := sh.runPair(r)
		src, dst = pAt+src, dAt+dst
		tokens := Span{r.lo, r.hi}
		if count == 1 {
			f.put(&out[k], src, dst, n, tokens)
			k++
			continue
		}
		for h := f.lo; h < f.hi; h++ {
			one.lo, one.hi = h, h+1
			one.put(&out[k], src, dst, n, tokens)
			k++
			src += pIdxB
			dst += dIdxB
		}
	}
}

// attnTally is the tally of the pairs attnPairs writes for the job placed
// at over set: the set's tally under the job's shape, moved to the job's
// regions and first head.
func attnTally(at *jobPlace, set *tokenRuns) tally {
	return set.at(&at.shape).tally.moved(at.f.pIdx, at.pAt, at.f.dIdx, at.dAt)
}

// stateRun writes the descriptor of a state job (one state segment's run
// of channels or heads from one P rank: the final state, in P's block
// pBlock and D's dBlock) to q, unless q is nil, and tallies it in c.
func stateRun(q *Pair, at *jobPlace, pBlock, dBlock int, c *tally) {
	sh := &at.shape
	src, dst, n := int64(pBlock)*sh.pLen+at.pAt, int64(dBlock)*sh.dLen+at.dAt, sh.heads*sh.dIdxB
	if q != nil {
		at.f.put(q, src, dst, n, Span{})
	}
	c.add(Loc{at.f.pIdx, src}, Loc{at.f.dIdx, dst}, n)
}

// put writes one pair of the job: every field, each once.
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
