package oracle

import (
	"bytes"
	"encoding/binary"
	"sync"

	"github.com/kvscope/kvscope/core/xfer"
)

// This file is the pattern P's pages hold: every row of every index of
// every segment is cut from one fixed pseudo-random stream at a place its
// (layer, segment, index, token) coordinates pick, and starts with a
// header those coordinates determine; bytes that belong to no layer are
// padding. pBytes writes any byte range of a P page, so that a check can
// move P's bytes without holding P's pages.
//
// Rows are copied, not computed word by word: the consecutive tokens of
// one index within a chunk of chunkTokens tokens are consecutive rows of
// one window of the stream, so a head's rows in a page come from one or a
// few copies, and D is checked against them with bytes.Equal. Every byte
// still depends on its coordinates. The header is a 64-bit hash of the
// chunk's coordinates stepped by an odd constant per token: the rows of a
// chunk never share it, rows of different chunks with probability about
// 2^-60. The rest of a row depends on the window (the chunk's
// coordinates), the token within the chunk and the byte's place in the
// row. A row moved whole (by a token, a head, a layer or a segment) is
// caught by its header; a range that cuts rows by the stream's bytes.

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

// rowKey packs a row's coordinates.
func rowKey(layer, seg uint64, index, token int) uint64 {
	return layer<<52 ^ seg<<46 ^ uint64(index)<<28 ^ uint64(token)
}

func mix(z uint64) uint64 {
	z += 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// index names one index (head or channel) of one segment of one layer:
// the coordinates of its rows but the token.
type index struct {
	layer, seg uint64
	idx        int
}

const (
	// streamBytes is the length of the stream rows are cut from (a
	// power of two; a window that runs past its end goes on from its
	// start).
	streamBytes = 1 << 18
	// chunkTokens is how many consecutive tokens of one index are
	// consecutive rows of one window.
	chunkTokens = 16
	// streamSeed and windowSalt keep the stream's words and the windows'
	// places apart from the headers.
	streamSeed = 0x6b7673636f706521
	windowSalt = 0x0fd9a4b1c3e25877
)

// stream is the pseudo-random stream rows are cut from: word w holds
// mix(w ^ streamSeed), little-endian. Built once and only read.
var stream = sync.OnceValue(func() []byte {
	b := make([]byte, streamBytes)
	for w := 0; w < streamBytes/8; w++ {
		binary.LittleEndian.PutUint64(b[8*w:], mix(uint64(w)^streamSeed))
	}
	return b
})

// putRows writes len(dst)/rowBytes rows of one index, its tokens token,
// token+1, ... (a state index is one row, token 0). The rows of one chunk
// of tokens are one window of the stream, each with its header over the
// first 8 bytes (or all of a shorter row): h + r*headerStep for the r-th
// token of the chunk, little-endian, where h hashes the coordinates of the
// chunk's first row.
func putRows(dst []byte, rowBytes int, ix index, token int) {
	if rowBytes <= 0 {
		return
	}
	s := stream()
	for len(dst) >= rowBytes {
		first := token / chunkTokens * chunkTokens
		r := token - first // row within the chunk's window
		n := chunkTokens - r
		if len(dst) < n*rowBytes {
			n = len(dst) / rowBytes
		}
		h := mix(rowKey(ix.layer, ix.seg, ix.idx, first))
		start := int(mix(h^windowSalt)&(streamBytes/8-1)) * 8
		rows := dst[:n*rowBytes]
		for at, w := (start+r*rowBytes)%streamBytes, rows; len(w) > 0; at = 0 {
			w = w[copy(w, s[at:]):]
		}
		h += uint64(r) * headerStep
		if rowBytes >= 8 {
			for i := 0; i < len(rows); i += rowBytes {
				binary.LittleEndian.PutUint64(rows[i:], h)
				h += headerStep
			}
		} else {
			var w [8]byte
			for i := 0; i < len(rows); i += rowBytes {
				binary.LittleEndian.PutUint64(w[:], h)
				copy(rows[i:i+rowBytes], w[:])
				h += headerStep
			}
		}
		dst, token = dst[n*rowBytes:], token+n
	}
}

// headerStep is odd: the headers of a chunk's rows all differ.
const headerStep uint64 = 0xD1B54A32D192ED03

// matched is how many of b's leading rows of rowBytes hold what putRows
// writes for them.
func (o *run) matched(b []byte, rowBytes int, ix index, token int) int {
	if rowBytes <= 0 {
		return 0
	}
	rows := len(b) / rowBytes
	b = b[:rows*rowBytes]
	if cap(o.expect) < len(b) {
		o.expect = make([]byte, len(b))
	}
	want := o.expect[:len(b)]
	putRows(want, rowBytes, ix, token)
	if bytes.Equal(b, want) {
		return rows
	}
	for r := range rows {
		if !bytes.Equal(b[r*rowBytes:(r+1)*rowBytes], want[r*rowBytes:(r+1)*rowBytes]) {
			return r
		}
	}
	return rows
}

// pBytes writes bytes [lo, lo+len(dst)) of a P page into dst: the rows
// (putRows) of the layer that owns the block in this region's tensor,
// segment by segment, and padding everywhere else: a whole page for an
// agent's memory, a pair's range for a check.
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
		idx := s.Lo + int(rel/s.IndexBytes) // the row's index and row
		var r int64
		if rem := rel - int64(idx-s.Lo)*s.IndexBytes; rem > 0 {
			r = rem / s.RowBytes
		}
		rows := s.IndexBytes / s.RowBytes // per index
		ix, token := index{la.lid, segID(s.Name), idx}, firstToken(l, s, own.page)
		for stop := min(hi, end); at < stop; {
			rowAt := s.Offset + int64(ix.idx-s.Lo)*s.IndexBytes + r*s.RowBytes
			if n := min(rows-r, (hi-at)/s.RowBytes); at == rowAt && n > 0 {
				putRows(dst[at-lo:at-lo+n*s.RowBytes], int(s.RowBytes), ix, token+int(r))
				at += n * s.RowBytes
				r += n
			} else {
				if cap(o.row) < int(s.RowBytes) {
					o.row = make([]byte, s.RowBytes)
				}
				row := o.row[:s.RowBytes]
				putRows(row, int(s.RowBytes), ix, token+int(r))
				at += int64(copy(dst[at-lo:min(hi, rowAt+s.RowBytes)-lo], row[at-rowAt:]))
				r++
			}
			if r == rows {
				r, ix.idx = 0, ix.idx+1
			}
		}
		if at >= hi {
			return
		}
	}
	fill(dst[at-lo:], Padding)
}
