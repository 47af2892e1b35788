// Package transfer is the agent's data path: a small Backend interface
// with the operations NIXL has (register regions, exchange metadata,
// prepare descriptor lists, post a transfer, poll it, notifications) and
// its implementations.
//
// Which backend runs:
//
//   - Host (the default, pure Go, every build): each P and D rank's KV
//     regions live in host memory; a transfer's descriptor pairs are real
//     copies, rank pairs in parallel, timed per layer batch (measured). P
//     and D can live in one process, or in two agents where D reads P's
//     bytes over TCP after a handshake carrying the version-15 metadata
//     (PeerServer and Remote).
//   - NIXL (build tag nixl, with cgo): the same operations through NIXL's
//     UCX backend, over a small C++ shim of our own against NIXL's installed
//     headers, both sides in one process (NewNIXL) or one per agent process
//     (NewNIXLSide for P, NewNIXLRemote for D), the peer connection then
//     carrying NIXL's metadata in its handshake. Totals are NIXL's own
//     telemetry; NIXL reports completion per request only, so per-batch
//     times are synthesized. Without the tag, the constructors return an
//     error saying to rebuild with -tags nixl.
package transfer

import (
	"fmt"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// Backend moves a transfer's bytes. Implementations are used by one
// goroutine at a time unless they say otherwise.
type Backend interface {
	// Name is the backend as events report it ("host", "nixl/UCX").
	Name() string
	// MemoryKind is DRAM or VRAM.
	MemoryKind() string
	// Register allocates and registers the KV regions of the ranks given.
	Register(regs []*xfer.Registration) error
	// Metadata is this agent's registration metadata for its peer.
	Metadata() ([]byte, error)
	// LoadRemote accepts the peer's metadata.
	LoadRemote(md []byte) error
	// Prepare validates a transfer's descriptors against the registered
	// regions and builds the descriptor lists; nothing a peer sends can
	// make a backend touch memory outside its regions.
	Prepare(x *xfer.Transfer) (*Prepared, error)
	// Post starts the transfer and returns at once.
	Post(p *Prepared, notif string) (Handle, error)
	// Poll reports whether the transfer is done, with its statistics.
	Poll(h Handle) (done bool, st *Stats, err error)
	// Notifications returns (and clears) the notifications received.
	Notifications() []string
	// Memory gives the oracle the registered bytes.
	oracle.Memory
	// Close releases everything.
	Close() error
}

// Handle identifies a posted transfer.
type Handle int

// Stats are what a completed transfer reports.
type Stats struct {
	Bytes      int64
	Descs      int
	Merged     int
	PrepUS     float64
	PostUS     float64
	TransferUS float64
	Timing     event.Timing
	Source     string            // "host" or "nixl": whose clock measured the totals
	Batches    []event.BatchData // per rank pair, group pair and layer, times relative to the post
}

// GBps is bytes / 1e9 / transfer seconds (decimal, as nixlbench reports).
func (s *Stats) GBps() float64 {
	if s.TransferUS <= 0 {
		return 0
	}
	return float64(s.Bytes) / 1e3 / s.TransferUS
}

// copyOp is one validated descriptor pair, in region-local offsets.
type copyOp struct {
	src, dst []byte     // exact slices (host backend), or nil where memory is remote
	pair     *xfer.Pair // the transfer's own, set by group
}

// batch is the ops of one layer and group pair between two ranks.
type batch struct {
	layer, kind    string
	pGroup, dGroup int
	ops            []copyOp
	bytes          int64
}

// rankOps is one rank pair's prepared work.
type rankOps struct {
	p, d    int
	batches []batch
	merged  int
}

// Prepared is a transfer whose descriptors were validated and grouped.
type Prepared struct {
	x      *xfer.Transfer
	ranks  []rankOps
	prepUS float64
	descs  int
	merged int
	bytes  int64
}

// addRankPair validates and groups one rank pair's descriptors (op checks
// and resolves each) and adds them to the prepared transfer.
func (p *Prepared) addRankPair(rp xfer.RankPair, kindOf func(string) string, op func(*xfer.Pair) (copyOp, error)) ([]batch, error) {
	batches, bytes, err := group(rp.Pairs, kindOf, op)
	if err != nil {
		return nil, err
	}
	merged := xfer.MergedCount(rp.Pairs)
	p.ranks = append(p.ranks, rankOps{p: rp.P, d: rp.D, batches: batches, merged: merged})
	p.descs += len(rp.Pairs)
	p.merged += merged
	p.bytes += bytes
	return batches, nil
}

// regionBytes returns a region of a rank, or an error naming what is out
// of range.
func regionOf(regs []*xfer.Registration, side xfer.Side, rank, region int) (*xfer.Registration, xfer.Region, error) {
	if rank < 0 || rank >= len(regs) || regs[rank] == nil {
		return nil, xfer.Region{}, fmt.Errorf("transfer: %s rank %d is not registered", side, rank)
	}
	r := regs[rank]
	if region < 0 || region >= len(r.Regions) {
		return nil, xfer.Region{}, fmt.Errorf("transfer: %s rank %d has no region %d", side, rank, region)
	}
	return r, r.Regions[region], nil
}

// checkRange validates one side of a descriptor against its region.
func checkRange(side xfer.Side, rank int, reg xfer.Region, off, n int64) error {
	if n <= 0 || off < 0 || off+n > reg.Bytes() {
		return fmt.Errorf("transfer: %s rank %d region %d: descriptor [%d, %d) outside its %d bytes", side, rank, reg.Index, off, off+n, reg.Bytes())
	}
	return nil
}

// group splits a rank pair's pairs into batches of consecutive pairs of
// one layer and group pair.
func group(pairs []xfer.Pair, kindOf func(string) string, op func(*xfer.Pair) (copyOp, error)) ([]batch, int64, error) {
	var out []batch
	var total int64
	all := make([]copyOp, len(pairs)) // one allocation; batches are runs of it
	start := 0
	for i := range pairs {
		p := &pairs[i]
		c, err := op(p)
		if err != nil {
			return nil, 0, err
		}
		c.pair = p
		all[i] = c
		n := len(out)
		if n == 0 || out[n-1].layer != p.Layer || out[n-1].pGroup != p.PGroup || out[n-1].dGroup != p.DGroup {
			if n > 0 {
				out[n-1].ops = all[start:i:i]
			}
			start = i
			out = append(out, batch{layer: p.Layer, kind: kindOf(p.Layer), pGroup: p.PGroup, dGroup: p.DGroup})
			n++
		}
		out[n-1].bytes += p.Len
		total += p.Len
	}
	if n := len(out); n > 0 {
		out[n-1].ops = all[start:]
	}
	return out, total, nil
}
