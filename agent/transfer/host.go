package transfer

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/xfer"
)

// Host is the pure-Go backend: every registered region is a host-memory
// buffer and every descriptor pair a copy. It is safe for concurrent use.
type Host struct {
	mu        sync.Mutex
	regs      [2][]*xfer.Registration // side (P, D) -> rank
	bufs      [2][][][]byte           // side (P, D) -> rank -> region -> bytes
	sizes     [2][][]int64            // side (P, D) -> rank -> region -> len(bytes)
	limit     int64                   // bytes Register may allocate in all
	allocated int64
	xfers     map[Handle]*hostXfer
	next      Handle
	notifs    []string
	remoteMD  []byte
	kindOf    func(layer string) string
	clock     func() time.Time
}

// sideIndex indexes bufs.
func sideIndex(s xfer.Side) int {
	if s == xfer.D {
		return 1
	}
	return 0
}

// buf is a registered region's bytes, or nil.
func (h *Host) buf(side xfer.Side, rank, region int) []byte {
	b := h.bufs[sideIndex(side)]
	if rank < 0 || rank >= len(b) || region < 0 || region >= len(b[rank]) {
		return nil
	}
	return b[rank][region]
}

type hostXfer struct {
	done  chan struct{}
	stats Stats
	err   error
}

// NewHost makes a host backend that allocates at most limit bytes.
// kindOf names a layer's kind for batch events (nil leaves it empty).
func NewHost(limit int64, kindOf func(string) string) *Host {
	if kindOf == nil {
		kindOf = func(string) string { return "" }
	}
	return &Host{limit: limit,
		xfers: map[Handle]*hostXfer{}, kindOf: kindOf, clock: time.Now}
}

// Name implements Backend.
func (h *Host) Name() string { return "host" }

// MemoryKind implements Backend.
func (h *Host) MemoryKind() string { return "DRAM" }

// Register allocates every region of the given ranks in host memory.
func (h *Host) Register(regs []*xfer.Registration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var need int64
	for _, r := range regs {
		for _, reg := range r.Regions {
			need += reg.Bytes()
		}
	}
	if h.allocated+need > h.limit {
		return fmt.Errorf("transfer: registering %d MiB would exceed the host backend's %d MiB; lower the scenario's kv_cache_memory_bytes", (h.allocated+need)>>20, h.limit>>20)
	}
	for _, r := range regs {
		list := h.regs[sideIndex(r.Side)]
		for len(list) <= r.Rank {
			list = append(list, nil)
		}
		list[r.Rank] = r
		h.regs[sideIndex(r.Side)] = list
		bufs := h.bufs[sideIndex(r.Side)]
		for len(bufs) <= r.Rank {
			bufs = append(bufs, nil)
		}
		sizes := h.sizes[sideIndex(r.Side)]
		for len(sizes) <= r.Rank {
			sizes = append(sizes, nil)
		}
		bufs[r.Rank] = make([][]byte, len(r.Regions))
		sizes[r.Rank] = make([]int64, len(r.Regions))
		for i, reg := range r.Regions {
			bufs[r.Rank][i] = make([]byte, reg.Bytes())
			sizes[r.Rank][i] = reg.Bytes()
		}
		h.bufs[sideIndex(r.Side)] = bufs
		h.sizes[sideIndex(r.Side)] = sizes
	}
	h.allocated += need
	return nil
}

// Metadata is the version-15 metadata of every registered rank, as JSON.
func (h *Host) Metadata() ([]byte, error) {
	type sideMD struct {
		Side  xfer.Side       `json:"side"`
		Ranks []xfer.Metadata `json:"ranks"`
	}
	var out []sideMD
	for _, side := range []xfer.Side{xfer.P, xfer.D} {
		if ranks := h.SideMetadata(side); len(ranks) > 0 {
			out = append(out, sideMD{side, ranks})
		}
	}
	return json.Marshal(out)
}

// SideMetadata is the version-15 metadata of one side's registered ranks.
func (h *Host) SideMetadata(side xfer.Side) []xfer.Metadata {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []xfer.Metadata
	for _, r := range h.regs[sideIndex(side)] {
		if r != nil {
			out = append(out, xfer.MetadataOf(r))
		}
	}
	return out
}

// LoadRemote keeps the peer's metadata (a host backend holding both sides
// in one process has no peer).
func (h *Host) LoadRemote(md []byte) error {
	if !json.Valid(md) {
		return fmt.Errorf("transfer: remote metadata is not JSON")
	}
	h.mu.Lock()
	h.remoteMD = append([]byte(nil), md...)
	h.mu.Unlock()
	return nil
}

