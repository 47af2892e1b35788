package transfer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvscope/kvscope/core/xfer"
)

// twoAgents is a P agent serving ranks host ranks on a loopback port and
// the D backend reading from it over one connection per rank pair: each
// rank pair moves every page of a region of n pages of the given size, in
// a shuffled order on both sides, as synthetic does for one process.
func twoAgents(b *testing.B, ranks int, page int64, n int) (*Remote, *xfer.Transfer) {
	b.Helper()
	reg := func(side xfer.Side, rank int) *xfer.Registration {
		return &xfer.Registration{Side: side, Rank: rank, TP: ranks, NumBlocks: int64(n),
			Regions: []xfer.Region{{Index: 0, BlockLen: page, NumBlocks: int64(n)}}}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	x := &xfer.Transfer{}
	for rank := range ranks {
		x.PRegs, x.DRegs = append(x.PRegs, reg(xfer.P, rank)), append(x.DRegs, reg(xfer.D, rank))
		src, dst := rng.Perm(n), rng.Perm(n)
		pairs := make([]xfer.Pair, n)
		for i := range pairs {
			pairs[i] = xfer.Pair{Src: xfer.Loc{Offset: int64(src[i]) * page}, Dst: xfer.Loc{Offset: int64(dst[i]) * page}, Len: page, Layer: "l"}
		}
		x.RankPairs = append(x.RankPairs, xfer.RankPair{P: rank, D: rank, Pairs: pairs})
	}
	h, ln := hostP(b, x.PRegs)
	stop := serve(&PeerServer{Mem: h}, ln) // no Logf: the closing would be logged
	r := NewRemote(ln.Addr().String(), "", ranks, 1<<32, nil)
	if err := r.Register(append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		r.Close()
		stop()
		h.Close()
	})
	return r, x
}

// BenchmarkRemoteRead moves 64 MiB per operation from a P agent into D
// over loopback TCP (PeerServer and Remote), split over 1, 2 or 4 rank
// pairs, each reading over its own connection: P serves the reads of
// several connections at once where its lock lets it.
func BenchmarkRemoteRead(b *testing.B) {
	const total = 64 << 20
	for _, ranks := range []int{1, 2, 4} {
		for _, page := range []int64{4 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("ranks=%d/page=%dKiB", ranks, page>>10), func(b *testing.B) {
				r, x := twoAgents(b, ranks, page, int(total/page)/ranks)
				p, err := r.Prepare(x)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(total)
				for b.Loop() {
					id, err := r.Post(p, "")
					if err != nil {
						b.Fatal(err)
					}
					if _, err := Wait(r, id); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
