//go:build nixl && cgo

package transfer

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/xfer"
)

// HaveNIXL reports whether this binary was built with the NIXL backend.
const HaveNIXL = true

// NIXL is the backend that moves bytes through NIXL's UCX backend. Both
// sides of a P/D pair live in this process as two NIXL agents,
// "<name>-P" holding the P ranks' regions and "<name>-D" the D ranks'; each
// region is page-aligned host memory (DRAM) registered with its agent, the
// rank as device id. A pull transfer is a READ posted by the D agent, a push
// a WRITE posted by the P agent, one NIXL request per rank pair. It is safe
// for concurrent use.
//
// NIXL reports completion per request, never per descriptor, so the
// per-batch times it reports are synthesized (see Poll).
type NIXL struct {
	mu       sync.Mutex
	agents   [2]*nixlAgent    // indexed by nixlSideIndex; nil for a side in another process
	peers    [2]*nixlPeerSide // a side in another process, once its hello is loaded
	kindOf   func(layer string) string
	regs     map[xfer.Side][]*xfer.Registration
	mem      [2][][][]byte    // views of C memory: agent index -> rank -> region id
	sizes    [2][][]int64     // their sizes, for Prepare
	bufs     []unsafe.Pointer // every allocation, freed by Close
	prepared map[*Prepared][]*nixlReq
	lists    map[nixlListKey]*nixlList // prepared descriptor lists, per initiator, side and rank
	stale    []cDlist                  // lists a later request outgrew, released by Close
	xfers    map[Handle]*nixlXfer
	lidx     []int32 // scratch for one request's list indices (makeXferReq copies them)
	ridx     []int32
	next     Handle
	closed   bool
	clock    func() time.Time
}

// nixlPeerSide is the other process's side: its NIXL agent and the
// regions it advertised (real base addresses and sizes, per rank), which
// every remote descriptor is checked against before it reaches NIXL.
type nixlPeerSide struct {
	agent   string
	regions [][]nixlRegion // [rank][region]
	sizes   [][]int64      // [rank][region]: the regions' bytes, for Prepare
}

// nixlRegion is one advertised region.
type nixlRegion struct {
	base  uint64
	bytes int64
}

// nixlListKey names one prepared list: the agent that prepared it (the
// initiator) and the rank whose memory it describes.
type nixlListKey struct {
	agent string
	side  xfer.Side
	rank  int
}

// nixlList is a prepared list and its layout.
type nixlList struct {
	layout *dlistLayout
	h      cDlist
}

// nixlXfer is a posted transfer.
type nixlXfer struct {
	p    *Prepared
	reqs []*nixlReq
}

// NewNIXL creates the two agents of a backend, "<name>-P" and "<name>-D",
// each with a UCX backend. kinds names each layer's kind for batch events.
// It fails, naming the plugins NIXL found, when the UCX plugin cannot be
// loaded (NIXL_PLUGIN_DIR points NIXL at it).
func NewNIXL(name string, kinds map[string]string) (Backend, error) {
	n, err := newNIXL(name, kinds, xfer.P, xfer.D)
	if err != nil {
		return nil, err // not a nil *NIXL in a non-nil Backend
	}
	return n, nil
}

// newNIXL creates a backend with an agent "<name>-<side>" for each side
// given; the other side, if any, lives in another process (nixl_peer.go).
func newNIXL(name string, kinds map[string]string, sides ...xfer.Side) (*NIXL, error) {
	if name == "" {
		name = "kvscope"
	}
	k := make(map[string]string, len(kinds))
	for l, v := range kinds {
		k[l] = v
	}
	n := &NIXL{kindOf: func(l string) string { return k[l] }, regs: map[xfer.Side][]*xfer.Registration{},
		prepared: map[*Prepared][]*nixlReq{}, lists: map[nixlListKey]*nixlList{}, xfers: map[Handle]*nixlXfer{}, clock: time.Now}
	for _, side := range sides {
		i, err := nixlSideIndex(side)
		if err != nil {
			return nil, err
		}
		a := &nixlAgent{side: side, name: name + "-" + string(side)}
		if err := a.create("UCX"); err != nil {
			n.Close()
			return nil, nixlHint(err)
		}
		n.agents[i] = a
	}
	return n, nil
}