// Block implements oracle.Memory.
func (h *Host) Block(side xfer.Side, rank, region, block int) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	buf := h.buf(side, rank, region)
	if buf == nil {
		return nil
	}
	r := h.regs[sideIndex(side)][rank].Regions[region]
	lo := int64(block) * r.BlockLen
	if block < 0 || lo+r.BlockLen > int64(len(buf)) {
		return nil
	}
	return buf[lo : lo+r.BlockLen : lo+r.BlockLen]
}

// slice returns the bytes of one side of a descriptor after validating it.
func (h *Host) slice(side xfer.Side, rank int, at xfer.Loc, n int64) ([]byte, error) {
	_, reg, err := regionOf(h.regs[sideIndex(side)], side, rank, at.Region)
	if err != nil {
		return nil, err
	}
	if err := checkRange(side, rank, reg, at.Offset, n); err != nil {
		return nil, err
	}
	buf := h.buf(side, rank, at.Region)
	return buf[at.Offset : at.Offset+n : at.Offset+n], nil
}

// limits is one side of a registered rank as Prepare checks descriptors
// against it (no regions where the rank is not registered).
func (h *Host) limits(side xfer.Side, rank int) limits {
	l := limits{side: side, rank: rank, why: h}
	if i := sideIndex(side); rank >= 0 && rank < len(h.sizes[i]) {
		l.size, l.mem = h.sizes[i][rank], h.bufs[i][rank]
	}
	return l
}

// refuse implements refuser with slice's error for the descriptor.
func (h *Host) refuse(side xfer.Side, rank int, at xfer.Loc, n int64) error {
	_, err := h.slice(side, rank, at, n)
	return err
}

// Prepare validates every descriptor against both sides' regions and
// groups the pairs into per-layer batches.
func (h *Host) Prepare(x *xfer.Transfer) (*Prepared, error) {
	return h.prepare(x, func(rank int) limits { return h.limits(xfer.P, rank) })
}

// prepare validates D's side of every descriptor against D's registered
// regions and P's side against src's limits for the P rank, and groups the
// pairs into per-layer batches of copy operations.
func (h *Host) prepare(x *xfer.Transfer, src func(rank int) limits) (*Prepared, error) {
	start := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &Prepared{x: x}
	for _, rp := range x.RankPairs {
		pl, dl := src(rp.P), h.limits(xfer.D, rp.D)
		if _, err := p.addRankPair(rp, h.kindOf, &pl, &dl, true); err != nil {
			return nil, err
		}
	}
	p.prepUS = float64(h.clock().Sub(start).Nanoseconds()) / 1e3
	return p, nil
}

// Post copies every rank pair in its own goroutine; a large batch is
// split over the cores the rank pairs leave free, as a NIC or copy engine
// moves many descriptors at once.
func (h *Host) Post(p *Prepared, notif string) (Handle, error) {
	workers := max(1, runtime.GOMAXPROCS(0)/max(1, len(p.ranks)))
	return h.post(p, notif, func(ro rankOps, start time.Time) ([]event.BatchData, error) {
		return runBatches(ro, start, h.clock, func(b batch) error {
			copyOps(&ro, b.ops, b.bytes, workers)
			return nil
		})
	})
}

// maxNotifs bounds the notifications kept until read.
const maxNotifs = 1024

// parallelCopyBytes is the smallest batch worth splitting over workers.
const parallelCopyBytes = 1 << 20

// copyOps copies a batch's descriptors of one rank pair, over up to
// workers goroutines in runs of about equal bytes when the batch is large.
func copyOps(ro *rankOps, ops []copyOp, bytes int64, workers int) {
	run := func(ops []copyOp) {
		for _, op := range ops {
			copy(ro.dst.bytes(op.dst, op.n), ro.src.bytes(op.src, op.n))
		}
	}
	if workers <= 1 || bytes < parallelCopyBytes || len(ops) < 2 {
		run(ops)
		return
	}
	share := bytes/int64(workers) + 1
	var wg sync.WaitGroup
	for lo := 0; lo < len(ops); {
		hi, n := lo, int64(0)
		for hi < len(ops) && (hi == lo || n < share) {
			n += ops[hi].n
			hi++
		}
		wg.Add(1)
		go func(ops []copyOp) {
			defer wg.Done()
			run(ops)
		}(ops[lo:hi])
		lo = hi
	}
	wg.Wait()
}

