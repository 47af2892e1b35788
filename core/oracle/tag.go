package oracle

import (
	"bytes"
	"encoding/binary"

	"github.com/kvscope/kvscope/core/xfer"
)

// This file is the pattern P's pages hold: every row of every index of
// every segment is a tag of its (layer, segment, index, token)
// coordinates, different at every 8-byte word; bytes that belong to no
// layer are padding. pBytes writes any byte range of a P page, so that a
// check can move P's bytes without holding P's pages.

// firstToken is the token of a segment's first row in one page of a
// layer: attention rows count tokens up from it; state rows have none.
func firstToken(l *xfer.LayerReg, s *xfer.Segment, page int) int {
	if s.IsAttention() {
		return page * l.BlockSize
	}
	return 0
}

func segID(n xfer.SegName) uint64 {
	for i, s := range []xfer.SegName{xfer.SegK, xfer.SegV, xfer.SegLatent, xfer.SegConvQ, xfer.SegConvK, xfer.SegConvV,
		xfer.SegConvX, xfer.SegConvB, xfer.SegConvC, xfer.SegSSM} {
		if s == n {
			return uint64(i + 1)
		}
	}
	return 0
}

// rowKey packs a row's coordinates; tag expands it into bytes that differ
// for every coordinate and every byte position.
func rowKey(layer, seg uint64, index, token int) uint64 {
	return layer<<52 ^ seg<<46 ^ uint64(index)<<28 ^ uint64(token)
}

func mix(z uint64) uint64 {
	z += 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// tag fills a row with its coordinates' bytes: a strong hash of the
// coordinates, stepped by an odd constant per 8-byte word (word i holds
// mix(key) + i*tagStep, little-endian; a short last word is cut), so no
// two rows and no two positions in a row share bytes.
func tag(row []byte, key uint64) { tagRows(row, len(row), key, 0) }

// tagStep advances the tag from one 8-byte word of a row to the next;
// tagStepN is N steps (mod 2^64).
const (
	tagStep  uint64 = 0xD1B54A32D192ED03
	tagStep2 uint64 = 0xa36a9465a325da06
	tagStep3 uint64 = 0x751fde9874b8c709
	tagStep4 uint64 = 0x46d528cb464bb40c
	tagStep5 uint64 = 0x188a72fe17dea10f
	tagStep6 uint64 = 0xea3fbd30e9718e12
	tagStep7 uint64 = 0xbbf50763bb047b15
	tagStep8 uint64 = 0x8daa51968c976818
)

// tagRows fills b with rows of rowBytes, row r holding tag(key +
// r*keyStep): a head's tokens (keyStep 1) or one state index.
func tagRows(b []byte, rowBytes int, key, keyStep uint64) {
	if rowBytes <= 0 {
		return
	}
	for len(b) >= rowBytes {
		row := b[:rowBytes]
		b = b[rowBytes:]
		h := mix(key)
		key += keyStep
		for len(row) >= 64 {
			w := row[:64]
			binary.LittleEndian.PutUint64(w[56:64], h+tagStep7)
			binary.LittleEndian.PutUint64(w[0:8], h)
			binary.LittleEndian.PutUint64(w[8:16], h+tagStep)
			binary.LittleEndian.PutUint64(w[16:24], h+tagStep2)
			binary.LittleEndian.PutUint64(w[24:32], h+tagStep3)
			binary.LittleEndian.PutUint64(w[32:40], h+tagStep4)
			binary.LittleEndian.PutUint64(w[40:48], h+tagStep5)
			binary.LittleEndian.PutUint64(w[48:56], h+tagStep6)
			h += tagStep8
			row = row[64:]
		}
		for len(row) >= 8 {
			binary.LittleEndian.PutUint64(row, h)
			h += tagStep
			row = row[8:]
		}
		if len(row) > 0 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], h)
			copy(row, w[:])
		}
	}
}

