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
//     (PeerServer and Remote, speaking the protocol of package peer).
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

// copyOp is one validated descriptor pair, in region-local offsets, as
// Prepare saw it. It holds no pointer, so that the garbage collector need
// neither scan nor guard writes into a transfer's ops; its rank pair's
// limits give its bytes.
type copyOp struct {
	src, dst xfer.Loc
	n        int64
}

// batch is the descriptors of one layer and group pair between two ranks.
type batch struct {
	layer, kind    string
	pGroup, dGroup int
	ops            []copyOp // nil where the backend keeps no copy operations (NIXL)
	descs          int
	bytes          int64
}

// rankOps is one rank pair's prepared work.
type rankOps struct {
	p, d     int
	src, dst limits // P's and D's regions as Prepare checked the ops against them
	batches  []batch
	merged   int
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

// limits is one side of one rank as Prepare checks descriptors against it:
// each region's size in bytes and, where the memory lives in this process,
// its bytes, both indexed by region id, so that checking a descriptor is a
// few comparisons with no lookup, call or allocation. A rank that is not
// registered (or not advertised) has no regions, so every descriptor of it
// is refused. why words the error for a refused descriptor: the backend's
// own message, naming the side, rank, region and offset.
type limits struct {
	side xfer.Side
	rank int
	size []int64  // per region id
	mem  [][]byte // per region id; nil where the memory is the peer's
	why  refuser
}

// A refuser words the error for a descriptor that lies outside one side's
// regions of a rank; it is asked only about descriptors limits refused.
type refuser interface {
	refuse(side xfer.Side, rank int, at xfer.Loc, n int64) error
}

// inside reports whether n > 0 bytes at at lie inside a region (written so
// that no sum can overflow: size - n cannot, size being >= 0 and n > 0).
func (l *limits) inside(at xfer.Loc, n int64) bool {
	return uint(at.Region) < uint(len(l.size)) && n > 0 && at.Offset >= 0 && at.Offset <= l.size[at.Region]-n
}

// bytes is an inside descriptor's memory, or nil where it is the peer's.
func (l *limits) bytes(at xfer.Loc, n int64) []byte {
	if at.Region >= len(l.mem) {
		return nil
	}
	return l.mem[at.Region][at.Offset : at.Offset+n : at.Offset+n]
}

// refused is the error for a descriptor that inside refused: the
// backend's words, or, should they find nothing wrong with it, what
// limits found.
func (l *limits) refused(at xfer.Loc, n int64) error {
	if l.why != nil {
		if err := l.why.refuse(l.side, l.rank, at, n); err != nil {
			return err
		}
	}
	return fmt.Errorf("transfer: %s rank %d region %d: descriptor at %d of %d bytes lies outside its region", l.side, l.rank, at.Region, at.Offset, n)
}

// addRankPair validates one rank pair's descriptors, P's side against src
// and D's against dst, groups them into batches (with each pair's copy
// operation when ops is set) and adds them to the prepared transfer.
func (p *Prepared) addRankPair(rp xfer.RankPair, kindOf func(string) string, src, dst *limits, ops bool) ([]batch, error) {
	batches, bytes, err := group(rp.Pairs, kindOf, src, dst, ops)
	if err != nil {
		return nil, err
	}
	merged := xfer.MergedCount(rp.Pairs)
	p.ranks = append(p.ranks, rankOps{p: rp.P, d: rp.D, src: *src, dst: *dst, batches: batches, merged: merged})
	p.descs += len(rp.Pairs)
	p.merged += merged
	p.bytes += bytes
	return batches, nil
}

// regionOf returns a region of a rank, or an error naming what is out of
// range.
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

// regionSizes is each registered rank's region sizes, indexed by rank and
// region id (nil for a rank not there).
func regionSizes(regs []*xfer.Registration) [][]int64 {
	out := make([][]int64, len(regs))
	for i, r := range regs {
		if r == nil {
			continue
		}
		out[i] = make([]int64, len(r.Regions))
		for j, reg := range r.Regions {
			out[i][j] = reg.Bytes()
		}
	}
	return out
}

// checkRange validates one side of a descriptor against its region.
func checkRange(side xfer.Side, rank int, reg xfer.Region, off, n int64) error {
	if n <= 0 || off < 0 || off > reg.Bytes()-n {
		return fmt.Errorf("transfer: %s rank %d region %d: descriptor [%d, %d) outside its %d bytes", side, rank, reg.Index, off, off+n, reg.Bytes())
	}
	return nil
}

// group validates a rank pair's pairs (src each pair's P side, dst its D
// side: the first pair outside either is the error) and splits them into
// batches of consecutive pairs of one layer and group pair, with each
// pair's copy operation when ops is set.
func group(pairs []xfer.Pair, kindOf func(string) string, src, dst *limits, ops bool) ([]batch, int64, error) {
	var out []batch
	var total int64
	var all []copyOp // one allocation; batches are runs of it
	if ops {
		all = make([]copyOp, len(pairs))
	}
	start := 0
	for i := range pairs {
		p := &pairs[i]
		if !src.inside(p.Src, p.Len) {
			return nil, 0, src.refused(p.Src, p.Len)
		}
		if !dst.inside(p.Dst, p.Len) {
			return nil, 0, dst.refused(p.Dst, p.Len)
		}
		if ops {
			all[i] = copyOp{src: p.Src, dst: p.Dst, n: p.Len}
		}
		n := len(out)
		if n == 0 || out[n-1].layer != p.Layer || out[n-1].pGroup != p.PGroup || out[n-1].dGroup != p.DGroup {
			if n > 0 && ops {
				out[n-1].ops = all[start:i:i]
			}
			start = i
			out = append(out, batch{layer: p.Layer, kind: kindOf(p.Layer), pGroup: p.PGroup, dGroup: p.DGroup})
			n++
		}
		out[n-1].descs++
		out[n-1].bytes += p.Len
		total += p.Len
	}
	if n := len(out); n > 0 && ops {
		out[n-1].ops = all[start:]
	}
	return out, total, nil
}
