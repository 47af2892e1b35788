package oracle

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/kvscope/kvscope/core/xfer"
)

// verify reads back every page in play of one D rank, by region and
// block.
func (o *run) verify(j int, pageOf func(j int, k pageKey) []byte) (*Mismatch, int64) {
	reg := o.x.DRegs[j]
	var checked int64
	o.keys = o.d[j].keys(o.keys)
	for i, k := range o.keys {
		if i%256 == 0 && o.stopped() != nil {
			return nil, checked // CheckContext reports it
		}
		page := pageOf(j, k)
		checked += int64(len(page))
		if mm := o.verifyPage(j, reg, k, page); mm != nil {
			mm.DRank, mm.Region, mm.Block = j, k.region, k.block
			return mm, checked
		}
	}
	return nil, checked
}

// span is a byte range of a block.
type span struct{ lo, hi int64 }

func (o *run) verifyPage(j int, reg *xfer.Registration, k pageKey, page []byte) *Mismatch {
	var la layerAt
	own, ok := o.dOwn.of(k.block)
	if ok {
		la = o.dLayers[j].layer(reg, k.region, own)
	}
	l := la.l
	var spans [4]span
	covered := spans[:0]
	name := ""
	if l != nil {
		name = l.Name
		for si := range l.Segments {
			s := &l.Segments[si]
			if s.Region != k.region {
				continue
			}
			covered = append(covered, span{s.Offset, s.Offset + s.Bytes()})
			if s.RowBytes <= 0 {
				continue // no rows
			}
			ix, token := index{la.lid, segID(s.Name), s.Lo}, firstToken(l, s, own.page)
			rows := int(s.IndexBytes / s.RowBytes)
			for ; ix.idx < s.Hi; ix.idx++ {
				off := s.Offset + int64(ix.idx-s.Lo)*s.IndexBytes
				slab := page[off : off+s.IndexBytes]
				if n := o.matched(slab, int(s.RowBytes), ix, token); n < rows {
					if mm := o.slabMismatch(l, s, ix, token, slab, o.expect[:len(slab)], n); mm != nil {
						return mm
					}
				}
			}
		}
	}
	slices.SortFunc(covered, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	at := int64(0)
	for _, c := range covered {
		if c.lo > at {
			if mm := foreign(name, page, at, c.lo); mm != nil {
				return mm
			}
		}
		at = max(at, c.hi)
	}
	if at < int64(len(page)) {
		return foreign(name, page, at, int64(len(page)))
	}
	return nil
}

// slabMismatch finds the first wrong row, from row from on, of an index's
// slab that does not hold its rows (want): rows D does not need may be
// untouched.
func (o *run) slabMismatch(l *xfer.LayerReg, s *xfer.Segment, ix index, token0 int, slab, want []byte, from int) *Mismatch {
	attention := s.IsAttention()
	need := xfer.Need(l.Kind, l.Window, l.Chunk, o.x.Request.PromptTokens, o.x.Request.PrefixHitTokens)
	for r := int64(from); r*s.RowBytes < s.IndexBytes; r++ {
		row, w := slab[r*s.RowBytes:(r+1)*s.RowBytes], want[r*s.RowBytes:(r+1)*s.RowBytes]
		if bytes.Equal(row, w) {
			continue
		}
		token := -1
		if attention {
			token = token0 + int(r)
		}
		needed := !attention || need.Lo <= token && token < need.Hi
		if all(row, Sentinel) && !needed {
			continue
		}
		what := "holds bytes of another place"
		if all(row, Sentinel) {
			what = "needed but never written"
		} else if all(row, Padding) {
			what = "holds padding"
		}
		return &Mismatch{Layer: l.Name, Segment: string(s.Name), Index: ix.idx, Token: token, Expected: short(w), Found: short(row), What: what}
	}
	return nil
}

// foreign reports a byte of page[lo:hi], bytes no row of the block's layer
// covers, that is neither the sentinel nor padding.
func foreign(layer string, page []byte, lo, hi int64) *Mismatch {
	if i := firstForeign(page[lo:hi]); i >= 0 {
		return &Mismatch{Layer: layer, Segment: "none", Index: -1, Token: -1, Expected: "sentinel or padding", Found: short(page[lo+int64(i) : min(hi, lo+int64(i)+8)]),
			What: fmt.Sprintf("byte %d of the block belongs to no row of this layer but was written", lo+int64(i))}
	}
	return nil
}

// firstForeign returns the index of the first byte that is neither the
// sentinel nor padding, or -1.
func firstForeign(b []byte) int {
	for at := 0; at < len(b); {
		n := min(len(b)-at, len(sentinelSlab))
		chunk := b[at : at+n]
		if bytes.Equal(chunk, sentinelSlab[:n]) || bytes.Equal(chunk, paddingSlab[:n]) {
			at += n
			continue
		}
		for i, x := range chunk {
			if x != Sentinel && x != Padding {
				return at + i
			}
		}
		at += n
	}
	return -1
}

var sentinelSlab, paddingSlab = bytes.Repeat([]byte{Sentinel}, 4096), bytes.Repeat([]byte{Padding}, 4096)

func all(b []byte, v byte) bool {
	slab := sentinelSlab
	if v == Padding {
		slab = paddingSlab
	}
	for len(b) > 0 {
		n := min(len(b), len(slab))
		if !bytes.Equal(b[:n], slab[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func short(b []byte) string {
	if len(b) > 8 {
		b = b[:8]
	}
	return hex.EncodeToString(b)
}
