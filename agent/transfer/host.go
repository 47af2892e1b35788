package transfer

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/xfer"
)

// Host is the pure-Go backend: every registered region is a host-memory
// buffer and every descriptor pair a copy. It is safe for concurrent use.
type Host struct {
	mu        sync.Mutex
	regs      map[xfer.Side][]*xfer.Registration
	mem       map[memKey][]byte
	limit     int64 // bytes Register may allocate in all
	allocated int64
	xfers     map[Handle]*hostXfer
	next      Handle
	notifs    []string
	remoteMD  []byte
	kindOf    func(layer string) string
	clock     func() time.Time
}

type memKey struct {
	side         xfer.Side
	rank, region int
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
	return &Host{regs: map[xfer.Side][]*xfer.Registration{}, mem: map[memKey][]byte{}, limit: limit,
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
		list := h.regs[r.Side]
		for len(list) <= r.Rank {
			list = append(list, nil)
		}
		list[r.Rank] = r
		h.regs[r.Side] = list
		for _, reg := range r.Regions {
			h.mem[memKey{r.Side, r.Rank, reg.Index}] = make([]byte, reg.Bytes())
		}
	}
	h.allocated += need
	return nil
}

// Metadata is the version-15 metadata of every registered rank, as JSON.
func (h *Host) Metadata() ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	type sideMD struct {
		Side  xfer.Side       `json:"side"`
		Ranks []xfer.Metadata `json:"ranks"`
	}
	var out []sideMD
	for _, side := range []xfer.Side{xfer.P, xfer.D} {
		var md sideMD
		md.Side = side
		for _, r := range h.regs[side] {
			if r != nil {
				md.Ranks = append(md.Ranks, xfer.MetadataOf(r))
			}
		}
		if len(md.Ranks) > 0 {
			out = append(out, md)
		}
	}
	return json.Marshal(out)
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
	buf, ok := h.mem[memKey{side, rank, region}]
	if !ok {
		return nil
	}
	r := h.regs[side][rank].Regions[region]
	lo := int64(block) * r.BlockLen
	if block < 0 || lo+r.BlockLen > int64(len(buf)) {
		return nil
	}
	return buf[lo : lo+r.BlockLen : lo+r.BlockLen]
}

// slice returns the bytes of one side of a descriptor after validating it.
func (h *Host) slice(side xfer.Side, rank int, at xfer.Loc, n int64) ([]byte, error) {
	_, reg, err := regionOf(h.regs[side], side, rank, at.Region)
	if err != nil {
		return nil, err
	}
	if err := checkRange(side, rank, reg, at.Offset, n); err != nil {
		return nil, err
	}
	buf := h.mem[memKey{side, rank, at.Region}]
	return buf[at.Offset : at.Offset+n : at.Offset+n], nil
}

// Prepare validates every descriptor against both sides' regions and
// groups the pairs into per-layer batches.
func (h *Host) Prepare(x *xfer.Transfer) (*Prepared, error) {
	return h.prepare(x, func(rank int, q xfer.Pair) ([]byte, error) { return h.slice(xfer.P, rank, q.Src, q.Len) })
}

// prepare validates D's side of every descriptor here and P's side with
// src, and groups the pairs into per-layer batches.
func (h *Host) prepare(x *xfer.Transfer, src func(rank int, q xfer.Pair) ([]byte, error)) (*Prepared, error) {
	start := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &Prepared{x: x}
	for _, rp := range x.RankPairs {
		batches, bytes, err := group(rp.Pairs, h.kindOf, func(q xfer.Pair) (copyOp, error) {
			s, err := src(rp.P, q)
			if err != nil {
				return copyOp{}, err
			}
			dst, err := h.slice(xfer.D, rp.D, q.Dst, q.Len)
			if err != nil {
				return copyOp{}, err
			}
			return copyOp{src: s, dst: dst, pair: q}, nil
		})
		if err != nil {
			return nil, err
		}
		merged := xfer.MergedCount(rp.Pairs)
		p.ranks = append(p.ranks, rankOps{p: rp.P, d: rp.D, batches: batches, merged: merged})
		p.descs += len(rp.Pairs)
		p.merged += merged
		p.bytes += bytes
	}
	p.prepUS = float64(h.clock().Sub(start).Nanoseconds()) / 1e3
	return p, nil
}

// Post copies every rank pair in its own goroutine.
func (h *Host) Post(p *Prepared, notif string) (Handle, error) {
	return h.post(p, notif, func(ro rankOps, start time.Time) ([]event.BatchData, error) {
		return runBatches(ro, start, h.clock, func(b batch) error {
			for _, op := range b.ops {
				copy(op.dst, op.src)
			}
			return nil
		})
	})
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
			TransferUS: float64(end.Sub(start).Nanoseconds()) / 1e3, Timing: event.Measured}
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
			Descs: len(b.ops), Bytes: b.bytes, StartNS: t0.Sub(start).Nanoseconds(), EndNS: t1.Sub(start).Nanoseconds(), Timing: event.Measured})
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
	h.mem, h.regs = map[memKey][]byte{}, map[xfer.Side][]*xfer.Registration{}
	h.allocated = 0
	return nil
}

// Wait polls a transfer until it completes (a helper for callers that have
// nothing else to do meanwhile).
func Wait(b Backend, id Handle) (*Stats, error) {
	for {
		done, st, err := b.Poll(id)
		if done || err != nil {
			return st, err
		}
		time.Sleep(20 * time.Microsecond)
	}
}