// Name implements Backend.
func (n *NIXL) Name() string { return "nixl/UCX" }

// MemoryKind implements Backend: regions are host memory.
func (n *NIXL) MemoryKind() string { return "DRAM" }

// nixlIndex is a known side's agent index.
func nixlIndex(s xfer.Side) int {
	if s == xfer.D {
		return 1
	}
	return 0
}

// nixlSideIndex is a side's agent.
func nixlSideIndex(s xfer.Side) (int, error) {
	switch s {
	case xfer.P:
		return 0, nil
	case xfer.D:
		return 1, nil
	}
	return 0, fmt.Errorf("transfer: nixl: unknown side %q", s)
}

// Register allocates every region of the given ranks in page-aligned host
// memory and registers each rank's regions with its side's agent. Register
// before Metadata: a peer sees only what was registered when the metadata
// was taken.
func (n *NIXL) Register(regs []*xfer.Registration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errNIXLClosed
	}
	for _, r := range regs {
		i, err := nixlSideIndex(r.Side)
		if err != nil {
			return err
		}
		if r.Rank < 0 {
			return fmt.Errorf("transfer: nixl: %s rank %d", r.Side, r.Rank)
		}
		if n.agents[i] == nil {
			return fmt.Errorf("transfer: nixl: %s rank %d: this process holds no %s agent (that side is the peer's)", r.Side, r.Rank, r.Side)
		}
		if list := n.regs[r.Side]; r.Rank < len(list) && list[r.Rank] != nil {
			return fmt.Errorf("transfer: nixl: %s rank %d is already registered", r.Side, r.Rank)
		}
		var rl nixlRegList
		views, sizes := make([][]byte, len(r.Regions)), make([]int64, len(r.Regions))
		for j, reg := range r.Regions {
			if reg.Index != j {
				return fmt.Errorf("transfer: nixl: %s rank %d lists region %d at position %d", r.Side, r.Rank, reg.Index, j)
			}
			size := reg.Bytes()
			if size <= 0 {
				return fmt.Errorf("transfer: nixl: %s rank %d region %d has %d bytes", r.Side, r.Rank, j, size)
			}
			p, err := nixlAlloc(size)
			if err != nil {
				return fmt.Errorf("%s rank %d region %d: %w", r.Side, r.Rank, j, err)
			}
			n.bufs = append(n.bufs, p) // freed by Close, registered or not
			views[j], sizes[j] = unsafe.Slice((*byte)(p), size), size
			rl.addr = append(rl.addr, uint64(uintptr(p)))
			rl.len = append(rl.len, uint64(size))
			rl.dev = append(rl.dev, uint64(r.Rank))
		}
		a := n.agents[i]
		if len(rl.addr) > 0 {
			if err := a.register(rl, false); err != nil {
				return fmt.Errorf("%s rank %d: %w", r.Side, r.Rank, err)
			}
			a.regs = append(a.regs, rl)
		}
		for len(n.mem[i]) <= r.Rank {
			n.mem[i], n.sizes[i] = append(n.mem[i], nil), append(n.sizes[i], nil)
		}
		n.mem[i][r.Rank], n.sizes[i][r.Rank] = views, sizes
		list := n.regs[r.Side]
		for len(list) <= r.Rank {
			list = append(list, nil)
		}
		list[r.Rank] = r
		n.regs[r.Side] = list
	}
	return nil
}

// nixlMD is one agent's metadata as Metadata encodes it.
type nixlMD struct {
	Agent string    `json:"agent"`
	Side  xfer.Side `json:"side"`
	MD    []byte    `json:"nixl_md"` // NIXL's getLocalMD blob
}

