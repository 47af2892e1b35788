package xfer

import (
	"fmt"
	"slices"
	"sort"
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

	// Order D's layers by (P group, D group), then by D's layer order.
	type item struct {
		name   string
		pg, dg int
		pos    int
	}
	var items []item
	for i, dl := range t.DRegs[0].Layers {
		pl, _ := t.PRegs[0].Layer(dl.Name)
		items = append(items, item{dl.Name, pl.Group, dl.Group, i})
	}
	sort.SliceStable(items, func(a, b int) bool {
		if items[a].pg != items[b].pg {
			return items[a].pg < items[b].pg
		}
		return items[a].dg < items[b].dg
	})
	for _, it := range items {
		dl, _ := t.DRegs[0].Layer(it.name)
		pl, _ := t.PRegs[0].Layer(it.name)
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

	rps := t.newRankPairs()
	pTP, dTP := len(t.PRegs), len(t.DRegs)
	// Each D rank's pairs go to per-P-rank scratch slices, reused across D
	// ranks, then into rank pairs of their exact size: far less garbage
	// than growing every rank pair's slice (the browser's GC feels it).
	scratch := make([][]Pair, pTP)
	var order []int
	for j, dReg := range t.DRegs {
		for p := range scratch {
			scratch[p] = scratch[p][:0]
		}
		order = order[:0]
		for _, it := range items {
			if err := canceled(opt.Ctx); err != nil {
				return err
			}
			dl, _ := dReg.Layer(it.name)
			for si, ds := range dl.Segments {
				pSeg := func(r int) Segment {
					l, _ := t.PRegs[r].Layer(it.name)
					return l.Segments[si]
				}
				runs, err := indexRuns(ds, pSeg, pTP, dTP, j)
				if err != nil {
					return fmt.Errorf("xfer: layer %s %s on D rank %d: %w", it.name, ds.Name, j, err)
				}
				for _, run := range runs {
					buf := scratch[run.Rank]
					if len(buf) == 0 && !slices.Contains(order, run.Rank) {
						order = append(order, run.Rank)
					}
					pl, _ := t.PRegs[run.Rank].Layer(it.name)
					if ds.IsAttention() {
						buf = t.attnRuns(buf, it.name, pl, dl, t.PRegs[run.Rank], dReg, si, run, it.pg, it.dg)
					} else {
						buf = append(buf, t.stateRun(it.name, pl, dl, t.PRegs[run.Rank], dReg, si, run, it.pg, it.dg))
					}
					scratch[run.Rank] = buf
				}
			}
		}
		for _, p := range order {
			rp := rps.get(p, j)
			rp.Pairs = append(make([]Pair, 0, len(rp.Pairs)+len(scratch[p])), rp.Pairs...)
			rp.Pairs = append(rp.Pairs, scratch[p]...)
		}
	}
	rps.store()
	return nil
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

// attnRuns appends the descriptors of one attention segment for one run of
// heads supplied by one P rank.
func (t *Transfer) attnRuns(out []Pair, name string, pl, dl *LayerReg, pReg, dReg *Registration, si int, run indexRun, pg, dg int) []Pair {
	ps, ds := pl.Segments[si], dl.Segments[si]
	pr, dr := pReg.Regions[ps.Region], dReg.Regions[ds.Region]
	bsP, bsD := pl.BlockSize, dl.BlockSize
	span := t.DNeed[name]
	tokenMajor := ds.Name == SegLatent
	for tok := span.Lo; tok < span.Hi; {
		pPage, dPage := tok/bsP, tok/bsD
		end := min(span.Hi, (pPage+1)*bsP, (dPage+1)*bsD)
		pBlock, _ := t.PPages[pg].Block(pPage)
		dBlock, _ := t.DPages[dg].Block(dPage)
		pBase := int64(pBlock)*pr.BlockLen + ps.Offset
		dBase := int64(dBlock)*dr.BlockLen + ds.Offset
		pRow, dRow, rows := tok-pPage*bsP, tok-dPage*bsD, end-tok
		emit := func(lo, hi int, pOff, dOff, length int64) {
			out = append(out, Pair{
				Src: Loc{pr.Index, pBase + pOff}, Dst: Loc{dr.Index, dBase + dOff}, Len: length, SrcID: -1, DstID: -1,
				Layer: name, Seg: ds.Name, Lo: lo, Hi: hi, Tokens: Span{tok, end}, PGroup: pg, DGroup: dg,
			})
		}
		switch {
		case tokenMajor:
			emit(run.Lo, run.Hi, int64(pRow)*ps.RowBytes, int64(dRow)*ds.RowBytes, int64(rows)*ds.RowBytes)
		case rows == bsP && rows == bsD:
			emit(run.Lo, run.Hi, int64(run.Lo-ps.Lo)*ps.IndexBytes, int64(run.Lo-ds.Lo)*ds.IndexBytes, int64(run.Hi-run.Lo)*ds.IndexBytes)
		default:
			for h := run.Lo; h < run.Hi; h++ {
				emit(h, h+1, int64(h-ps.Lo)*ps.IndexBytes+int64(pRow)*ps.RowBytes, int64(h-ds.Lo)*ds.IndexBytes+int64(dRow)*ds.RowBytes, int64(rows)*ds.RowBytes)
			}
		}
		tok = end
	}
	return out
}

// stateRun is the descriptor of one state segment's run of channels (or
// heads) from one P rank: the final state, one block on each side.
func (t *Transfer) stateRun(name string, pl, dl *LayerReg, pReg, dReg *Registration, si int, run indexRun, pg, dg int) Pair {
	ps, ds := pl.Segments[si], dl.Segments[si]
	pr, dr := pReg.Regions[ps.Region], dReg.Regions[ds.Region]
	pBlock, dBlock := t.PPages[pg].IDs[0], t.DPages[dg].IDs[0]
	return Pair{
		Src:   Loc{pr.Index, int64(pBlock)*pr.BlockLen + ps.Offset + int64(run.Lo-ps.Lo)*ps.IndexBytes},
		Dst:   Loc{dr.Index, int64(dBlock)*dr.BlockLen + ds.Offset + int64(run.Lo-ds.Lo)*ds.IndexBytes},
		Len:   int64(run.Hi-run.Lo) * ds.IndexBytes,
		SrcID: -1, DstID: -1, Layer: name, Seg: ds.Name, Lo: run.Lo, Hi: run.Hi, PGroup: pg, DGroup: dg,
	}
}