// post runs each rank pair's work in its own goroutine and completes the
// transfer when all are done; the first error fails it.
func (h *Host) post(p *Prepared, notif string, run func(ro rankOps, start time.Time) ([]event.BatchData, error)) (Handle, error) {
	start := h.clock()
	x := &hostXfer{done: make(chan struct{})}
	h.mu.Lock()
	h.next++
	id := h.next
	h.xfers[id] = x
	h.mu.Unlock()
	results := make([][]event.BatchData, len(p.ranks))
	errs := make([]error, len(p.ranks))
	var wg sync.WaitGroup
	for i, ro := range p.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = run(ro, start)
		}()
	}
	postUS := float64(h.clock().Sub(start).Nanoseconds()) / 1e3
	go func() {
		wg.Wait()
		end := h.clock()
		x.stats = Stats{Bytes: p.bytes, Descs: p.descs, Merged: p.merged, PrepUS: p.prepUS, PostUS: postUS,
			TransferUS: float64(end.Sub(start).Nanoseconds()) / 1e3, Timing: event.Measured, Source: "host"}
		for _, r := range results {
			x.stats.Batches = append(x.stats.Batches, r...)
		}
		for _, err := range errs {
			if err != nil && x.err == nil {
				x.err = err
			}
		}
		h.mu.Lock()
		if notif != "" && x.err == nil {
			if len(h.notifs) >= maxNotifs { // nobody reads them: keep the newest
				h.notifs = h.notifs[1:]
			}
			h.notifs = append(h.notifs, notif)
		}
		h.mu.Unlock()
		close(x.done)
	}()
	return id, nil
}

// runBatches moves one rank pair's batches in order, timing each.
func runBatches(ro rankOps, start time.Time, clock func() time.Time, move func(batch) error) ([]event.BatchData, error) {
	out := make([]event.BatchData, 0, len(ro.batches))
	for _, b := range ro.batches {
		t0 := clock()
		if err := move(b); err != nil {
			return out, err
		}
		t1 := clock()
		out = append(out, event.BatchData{PRank: ro.p, DRank: ro.d, PGroup: b.pGroup, DGroup: b.dGroup, Layer: b.layer, Kind: b.kind,
			Descs: b.descs, Bytes: b.bytes, StartNS: t0.Sub(start).Nanoseconds(), EndNS: t1.Sub(start).Nanoseconds(), Timing: event.Measured})
	}
	return out, nil
}

// Poll reports a posted transfer's state without blocking.
func (h *Host) Poll(id Handle) (bool, *Stats, error) {
	h.mu.Lock()
	x, ok := h.xfers[id]
	h.mu.Unlock()
	if !ok {
		return false, nil, fmt.Errorf("transfer: no transfer %d", id)
	}
	select {
	case <-x.done:
		h.mu.Lock()
		delete(h.xfers, id)
		h.mu.Unlock()
		return true, &x.stats, x.err
	default:
		return false, nil, nil
	}
}

// Notifications implements Backend.
func (h *Host) Notifications() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.notifs
	h.notifs = nil
	return out
}

// Close drops every buffer.
func (h *Host) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bufs, h.sizes, h.regs = [2][][][]byte{}, [2][][]int64{}, [2][]*xfer.Registration{}
	h.allocated = 0
	return nil
}

// Done returns a channel closed when the transfer completes (nil for an
// unknown handle).
func (h *Host) Done(id Handle) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if x, ok := h.xfers[id]; ok {
		return x.done
	}
	return nil
}

// Wait waits for a transfer to complete: on its completion channel where
// the backend has one (Host), by polling otherwise (NIXL).
func Wait(b Backend, id Handle) (*Stats, error) { return WaitFor(b, id, 0) }

// WaitFor is Wait with a limit (0: none). A transfer still pending at the
// limit is cancelled where the backend can (NIXL releases its requests)
// and reported as an error.
func WaitFor(b Backend, id Handle, limit time.Duration) (*Stats, error) {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	if d, ok := b.(interface{ Done(Handle) <-chan struct{} }); ok {
		if ch := d.Done(id); ch != nil {
			if limit > 0 {
				select {
				case <-ch:
				case <-time.After(limit):
				}
			} else {
				<-ch
			}
		}
	}
	for {
		done, st, err := b.Poll(id)
		if done || err != nil {
			return st, err
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			if c, ok := b.(interface{ Cancel(Handle) error }); ok {
				c.Cancel(id)
			}
			return nil, fmt.Errorf("transfer: transfer %d did not complete in %s", id, limit)
		}
		time.Sleep(20 * time.Microsecond)
	}
}
