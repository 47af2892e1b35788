package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DescBytes is the size of one descriptor of a read.
const DescBytes = 24

// Desc is one descriptor of a read (MsgRead): Len bytes at Offset of
// region Region of P rank Rank.
type Desc struct {
	Rank, Region uint32
	Offset, Len  uint64
}

// EncodeRead returns the payload of a read of n descriptors, descriptor i
// being desc(i).
func EncodeRead(n int, desc func(i int) Desc) []byte {
	b := make([]byte, 4+n*DescBytes)
	binary.BigEndian.PutUint32(b, uint32(n))
	for i := range n {
		d, at := desc(i), b[4+i*DescBytes:]
		binary.BigEndian.PutUint32(at[0:], d.Rank)
		binary.BigEndian.PutUint32(at[4:], d.Region)
		binary.BigEndian.PutUint64(at[8:], d.Offset)
		binary.BigEndian.PutUint64(at[16:], d.Len)
	}
	return b
}

// ParseRead checks that body is a read's payload, a count and that many
// descriptors, and returns the count.
func ParseRead(body []byte) (int, error) {
	if len(body) < 4 {
		return 0, errors.New("a read needs a descriptor count")
	}
	n := int(binary.BigEndian.Uint32(body))
	if len(body) != 4+n*DescBytes {
		return 0, fmt.Errorf("a read of %d descriptors has %d bytes, want %d", n, len(body), 4+n*DescBytes)
	}
	return n, nil
}

// ReadDesc decodes descriptor i of a read ParseRead accepted, refusing
// one no registration can hold: a length over MaxReadBytes, an offset
// over 2^62, a rank or region over 2^20. Whether it lies inside P's
// regions is for P to check.
func ReadDesc(body []byte, i int) (Desc, error) {
	at := body[4+i*DescBytes:]
	d := Desc{Rank: binary.BigEndian.Uint32(at[0:]), Region: binary.BigEndian.Uint32(at[4:]),
		Offset: binary.BigEndian.Uint64(at[8:]), Len: binary.BigEndian.Uint64(at[16:])}
	if d.Len > MaxReadBytes || d.Offset > 1<<62 || int64(d.Rank) > 1<<20 || int64(d.Region) > 1<<20 {
		return Desc{}, fmt.Errorf("descriptor %d: rank %d region %d [%d, +%d) is out of range", i, d.Rank, d.Region, d.Offset, d.Len)
	}
	return d, nil
}