// Metadata is both agents' NIXL metadata (getLocalMD), as JSON.
func (n *NIXL) Metadata() ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errNIXLClosed
	}
	var out []nixlMD
	for _, a := range n.agents {
		if a == nil {
			continue
		}
		md, err := a.localMD()
		if err != nil {
			return nil, err
		}
		out = append(out, nixlMD{Agent: a.name, Side: a.side, MD: md})
	}
	return json.Marshal(out)
}

// LoadRemote loads each agent's metadata into the other agent of this
// backend (loadRemoteMD), so that D can read from P and P can write to D.
// Both sides live in this process: metadata of any other agent is refused.
func (n *NIXL) LoadRemote(md []byte) error {
	var mds []nixlMD
	if err := json.Unmarshal(md, &mds); err != nil {
		return fmt.Errorf("transfer: nixl: remote metadata: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errNIXLClosed
	}
	for _, m := range mds {
		i, err := nixlSideIndex(m.Side)
		if err != nil {
			return err
		}
		if n.agents[0] == nil || n.agents[1] == nil {
			return errors.New("transfer: nixl: this backend holds one side: its peer's metadata comes through the two-agent handshake")
		}
		if m.Agent != n.agents[i].name {
			return fmt.Errorf("transfer: nixl: metadata of agent %q: this backend holds both sides in one process (%s, %s) and loads only its own agents' metadata",
				m.Agent, n.agents[0].name, n.agents[1].name)
		}
		loader := n.agents[1-i]
		got, err := loader.loadMD(m.MD)
		if err != nil {
			return err
		}
		if got != m.Agent {
			return fmt.Errorf("transfer: nixl: metadata labelled %q is agent %q's", m.Agent, got)
		}
		loader.peer = got
	}
	return nil
}

// Block implements oracle.Memory: a view of the registered host memory.
func (n *NIXL) Block(side xfer.Side, rank, region, block int) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	buf := n.view(side, rank, region)
	if buf == nil {
		return nil
	}
	r := n.regs[side][rank].Regions[region]
	lo := int64(block) * r.BlockLen
	if block < 0 || lo+r.BlockLen > int64(len(buf)) {
		return nil
	}
	return buf[lo : lo+r.BlockLen : lo+r.BlockLen]
}

// view is a registered region's memory in this process, or nil.
func (n *NIXL) view(side xfer.Side, rank, region int) []byte {
	i, err := nixlSideIndex(side)
	if err != nil || rank < 0 || rank >= len(n.mem[i]) || region < 0 || region >= len(n.mem[i][rank]) {
		return nil
	}
	return n.mem[i][rank][region]
}

// limits is one side of a rank as Prepare checks descriptors against it:
// this process's registered regions (with their memory) or, for the
// peer's side, the regions the peer advertised. The rank's regions are
// looked up once, not per descriptor.
func (n *NIXL) limits(side xfer.Side, rank int) limits {
	l := limits{side: side, rank: rank, why: n}
	i, err := nixlSideIndex(side)
	switch {
	case err != nil || rank < 0:
	case n.agents[i] == nil:
		if ps := n.peers[i]; ps != nil && rank < len(ps.sizes) {
			l.size = ps.sizes[rank]
		}
	case rank < len(n.sizes[i]):
		l.size, l.mem = n.sizes[i][rank], n.mem[i][rank]
	}
	return l
}

// refuse implements refuser: a descriptor is checked against this
// process's registered (and allocated) regions or, for the peer's side,
// against the regions the peer advertised.
func (n *NIXL) refuse(side xfer.Side, rank int, at xfer.Loc, l int64) error {
	i, err := nixlSideIndex(side)
	if err != nil {
		return err
	}
	if n.agents[i] == nil {
		_, err := n.peerAddr(side, rank, at.Region, at.Offset, l)
		return err
	}
	_, reg, err := regionOf(n.regs[side], side, rank, at.Region)
	if err != nil {
		return err
	}
	if err := checkRange(side, rank, reg, at.Offset, l); err != nil {
		return err
	}
	if buf := n.view(side, rank, at.Region); at.Offset > int64(len(buf))-l {
		return fmt.Errorf("transfer: %s rank %d region %d: descriptor [%d, %d) outside its %d allocated bytes", side, rank, at.Region, at.Offset, at.Offset+l, len(buf))
	}
	return nil
}

