package peer

import (
	"bytes"
	"strings"
	"testing"
)

// TestReadOnTheWire: a read's payload is a big-endian count, then rank,
// region, offset and length of each descriptor (4, 4, 8 and 8 bytes).
func TestReadOnTheWire(t *testing.T) {
	descs := []Desc{{Rank: 1, Region: 2, Offset: 3, Len: 4}, {Rank: 0x01020304, Region: 5, Offset: 1 << 40, Len: 16}}
	want := "\x00\x00\x00\x02" +
		"\x00\x00\x00\x01" + "\x00\x00\x00\x02" + "\x00\x00\x00\x00\x00\x00\x00\x03" + "\x00\x00\x00\x00\x00\x00\x00\x04" +
		"\x01\x02\x03\x04" + "\x00\x00\x00\x05" + "\x00\x00\x01\x00\x00\x00\x00\x00" + "\x00\x00\x00\x00\x00\x00\x00\x10"
	got := EncodeRead(len(descs), func(i int) Desc { return descs[i] })
	if string(got) != want {
		t.Fatalf("EncodeRead: % x\nwant           % x", got, want)
	}
	n, err := ParseRead(got)
	if err != nil || n != 2 {
		t.Fatalf("ParseRead: %d, %v", n, err)
	}
	if _, err := ReadDesc(got, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDesc(got, 1); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("rank %#x: %v, want out of range", descs[1].Rank, err)
	}
}

func TestParseReadRefusals(t *testing.T) {
	one := func(d Desc) []byte { return EncodeRead(1, func(int) Desc { return d }) }
	tests := []struct {
		name string
		body []byte
		want string // "" accepts
	}{
		{"an empty read", EncodeRead(0, nil), ""},
		{"no count", []byte{0, 0}, "a read needs a descriptor count"},
		{"a descriptor short", one(Desc{Len: 8})[:27], "a read of 1 descriptors has 27 bytes, want 28"},
		{"a descriptor too many", append(one(Desc{Len: 8}), make([]byte, DescBytes)...), "a read of 1 descriptors has 52 bytes, want 28"},
		{"a count of 2^32-1", []byte{0xff, 0xff, 0xff, 0xff}, "a read of 4294967295 descriptors has 4 bytes"},
		{"the largest length", one(Desc{Len: MaxReadBytes}), ""},
		{"a length over the largest", one(Desc{Len: MaxReadBytes + 1}), "descriptor 0: rank 0 region 0 [0, +16777217) is out of range"},
		{"the largest offset", one(Desc{Offset: 1 << 62}), ""},
		{"an offset over the largest", one(Desc{Offset: 1<<62 + 1}), "is out of range"},
		{"the largest rank and region", one(Desc{Rank: 1 << 20, Region: 1 << 20}), ""},
		{"a rank over the largest", one(Desc{Rank: 1<<20 + 1}), "is out of range"},
		{"a region over the largest", one(Desc{Region: 1<<20 + 1}), "is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := ParseRead(tt.body)
			for i := 0; err == nil && i < n; i++ {
				_, err = ReadDesc(tt.body, i)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// FuzzParseRead: a payload ParseRead and ReadDesc accept is exactly the
// encoding of the descriptors they decoded, each within the protocol's
// limits; nothing panics.
func FuzzParseRead(f *testing.F) {
	f.Add(EncodeRead(1, func(int) Desc { return Desc{Offset: 4096, Len: 8192} }))
	f.Add(EncodeRead(2, func(i int) Desc { return Desc{Rank: uint32(i), Region: 3, Offset: 1 << 62, Len: MaxReadBytes} }))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := ParseRead(body)
		if err != nil {
			return
		}
		if len(body) != 4+n*DescBytes {
			t.Fatalf("accepted %d bytes as %d descriptors", len(body), n)
		}
		descs := make([]Desc, n)
		for i := range n {
			d, err := ReadDesc(body, i)
			if err != nil {
				return
			}
			if d.Len > MaxReadBytes || d.Offset > 1<<62 || d.Rank > 1<<20 || d.Region > 1<<20 {
				t.Fatalf("descriptor %d accepted out of range: %+v", i, d)
			}
			descs[i] = d
		}
		if again := EncodeRead(n, func(i int) Desc { return descs[i] }); !bytes.Equal(again, body) {
			t.Fatalf("decoded %+v, which encodes to % x, not % x", descs, again, body)
		}
	})
}
