package oracle

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/kvscope/kvscope/core/xfer"
)

// This file is Check's replay. P's bytes are a function of where they lie
// (pBytes), so a check holds no P page: each piece of a pair writes the
// bytes its P range holds straight into its D page. D's pages are
// independent of one another (a pair writes D and reads only P), so the
// check builds and reads back one D page at a time, applying the pieces
// that land in it in the pairs' order, while the page is in cache.

// piece is the part of one pair that lies in one P page and one D page.
type piece struct {
	pRank  int
	src    pageKey // P's page
	srcOff int64   // within P's page
	dPage  int     // D's page, by number
	dstOff int64   // within D's page
	n      int64
}

// scratch is a check's working memory, reused by the next check (sweeps
// run thousands).
type scratch struct {
	dBlockLen []int64 // by D page number
	flat      []piece // in the pairs' order
	start     []int32 // D page d's pieces: byPage[start[d]:start[d+1]]
	byPage    []int32 // indices into flat
	next      []int32
	keys      []pageKey
	page      []byte
	expect    []byte
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// check replays and verifies the transfer.
func (o *run) check() (*Result, error) {
	x := o.x
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	o.tables()
	// The pages a Prover would materialise, bounded the same way (D's
	// numbers index the pieces), and every pair in order: inside its
	// regions, or the verdict is wrong (once the bound holds); then its
	// pieces, in the pairs' order.
	res := &Result{Verdict: Exact}
	pairs := 0
	for _, rp := range x.RankPairs {
		pairs += len(rp.Pairs)
	}
	flat := slices.Grow(sc.flat[:0], pairs) // most pairs lie in one page on each side
	var wrong *Result
	var last *xfer.RankPair
	sc.dBlockLen = sc.dBlockLen[:0]
	if err := o.number(func(reg *xfer.Registration, k pageKey, isP bool, _ int) error {
		bl := reg.Regions[k.region].BlockLen
		if !isP {
			sc.dBlockLen = append(sc.dBlockLen, bl) // numbered len(sc.dBlockLen)
		}
		return o.bound(bl)
	}, func(rp *xfer.RankPair, p *xfer.Pair) {
		if rp != last {
			res.Pairs += len(rp.Pairs)
			last = rp
		}
		if wrong != nil {
			return
		}
		res.Bytes += p.Len
		if err := o.inside(rp.P, rp.D, p); err != nil {
			wrong = &Result{Verdict: Wrong, Mismatch: &Mismatch{DRank: rp.D, Layer: p.Layer, Segment: string(p.Seg), Token: -1, What: err.Error()}, Pairs: res.Pairs}
			return
		}
		flat = o.pieces(flat, rp.P, rp.D, p)
	}); err != nil {
		return nil, err
	}
	if wrong != nil {
		return wrong, nil
	}
	dPages := len(sc.dBlockLen)
	sc.flat = flat
	start := resize(sc.start, dPages+1)
	clear(start)
	for i := range flat {
		start[flat[i].dPage+1]++
	}
	for d := range dPages {
		start[d+1] += start[d]
	}
	byPage, next := resize(sc.byPage, len(flat)), resize(sc.next, dPages)
	copy(next, start)
	for i := range flat {
		d := flat[i].dPage
		byPage[next[d]] = int32(i)
		next[d]++
	}
	sc.start, sc.byPage, sc.next = start, byPage, next
	// No D byte written twice (overlap.go): pieces end at page edges, so
	// each page is looked at alone, in one pass where its pieces come in
	// order; the verdict, rare, is the transfer-wide walk's.
	for d := range dPages {
		if writesTwice(flat, byPage[start[d]:start[d+1]]) {
			if twice := overlapVerdict(x); twice != nil {
				return twice, nil
			}
		}
	}

	// Each D page: the sentinel, its pieces in order, then read back.
	replay := func(j int, k pageKey) []byte {
		d, _ := o.d[j].get(k)
		page := resize(sc.page, int(sc.dBlockLen[d]))
		sc.page = page
		in := byPage[start[d]:start[d+1]]
		sentinel(page, flat, in)
		for _, i := range in {
			pc := &flat[i]
			o.pBytes(x.PRegs[pc.pRank], pc.src, pc.srcOff, page[pc.dstOff:pc.dstOff+pc.n])
		}
		return page
	}
	o.keys, o.expect = sc.keys, sc.expect
	o.verifyAll(res, replay)
	sc.keys, sc.expect = o.keys, o.expect
	if err := o.stopped(); err != nil {
		return nil, err
	}
	return res, nil
}

// resize is b with length n, reallocated only when too short.
func resize[E any](b []E, n int) []E {
	if cap(b) < n {
		return make([]E, n)
	}
	return b[:n]
}

// sentinel fills a D page with the sentinel where none of its pieces
// (flat[i] for i in in) writes: all of it when they overlap or come out of
// order.
func sentinel(page []byte, flat []piece, in []int32) {
	at := int64(0)
	for _, i := range in {
		if flat[i].dstOff < at {
			fill(page, Sentinel)
			return
		}
		at = flat[i].dstOff + flat[i].n
	}
	at = 0
	for _, i := range in {
		fill(page[at:flat[i].dstOff], Sentinel)
		at = flat[i].dstOff + flat[i].n
	}
	fill(page[at:], Sentinel)
}

// inside reports a pair that names a region outside its registration or
// runs outside its region.
func (o *run) inside(pRank, dRank int, p *xfer.Pair) error {
	pReg, dReg := o.x.PRegs[pRank], o.x.DRegs[dRank]
	if p.Src.Region < 0 || p.Src.Region >= len(pReg.Regions) || p.Dst.Region < 0 || p.Dst.Region >= len(dReg.Regions) {
		return fmt.Errorf("descriptor names a region outside the registration (P %d, D %d)", p.Src.Region, p.Dst.Region)
	}
	pr, dr := &pReg.Regions[p.Src.Region], &dReg.Regions[p.Dst.Region]
	if p.Src.Offset < 0 || p.Dst.Offset < 0 || p.Src.Offset+p.Len > pr.BlockLen*pr.NumBlocks || p.Dst.Offset+p.Len > dr.BlockLen*dr.NumBlocks {
		return fmt.Errorf("descriptor of %d B runs outside its region (P offset %d, D offset %d)", p.Len, p.Src.Offset, p.Dst.Offset)
	}
	return nil
}

// pieces appends a pair's pieces, split where a P page or a D page ends,
// to out; the pair lies inside its regions.
func (o *run) pieces(out []piece, pRank, dRank int, p *xfer.Pair) []piece {
	pbl, dbl := o.x.PRegs[pRank].Regions[p.Src.Region].BlockLen, o.x.DRegs[dRank].Regions[p.Dst.Region].BlockLen
	dPages := &o.d[dRank]
	src, dst, left := p.Src.Offset, p.Dst.Offset, p.Len
	for left > 0 {
		si, di := src%pbl, dst%dbl
		n := min(left, pbl-si, dbl-di)
		d, _ := dPages.get(pageKey{p.Dst.Region, int(dst / dbl)})
		out = append(out, piece{pRank: pRank, src: pageKey{p.Src.Region, int(src / pbl)}, srcOff: si, dPage: d, dstOff: di, n: n})
		src, dst, left = src+n, dst+n, left-n
	}
	return out
}

// writesTwice reports whether two of one D page's pieces (flat[i] for i
// in in) write a byte in common.
func writesTwice(flat []piece, in []int32) bool {
	end := int64(0)
	for _, i := range in {
		if flat[i].dstOff < end {
			by := slices.Clone(in)
			slices.SortFunc(by, func(a, b int32) int { return cmp.Compare(flat[a].dstOff, flat[b].dstOff) })
			for k := 1; k < len(by); k++ {
				if p := &flat[by[k-1]]; flat[by[k]].dstOff < p.dstOff+p.n {
					return true
				}
			}
			return false
		}
		end = flat[i].dstOff + flat[i].n
	}
	return false
}