// peerAddr is the address of a descriptor in the peer's memory, after
// checking it lies inside a region the peer advertised.
func (n *NIXL) peerAddr(side xfer.Side, rank, region int, off, l int64) (uint64, error) {
	i, err := nixlSideIndex(side)
	if err != nil {
		return 0, err
	}
	ps := n.peers[i]
	if ps == nil {
		return 0, fmt.Errorf("transfer: nixl: no %s agent loaded: the two-agent handshake comes first", side)
	}
	if rank < 0 || rank >= len(ps.regions) {
		return 0, fmt.Errorf("transfer: nixl: %s rank %d: %s advertised %d ranks", side, rank, ps.agent, len(ps.regions))
	}
	if region < 0 || region >= len(ps.regions[rank]) {
		return 0, fmt.Errorf("transfer: nixl: %s rank %d region %d: %s advertised %d regions", side, rank, region, ps.agent, len(ps.regions[rank]))
	}
	r := ps.regions[rank][region]
	if l <= 0 || off < 0 || off > r.bytes-l {
		return 0, fmt.Errorf("transfer: nixl: %s rank %d region %d: descriptor [%d, %d) outside the %d bytes %s advertised", side, rank, region, off, off+l, r.bytes, ps.agent)
	}
	return r.base + uint64(off), nil
}

// nixlAddr is the address of a slice's first byte.
func nixlAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// Prepare validates every descriptor against both sides' regions, groups
// the pairs into per-layer batches as the host backend does, and creates
// one NIXL request per rank pair (createXferReq): a READ by the D agent
// for pull, a WRITE by the P agent for push. PrepUS covers both.
func (n *NIXL) Prepare(x *xfer.Transfer) (*Prepared, error) {
	start := n.clock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errNIXLClosed
	}
	// Pull: D's agent READs from P; push: P's agent WRITEs to D.
	ii, ti, op := 1, 0, nixlRead
	if x.Mode == xfer.Push {
		ii, ti, op = 0, 1, nixlWrite
	}
	initiator := n.agents[ii]
	if initiator == nil {
		return nil, fmt.Errorf("transfer: nixl: a %s transfer is initiated by %s's agent, which lives in the peer's process", x.Mode, []xfer.Side{xfer.P, xfer.D}[ii])
	}
	var target string
	switch {
	case n.agents[ti] != nil:
		target = n.agents[ti].name
	case n.peers[ti] != nil:
		target = n.peers[ti].agent
	}
	if target == "" || initiator.peer != target {
		return nil, fmt.Errorf("transfer: nixl: agent %s has not loaded its peer's metadata: exchange it after Register (LoadRemote(Metadata()) in one process, the handshake between two)", initiator.name)
	}
	p := &Prepared{x: x}
	var reqs []*nixlReq
	fail := func(err error) (*Prepared, error) {
		nixlRelease(reqs)
		return nil, err
	}
	for _, rp := range x.RankPairs {
		pl, dl := n.limits(xfer.P, rp.P), n.limits(xfer.D, rp.D)
		if _, err := p.addRankPair(rp, n.kindOf, &pl, &dl, false); err != nil {
			return fail(err)
		}
		if len(rp.Pairs) == 0 {
			continue
		}
		pEnd := nixlEnd{xfer.P, rp.P, func(q *xfer.Pair) xfer.Loc { return q.Src }}
		dEnd := nixlEnd{xfer.D, rp.D, func(q *xfer.Pair) xfer.Loc { return q.Dst }}
		local, remote := dEnd, pEnd
		if op == nixlWrite {
			local, remote = pEnd, dEnd
		}
		req := &nixlReq{rank: len(p.ranks) - 1}
		reqs = append(reqs, req)
		if err := n.makeReq(req, initiator, op, target, rp.Pairs, local, remote); err != nil {
			return fail(fmt.Errorf("rank pair P%d→D%d: %w", rp.P, rp.D, err))
		}
	}
	p.prepUS = float64(n.clock().Sub(start).Nanoseconds()) / 1e3
	n.prepared[p] = reqs
	return p, nil
}

