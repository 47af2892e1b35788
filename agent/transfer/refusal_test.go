package transfer

import (
	"math"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/xfer"
)

// refusalRegs are P rank 0 with regions of 16 KiB and 8 KiB and D rank 0
// with one region of 16 KiB.
func refusalRegs() (p, d *xfer.Registration) {
	p = &xfer.Registration{Side: xfer.P, Rank: 0, TP: 1, NumBlocks: 16, Regions: []xfer.Region{
		{Index: 0, BlockLen: 1024, NumBlocks: 16}, {Index: 1, BlockLen: 512, NumBlocks: 16}}}
	d = &xfer.Registration{Side: xfer.D, Rank: 0, TP: 1, NumBlocks: 16, Regions: []xfer.Region{
		{Index: 0, BlockLen: 1024, NumBlocks: 16}}}
	return p, d
}

// refusalTransfer is a pull of eight 1 KiB pairs inside their regions:
// pair i from P region i%2 at i KiB to D at i KiB.
func refusalTransfer() *xfer.Transfer {
	p, d := refusalRegs()
	pairs := make([]xfer.Pair, 8)
	for i := range pairs {
		pairs[i] = xfer.Pair{Src: xfer.Loc{Region: i % 2, Offset: int64(i) * 1024}, Dst: xfer.Loc{Offset: int64(i) * 1024}, Len: 1024, Layer: "l"}
	}
	return &xfer.Transfer{Mode: xfer.Pull, PRegs: []*xfer.Registration{p}, DRegs: []*xfer.Registration{d},
		RankPairs: []xfer.RankPair{{P: 0, D: 0, Pairs: pairs}}, Bytes: 8 << 10, Descs: 8, Merged: 8}
}

// refusals are descriptors outside their regions, or of ranks or regions
// that do not exist, and the error each gets: the first bad pair, P's side
// before D's, named by side, rank, region and offsets.
var refusals = []struct {
	name string
	edit func(rp *xfer.RankPair)
	want string // the whole error, or its start where prefix is set
	// prefix: the end printed for an offset whose end overflows is not
	// pinned.
	prefix bool
}{
	{"P's side past its region's end", func(rp *xfer.RankPair) { rp.Pairs[5].Src.Offset = 8192 - 1024 + 1 },
		"transfer: P rank 0 region 1: descriptor [7169, 8193) outside its 8192 bytes", false},
	{"P's side ending just past the largest offset", func(rp *xfer.RankPair) { rp.Pairs[5].Src.Offset = math.MaxInt64 - 100 },
		"transfer: P rank 0 region 1: descriptor [9223372036854775707, ", true},
	{"D's side at a negative offset", func(rp *xfer.RankPair) { rp.Pairs[5].Dst.Offset = -1 },
		"transfer: D rank 0 region 0: descriptor [-1, 1023) outside its 16384 bytes", false},
	{"D's side ending just past the largest offset", func(rp *xfer.RankPair) { rp.Pairs[5].Dst.Offset = math.MaxInt64 },
		"transfer: D rank 0 region 0: descriptor [9223372036854775807, ", true},
	{"an empty descriptor", func(rp *xfer.RankPair) { rp.Pairs[5].Len = 0 },
		"transfer: P rank 0 region 1: descriptor [5120, 5120) outside its 8192 bytes", false},
	{"a negative length", func(rp *xfer.RankPair) { rp.Pairs[5].Len = -1024 },
		"transfer: P rank 0 region 1: descriptor [5120, 4096) outside its 8192 bytes", false},
	{"both sides outside: P's is named", func(rp *xfer.RankPair) { rp.Pairs[5].Src.Offset, rp.Pairs[5].Dst.Offset = 8192, 16384 },
		"transfer: P rank 0 region 1: descriptor [8192, 9216) outside its 8192 bytes", false},
	{"the first of two bad pairs is named", func(rp *xfer.RankPair) { rp.Pairs[5].Src.Offset, rp.Pairs[2].Dst.Offset = 8192, 16384 },
		"transfer: D rank 0 region 0: descriptor [16384, 17408) outside its 16384 bytes", false},
	{"a region P's rank does not have", func(rp *xfer.RankPair) { rp.Pairs[5].Src.Region = 2 },
		"transfer: P rank 0 has no region 2", false},
	{"a negative region", func(rp *xfer.RankPair) { rp.Pairs[5].Dst.Region = -1 },
		"transfer: D rank 0 has no region -1", false},
	{"a P rank that is not registered", func(rp *xfer.RankPair) { rp.P = 3 },
		"transfer: P rank 3 is not registered", false},
	{"a negative D rank", func(rp *xfer.RankPair) { rp.D = -1 },
		"transfer: D rank -1 is not registered", false},
}

