package transfer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvscope/kvscope/core/xfer"
)

// synthetic is one rank pair moving every page of a region of n pages of
// the given size, in a shuffled order on both sides (no two descriptors
// contiguous, as blocks of a real request are not).
func synthetic(tb testing.TB, page int64, n int) (*Host, *xfer.Transfer) {
	tb.Helper()
	reg := func(side xfer.Side) *xfer.Registration {
		return &xfer.Registration{Side: side, Rank: 0, TP: 1, NumBlocks: int64(n),
			Regions: []xfer.Region{{Index: 0, BlockLen: page, NumBlocks: int64(n)}}}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	src, dst := rng.Perm(n), rng.Perm(n)
	pairs := make([]xfer.Pair, n)
	for i := range pairs {
		pairs[i] = xfer.Pair{Src: xfer.Loc{Offset: int64(src[i]) * page}, Dst: xfer.Loc{Offset: int64(dst[i]) * page}, Len: page, Layer: "l"}
	}
	x := &xfer.Transfer{PRegs: []*xfer.Registration{reg(xfer.P)}, DRegs: []*xfer.Registration{reg(xfer.D)},
		RankPairs: []xfer.RankPair{{P: 0, D: 0, Pairs: pairs}}}
	h := NewHost(1<<32, nil)
	if err := h.Register(append(x.PRegs, x.DRegs...)); err != nil {
		tb.Fatal(err)
	}
	return h, x
}

// move prepares, posts and waits for one transfer.
func move(b *testing.B, h *Host, x *xfer.Transfer) {
	p, err := h.Prepare(x)
	if err != nil {
		b.Fatal(err)
	}
	id, _ := h.Post(p, "")
	if _, err := Wait(h, id); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkHostBandwidth moves 64 MiB per operation through the host
// backend (validate, group, copy, time each batch) in descriptors of one
// page, against two baselines in the same run: one plain copy of 64 MiB,
// and a plain copy loop over the same shuffled pages.
func BenchmarkHostBandwidth(b *testing.B) {
	const total = 64 << 20
	for _, page := range []int64{4 << 10, 64 << 10, 256 << 10, 1 << 20} {
		n := int(total / page)
		h, x := synthetic(b, page, n)
		name := fmt.Sprintf("page=%dKiB", page>>10)
		b.Run(name+"/host", func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				move(b, h, x)
			}
		})
		src, dst := h.buf(xfer.P, 0, 0), h.buf(xfer.D, 0, 0)
		b.Run(name+"/copy-pages", func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				for _, q := range x.RankPairs[0].Pairs {
					copy(dst[q.Dst.Offset:q.Dst.Offset+q.Len], src[q.Src.Offset:q.Src.Offset+q.Len])
				}
			}
		})
		b.Run(name+"/copy", func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkHostSmallDescriptors is the per-descriptor cost: 65,536
// descriptors of 256 bytes per operation, against a plain copy loop over
// the same descriptors.
func BenchmarkHostSmallDescriptors(b *testing.B) {
	const page, n = 256, 1 << 16
	h, x := synthetic(b, page, n)
	b.Run("host", func(b *testing.B) {
		for b.Loop() {
			move(b, h, x)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "descs/s")
	})
	src, dst := h.buf(xfer.P, 0, 0), h.buf(xfer.D, 0, 0)
	b.Run("copy-loop", func(b *testing.B) {
		for b.Loop() {
			for _, q := range x.RankPairs[0].Pairs {
				copy(dst[q.Dst.Offset:q.Dst.Offset+q.Len], src[q.Src.Offset:q.Src.Offset+q.Len])
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "descs/s")
	})
}