// nixlEnd is one side of a rank pair: its rank and where a pair lies on it.
type nixlEnd struct {
	side xfer.Side
	rank int
	at   func(*xfer.Pair) xfer.Loc
}

// makeReq makes one rank pair's request from the pairs' indices into both
// sides' prepared lists (makeXferReq), preparing a list first where this
// request needs entries it lacks. The indices live in the backend's
// scratch buffers: makeXferReq copies them.
func (n *NIXL) makeReq(req *nixlReq, a *nixlAgent, op int, target string, pairs []xfer.Pair, local, remote nixlEnd) error {
	n.lidx, n.ridx = slices.Grow(n.lidx[:0], len(pairs))[:len(pairs)], slices.Grow(n.ridx[:0], len(pairs))[:len(pairs)]
	ll, err := n.index(a, "", local, pairs, n.lidx)
	if err != nil {
		return err
	}
	rl, err := n.index(a, target, remote, pairs, n.ridx)
	if err != nil {
		return err
	}
	req.x, err = a.makeXfer(op, ll.h, n.lidx, rl.h, n.ridx)
	return err
}

// index writes the pairs' entries in agent a's prepared list of one
// rank's memory into out and returns that list. A list lacking a class
// the pairs need is replaced first (see list).
func (n *NIXL) index(a *nixlAgent, remote string, e nixlEnd, pairs []xfer.Pair, out []int32) (*nixlList, error) {
	cur := n.lists[nixlListKey{a.name, e.side, e.rank}]
	if cur != nil {
		missing, err := cur.layout.index(pairs, e.at, out)
		if err != nil || missing < 0 {
			return cur, err
		}
	}
	l, err := n.list(a, remote, e, pairs, cur)
	if err != nil {
		return nil, err
	}
	return l, l.layout.indexAll(pairs, e.at, out)
}

// list prepares agent a's list of one rank's memory (prepXferDlist: its
// own memory when remote is "", else the named peer's, as its loaded
// metadata describes it) with every class of pairs and of cur, the list
// it replaces (kept until Close), and keeps it for later requests. Every
// entry lies inside a region: this process's registered memory, or what
// the peer advertised.
func (n *NIXL) list(a *nixlAgent, remote string, e nixlEnd, pairs []xfer.Pair, cur *nixlList) (*nixlList, error) {
	mine := n.agents[nixlIndex(e.side)] != nil
	regionBytes := func(region int) (int64, error) {
		if mine {
			_, r, err := regionOf(n.regs[e.side], e.side, e.rank, region)
			return r.Bytes(), err
		}
		ps := n.peers[nixlIndex(e.side)]
		if ps == nil || e.rank >= len(ps.regions) || region < 0 || region >= len(ps.regions[e.rank]) {
			return 0, fmt.Errorf("transfer: nixl: %s rank %d region %d was not advertised", e.side, e.rank, region)
		}
		return ps.regions[e.rank][region].bytes, nil
	}
	var old *dlistLayout
	if cur != nil {
		old = cur.layout
	}
	l, err := newLayout(old, pairs, e.at, regionBytes)
	if err != nil {
		return nil, err
	}
	addr, lens := make([]uint64, len(l.off)), make([]uint64, len(l.off))
	for i := range l.off {
		if mine {
			addr[i] = nixlAddr(n.view(e.side, e.rank, l.region[i])) + uint64(l.off[i])
		} else if addr[i], err = n.peerAddr(e.side, e.rank, l.region[i], l.off[i], l.len[i]); err != nil {
			return nil, err
		}
		lens[i] = uint64(l.len[i])
	}
	h, err := a.prepDlist(remote, addr, lens, uint64(e.rank))
	if err != nil {
		return nil, err
	}
	if cur != nil {
		n.stale = append(n.stale, cur.h)
	}
	nl := &nixlList{layout: l, h: h}
	n.lists[nixlListKey{a.name, e.side, e.rank}] = nl
	return nl, nil
}

