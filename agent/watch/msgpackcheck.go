package watch

import (
	"encoding/binary"
	"fmt"
)

// maxMsgpackDepth bounds how deeply a side channel answer may nest: vLLM's
// handshake payload is three levels deep (payload, metadata, per-region
// lists); anything far deeper is not an answer from vLLM.
const maxMsgpackDepth = 16

// maxMsgpackValues bounds the values of one side channel answer: vLLM's
// holds a few per region (a base address, a block length, its layers), a
// few thousand in all; decoding 2^18 values into interfaces costs some
// 25 MiB, where ten million block lengths in a 10 MB answer cost 900 MiB.
const maxMsgpackValues = 1 << 18

// checkMsgpack walks one msgpack value in b without decoding it and refuses
// what a decoder into interface values would pay for out of proportion to
// the input: a container or string whose declared size is larger than the
// bytes left (a 5-byte array header can claim four billion elements, which
// the decoder allocates before reading one), or nesting deeper than
// maxMsgpackDepth (a megabyte of one-byte array headers costs seconds and a
// deep stack), or more than maxMsgpackValues values in all. It runs in time linear in len(b) and allocates only its
// stack of open containers.
func checkMsgpack(b []byte) error {
	// open holds, per open container, the values it still expects.
	open := make([]uint64, 0, maxMsgpackDepth)
	pos := 0
	values := 0
	need := func(n uint64) error {
		if n > uint64(len(b)-pos) {
			return fmt.Errorf("msgpack at byte %d declares %d bytes, %d are left", pos, n, len(b)-pos)
		}
		return nil
	}
	// size reads a big-endian length of w bytes at pos.
	size := func(w int) (uint64, error) {
		if err := need(uint64(w)); err != nil {
			return 0, err
		}
		var n uint64
		switch w {
		case 1:
			n = uint64(b[pos])
		case 2:
			n = uint64(binary.BigEndian.Uint16(b[pos:]))
		case 4:
			n = uint64(binary.BigEndian.Uint32(b[pos:]))
		}
		pos += w
		return n, nil
	}
	for {
		if pos >= len(b) {
			return fmt.Errorf("msgpack ends at byte %d inside a value", pos)
		}
		c := b[pos]
		at := pos
		pos++
		if values++; values > maxMsgpackValues {
			return fmt.Errorf("msgpack holds more than %d values (at byte %d): not a handshake answer", maxMsgpackValues, at)
		}
		var skip uint64 // payload bytes after the header
		var items uint64
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f:
			items, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c >= 0xc4 && c <= 0xc6: // bin 8, 16, 32
			n, err := size(1 << (c - 0xc4))
			if err != nil {
				return err
			}
			skip = n
		case c >= 0xd9 && c <= 0xdb: // str 8, 16, 32
			n, err := size(1 << (c - 0xd9))
			if err != nil {
				return err
			}
			skip = n
		case c >= 0xc7 && c <= 0xc9: // ext 8, 16, 32
			n, err := size(1 << (c - 0xc7))
			if err != nil {
				return err
			}
			skip = n + 1 // the type byte
		case c == 0xca, c == 0xce, c == 0xd2:
			skip = 4
		case c == 0xcb, c == 0xcf, c == 0xd3:
			skip = 8
		case c == 0xcc, c == 0xd0:
			skip = 1
		case c == 0xcd, c == 0xd1:
			skip = 2
		case c >= 0xd4 && c <= 0xd8:
			skip = 1 + 1<<(c-0xd4) // type byte + 1, 2, 4, 8 or 16 bytes
		case c == 0xdc, c == 0xdd: // array 16, 32
			n, err := size(2 << (c - 0xdc))
			if err != nil {
				return err
			}
			items, container = n, true
		case c == 0xde, c == 0xdf: // map 16, 32
			n, err := size(2 << (c - 0xde))
			if err != nil {
				return err
			}
			items, container = 2*n, true
		default: // 0xc1 is never used
			return fmt.Errorf("msgpack byte %d is 0x%02x, not a type", at, c)
		}
		if err := need(skip); err != nil {
			return err
		}
		pos += int(skip)
		if container && items > 0 {
			// Every value takes at least one byte.
			if err := need(items); err != nil {
				return err
			}
			if len(open) == maxMsgpackDepth {
				return fmt.Errorf("msgpack nests deeper than %d at byte %d", maxMsgpackDepth, at)
			}
			open = append(open, items)
			continue
		}
		// A value ended: close the containers it completes.
		for len(open) > 0 {
			open[len(open)-1]--
			if open[len(open)-1] > 0 {
				break
			}
			open = open[:len(open)-1]
		}
		if len(open) == 0 {
			return nil
		}
	}
}