// checkRefusals prepares refusalTransfer through b, untouched and with
// each refusal's edit, and checks every error word for word.
func checkRefusals(t *testing.T, b interface {
	Prepare(*xfer.Transfer) (*Prepared, error)
}) {
	t.Helper()
	p, err := b.Prepare(refusalTransfer())
	if err != nil {
		t.Fatalf("the untouched transfer: %v", err)
	}
	if p.descs != 8 || p.bytes != 8<<10 || len(p.ranks) != 1 || len(p.ranks[0].batches) != 1 || p.ranks[0].batches[0].descs != 8 {
		t.Fatalf("the untouched transfer: %d descriptors, %d bytes, %d rank pairs; want 8 in one batch, 8 KiB", p.descs, p.bytes, len(p.ranks))
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			x := refusalTransfer()
			r.edit(&x.RankPairs[0])
			_, err := b.Prepare(x)
			switch {
			case err == nil:
				t.Fatal("prepared")
			case r.prefix && !strings.HasPrefix(err.Error(), r.want) || r.prefix && !strings.HasSuffix(err.Error(), "outside its 8192 bytes") && !strings.HasSuffix(err.Error(), "outside its 16384 bytes"):
				t.Fatalf("error %q, want one starting %q and naming the region's bytes", err, r.want)
			case !r.prefix && err.Error() != r.want:
				t.Fatalf("error %q, want %q", err, r.want)
			}
		})
	}
}

// TestHostRefusalsNameTheDescriptor: the host backend refuses each
// descriptor outside its regions with the error naming it, and an offset
// whose end overflows is refused too (not a panic when slicing).
func TestHostRefusalsNameTheDescriptor(t *testing.T) {
	h := NewHost(1<<20, nil)
	p, d := refusalRegs()
	if err := h.Register([]*xfer.Registration{p, d}); err != nil {
		t.Fatal(err)
	}
	checkRefusals(t, h)
}

// TestRemoteRefusalsNameTheDescriptor: D of two agents over TCP checks P's
// side against P's registrations as planned, with the same words.
func TestRemoteRefusalsNameTheDescriptor(t *testing.T) {
	p, d := refusalRegs()
	h := NewHost(1<<20, nil)
	if err := h.Register([]*xfer.Registration{d}); err != nil {
		t.Fatal(err)
	}
	pRegs := []*xfer.Registration{p}
	checkRefusals(t, &Remote{Host: h, peerClient: &peerClient{pRegs: pRegs}, pSizes: regionSizes(pRegs)})
}

// TestHostCopiesWhatPrepareChecked: the host backend copies each pair's
// bytes from P's offset to D's, as prepared.
func TestHostCopiesWhatPrepareChecked(t *testing.T) {
	h := NewHost(1<<20, nil)
	p, d := refusalRegs()
	if err := h.Register([]*xfer.Registration{p, d}); err != nil {
		t.Fatal(err)
	}
	for r, buf := range h.bufs[0][0] {
		for i := range buf {
			buf[i] = byte(i/1024*7 + r*100 + i%5)
		}
	}
	x := refusalTransfer()
	prep, err := h.Prepare(x)
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.Post(prep, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Wait(h, id); err != nil {
		t.Fatal(err)
	}
	for _, q := range x.RankPairs[0].Pairs {
		src := h.bufs[0][0][q.Src.Region][q.Src.Offset : q.Src.Offset+q.Len]
		dst := h.bufs[1][0][q.Dst.Region][q.Dst.Offset : q.Dst.Offset+q.Len]
		if string(src) != string(dst) {
			t.Fatalf("D [%d, +%d) does not hold P region %d [%d, +%d)", q.Dst.Offset, q.Len, q.Src.Region, q.Src.Offset, q.Len)
		}
	}
}