// dropLists releases the prepared lists of one side (every side when
// side is ""), and the outgrown ones: the peer they describe is gone.
func (n *NIXL) dropLists(side xfer.Side) error {
	var errs []error
	for k, l := range n.lists {
		if side == "" || k.side == side {
			errs = append(errs, nixlFreeDlist(l.h))
			delete(n.lists, k)
		}
	}
	for _, h := range n.stale {
		errs = append(errs, nixlFreeDlist(h))
	}
	n.stale = nil
	return errors.Join(errs...)
}

// Post posts every rank pair's request, each carrying notif (when not
// empty) to the remote agent, and returns at once.
func (n *NIXL) Post(p *Prepared, notif string) (Handle, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return 0, errNIXLClosed
	}
	reqs, ok := n.prepared[p]
	if !ok {
		return 0, errors.New("transfer: nixl: Post of a transfer this backend did not prepare, or posted already")
	}
	delete(n.prepared, p)
	for _, r := range reqs {
		st, err := r.post(notif)
		if err != nil {
			nixlRelease(reqs)
			return 0, err
		}
		r.done = st == nixlSuccess
	}
	n.next++
	n.xfers[n.next] = &nixlXfer{p: p, reqs: reqs}
	return n.next, nil
}

// Poll checks every request of a posted transfer (getXferStatus) without
// blocking. Once all are done it reads NIXL's telemetry of each request
// (the agents capture it), releases them and reports the statistics.
//
// The totals are NIXL's own, measured by NIXL (Timing event.Measured,
// Source "nixl"): PostUS is the sum of the requests' postDuration,
// TransferUS spans the earliest request's start to the latest one's
// start + xferDuration, Merged is the sum of descCount (the descriptors
// NIXL posted after merging contiguous ones) and Bytes the sum of
// totalBytes. NIXL's xferDuration ends when a status check saw the request
// complete, so it includes the caller's polling lateness, as NIXL says.
// PrepUS stays kvscope's (validation plus createXferReq, timed in Go).
//
// Per-batch times are synthesized: NIXL completes a request as a whole, so
// each rank pair's interval as NIXL measured it (start to start +
// xferDuration, relative to the earliest start) is spread over its batches
// in order, in proportion to bytes. Every batch says event.Synthesized.
func (n *NIXL) Poll(h Handle) (bool, *Stats, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	x, ok := n.xfers[h]
	if !ok {
		return false, nil, fmt.Errorf("transfer: no transfer %d", h)
	}
	pending := false
	for _, r := range x.reqs {
		if r.done {
			continue
		}
		st, err := r.status()
		if err != nil {
			delete(n.xfers, h)
			nixlRelease(x.reqs)
			return true, nil, err
		}
		if st == nixlSuccess {
			r.done = true
		} else {
			pending = true
		}
	}
	if pending {
		return false, nil, nil
	}
	delete(n.xfers, h)
	p := x.p
	st := &Stats{Descs: p.descs, PrepUS: p.prepUS, Timing: event.Measured, Source: "nixl"}
	tel := make([]nixlTelem, len(x.reqs))
	var first, last uint64
	for i, r := range x.reqs {
		t, err := r.telemetry()
		if err != nil {
			nixlRelease(x.reqs)
			return true, nil, err
		}
		tel[i] = t
		if i == 0 || t.startUS < first {
			first = t.startUS
		}
		last = max(last, t.startUS+t.xferUS)
		st.PostUS += float64(t.postUS)
		st.Merged += int(t.descs)
		st.Bytes += int64(t.bytes)
	}
	for i, r := range x.reqs {
		from := int64(tel[i].startUS-first) * 1e3
		st.Batches = append(st.Batches, nixlSynthesize(p.ranks[r.rank], from, from+int64(tel[i].xferUS)*1e3)...)
	}
	st.TransferUS = float64(last - first)
	if st.Bytes != p.bytes {
		nixlRelease(x.reqs)
		return true, nil, fmt.Errorf("transfer: nixl: NIXL's telemetry counts %d bytes in the transfer's requests, kvscope posted %d", st.Bytes, p.bytes)
	}
	return true, st, nixlRelease(x.reqs)
}