// matchedRows is how many of b's leading rows of rowBytes hold their tags,
// row r tag(key + r*keyStep), as tagRows writes them.
func matchedRows(b []byte, rowBytes int, key, keyStep uint64) int {
	if rowBytes <= 0 {
		return 0
	}
	n := 0
	for ; len(b) >= rowBytes; n++ {
		row := b[:rowBytes]
		b = b[rowBytes:]
		h := mix(key)
		key += keyStep
		for len(row) >= 64 {
			w := row[:64]
			x := binary.LittleEndian.Uint64(w[56:64]) ^ (h + tagStep7)
			x |= binary.LittleEndian.Uint64(w[0:8]) ^ h
			x |= binary.LittleEndian.Uint64(w[8:16]) ^ (h + tagStep)
			x |= binary.LittleEndian.Uint64(w[16:24]) ^ (h + tagStep2)
			x |= binary.LittleEndian.Uint64(w[24:32]) ^ (h + tagStep3)
			x |= binary.LittleEndian.Uint64(w[32:40]) ^ (h + tagStep4)
			x |= binary.LittleEndian.Uint64(w[40:48]) ^ (h + tagStep5)
			x |= binary.LittleEndian.Uint64(w[48:56]) ^ (h + tagStep6)
			if x != 0 {
				return n
			}
			h += tagStep8
			row = row[64:]
		}
		for len(row) >= 8 {
			if binary.LittleEndian.Uint64(row) != h {
				return n
			}
			h += tagStep
			row = row[8:]
		}
		if len(row) > 0 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], h)
			if !bytes.Equal(row, w[:len(row)]) {
				return n
			}
		}
	}
	return n
}

// keyStep is how a segment's row keys advance from one row to the next:
// attention rows are consecutive tokens; a state index is one row.
func keyStep(attention bool) uint64 {
	if attention {
		return 1
	}
	return 0
}

// pBytes writes bytes [lo, lo+len(dst)) of a P page into dst: the tags of
// the layer that owns the block in this region's tensor, segment by
// segment, and padding everywhere else: a whole page for an agent's
// memory, a pair's range for a check.
func (o *run) pBytes(reg *xfer.Registration, k pageKey, lo int64, dst []byte) {
	var la layerAt
	own, ok := o.pOwn.of(k.block)
	if ok {
		la = o.pLayers[reg.Rank].layer(reg, k.region, own)
	}
	l := la.l
	if l == nil {
		fill(dst, Padding)
		return
	}
	hi := lo + int64(len(dst))
	at := lo                     // the next byte of the page to write, at dst[at-lo]
	for si := range l.Segments { // segments are laid out in offset order
		s := &l.Segments[si]
		if s.Region != k.region {
			continue
		}
		end := s.Offset + s.Bytes()
		if at >= end {
			continue
		}
		if at < s.Offset {
			fill(dst[at-lo:min(hi, s.Offset)-lo], Padding)
			at = min(hi, s.Offset)
		}
		if at >= hi {
			return
		}
		if at >= end {
			continue // an empty segment
		}
		// From the row the range starts in: runs of whole rows of one
		// index at a time; a row the range cuts through its scratch copy.
		rel := at - s.Offset
		idx := s.Lo + int(rel/s.IndexBytes)
		r := (rel % s.IndexBytes) / s.RowBytes
		rows := s.IndexBytes / s.RowBytes // per index
		seg, token, step := segID(s.Name), firstToken(l, s, own.page), keyStep(s.IsAttention())
		key0 := rowKey(la.lid, seg, idx, token)
		for stop := min(hi, end); at < stop; {
			rowAt := s.Offset + int64(idx-s.Lo)*s.IndexBytes + r*s.RowBytes
			if n := min(rows-r, (hi-at)/s.RowBytes); at == rowAt && n > 0 {
				tagRows(dst[at-lo:at-lo+n*s.RowBytes], int(s.RowBytes), key0+uint64(r)*step, step)
				at += n * s.RowBytes
				r += n
			} else {
				if cap(o.row) < int(s.RowBytes) {
					o.row = make([]byte, s.RowBytes)
				}
				row := o.row[:s.RowBytes]
				tag(row, key0+uint64(r)*step)
				at += int64(copy(dst[at-lo:min(hi, rowAt+s.RowBytes)-lo], row[at-rowAt:]))
				r++
			}
			if r == rows {
				r, idx = 0, idx+1
				key0 = rowKey(la.lid, seg, idx, token)
			}
		}
		if at >= hi {
			return
		}
	}
	fill(dst[at-lo:], Padding)
}