// Cancel gives up a posted transfer: its requests are released, which
// makes NIXL cancel what is still under way.
func (n *NIXL) Cancel(h Handle) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	x, ok := n.xfers[h]
	if !ok {
		return fmt.Errorf("transfer: no transfer %d", h)
	}
	delete(n.xfers, h)
	return nixlRelease(x.reqs)
}

// nixlSynthesize lays a rank pair's batches over [from, to) nanoseconds, in
// order, each for its share of the bytes.
func nixlSynthesize(ro rankOps, from, to int64) []event.BatchData {
	var total int64
	for _, b := range ro.batches {
		total += b.bytes
	}
	out := make([]event.BatchData, 0, len(ro.batches))
	span := float64(max(to-from, 0))
	at := func(bytes int64) int64 {
		if total == 0 {
			return from
		}
		return from + int64(span*float64(bytes)/float64(total))
	}
	var cum int64
	for _, b := range ro.batches {
		lo := at(cum)
		cum += b.bytes
		out = append(out, event.BatchData{PRank: ro.p, DRank: ro.d, PGroup: b.pGroup, DGroup: b.dGroup, Layer: b.layer, Kind: b.kind,
			Descs: b.descs, Bytes: b.bytes, StartNS: lo, EndNS: at(cum), Timing: event.Synthesized})
	}
	return out
}

// Notifications returns the messages both agents received (getNotifs),
// ordered by agent, then sender. A pull's notification reaches the P agent,
// a push's the D agent, one per rank pair's request. A failure to collect
// them is not reported: a later call collects what arrives.
func (n *NIXL) Notifications() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	var out []string
	for _, a := range n.agents {
		if a == nil {
			continue
		}
		msgs, _ := a.notifs()
		out = append(out, msgs...)
	}
	return out
}

// Close releases every request, deregisters the memory, drops each agent's
// peer, destroys the agents and frees the buffers. It is safe to call twice.
func (n *NIXL) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	for p, reqs := range n.prepared {
		errs = append(errs, nixlRelease(reqs))
		delete(n.prepared, p)
	}
	for h, x := range n.xfers {
		errs = append(errs, nixlRelease(x.reqs))
		delete(n.xfers, h)
	}
	errs = append(errs, n.dropLists(""))
	for _, a := range n.agents {
		if a == nil {
			continue
		}
		for _, rl := range a.regs {
			errs = append(errs, a.register(rl, true))
		}
		a.regs = nil
	}
	for _, a := range n.agents {
		if a != nil && a.peer != "" {
			errs = append(errs, a.invalidate(a.peer))
			a.peer = ""
		}
	}
	for i, a := range n.agents {
		if a != nil {
			a.free()
			n.agents[i] = nil
		}
	}
	for _, p := range n.bufs {
		nixlFree(p)
	}
	n.bufs = nil
	n.mem, n.sizes, n.regs = [2][][][]byte{}, [2][][]int64{}, map[xfer.Side][]*xfer.Registration{}
	return errors.Join(errs...)
}

var errNIXLClosed = errors.New("transfer: nixl: the backend is closed")
