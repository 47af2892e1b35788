//go:build nixl && cgo

package transfer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"

	"github.com/kvscope/kvscope/core/xfer"
)

// Two agents over NIXL: each process holds one side's NIXL agent and
// registers only that side's regions. The TCP connection of package peer
// (peer_client.go, peer_server.go) is the control channel: D's hello
// carries D's agent name and getLocalMD blob, P loads it once the token is
// checked and answers with its version-15 metadata (real base addresses)
// and its own blob, which D loads once that metadata matches what D
// planned. Then D READs P's blocks (pull) over UCX, and P learns that each
// request's reads landed from the notifications D attaches to them.

// NewNIXLSide creates a backend holding one side of a two-agent
// deployment: an agent "<name>-<side>" with a UCX backend.
func NewNIXLSide(name string, side xfer.Side, kinds map[string]string) (NIXLSide, error) {
	n, err := newNIXL(name, kinds, side)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// SideMetadata is the version-15 metadata of one side's registered ranks,
// with the real base addresses of their regions in this process (the
// addresses the peer's descriptors name, as in vLLM's handshake).
func (n *NIXL) SideMetadata(side xfer.Side) []xfer.Metadata {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []xfer.Metadata
	for _, r := range n.regs[side] {
		if r == nil {
			continue
		}
		md := xfer.MetadataOf(r)
		for j := range md.BaseAddrs {
			md.BaseAddrs[j] = nixlAddr(n.view(side, r.Rank, j))
		}
		out = append(out, md)
	}
	return out
}

// local is the one agent of a one-sided backend.
func (n *NIXL) local() (*nixlAgent, error) {
	if (n.agents[0] == nil) == (n.agents[1] == nil) {
		return nil, errors.New("transfer: nixl: a two-agent handshake needs a backend holding one side")
	}
	if n.agents[0] != nil {
		return n.agents[0], nil
	}
	return n.agents[1], nil
}

// NIXLHello implements NIXLPeer: the agent's name and getLocalMD blob,
// taken after Register so that it describes the registered regions.
func (n *NIXL) NIXLHello() (NIXLHello, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return NIXLHello{}, errNIXLClosed
	}
	a, err := n.local()
	if err != nil {
		return NIXLHello{}, err
	}
	md, err := a.localMD()
	if err != nil {
		return NIXLHello{}, err
	}
	return NIXLHello{Agent: a.name, MD: md}, nil
}

// LoadPeer implements NIXLPeer. It checks the peer's advertised regions
// first (one entry per rank, in rank order, each region's base address and
// size), refuses a blob that is not the named agent's or that names this
// agent, drops a peer loaded before, and then loads the blob.
func (n *NIXL) LoadPeer(h NIXLHello, side xfer.Side, md []xfer.Metadata) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errNIXLClosed
	}
	a, err := n.local()
	if err != nil {
		return err
	}
	if side == a.side {
		return fmt.Errorf("transfer: nixl: the peer claims side %s, which is this agent's", side)
	}
	switch {
	case h.Agent == "":
		return errors.New("transfer: nixl: the peer's hello names no NIXL agent")
	case h.Agent == a.name:
		return fmt.Errorf("transfer: nixl: the peer's NIXL agent is named %q, as this one is: give each agent its own --name", h.Agent)
	case len(h.MD) == 0:
		return fmt.Errorf("transfer: nixl: agent %s sent no metadata blob", h.Agent)
	}
	regions, err := nixlAdvertised(h.Agent, md)
	if err != nil {
		return err
	}
	i := nixlIndex(side)
	if err := n.dropLists(side); err != nil {
		return fmt.Errorf("dropping the lists of %s's memory: %w", a.peer, err)
	}
	if old := a.peer; old != "" {
		// The peer came back (a new process, maybe a new blob): forget
		// the old one before loading the new.
		// NIXL drops a disconnected agent's metadata itself: NOT_FOUND
		// means it is gone already.
		var ne *NIXLError
		if err := a.invalidate(old); err != nil && !(errors.As(err, &ne) && ne.Status == nixlNotFound) {
			return fmt.Errorf("dropping %s's old metadata: %w", old, err)
		}
		a.peer, n.peers[i] = "", nil
	}
	got, err := a.loadMD(h.MD)
	if err != nil {
		return err
	}
	if got != h.Agent {
		a.invalidate(got)
		return fmt.Errorf("transfer: nixl: the hello names agent %q, but its metadata blob is agent %q's", h.Agent, got)
	}
	a.peer = got
	sizes := make([][]int64, len(regions))
	for r, rs := range regions {
		sizes[r] = make([]int64, len(rs))
		for j, reg := range rs {
			sizes[r][j] = reg.bytes
		}
	}
	n.peers[i] = &nixlPeerSide{agent: got, regions: regions, sizes: sizes}
	return nil
}

// nixlAdvertised turns a peer's version-15 metadata into its regions.
func nixlAdvertised(agent string, md []xfer.Metadata) ([][]nixlRegion, error) {
	out := make([][]nixlRegion, len(md))
	for rank, m := range md {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("transfer: nixl: %s's metadata, rank %d: %s", agent, rank, fmt.Sprintf(format, args...))
		}
		if m.TPRank != rank {
			return nil, bad("tp_rank %d at position %d", m.TPRank, rank)
		}
		if len(m.BaseAddrs) != len(m.BlockLens) {
			return nil, bad("%d base addresses for %d regions", len(m.BaseAddrs), len(m.BlockLens))
		}
		if m.NumBlocks <= 0 {
			return nil, bad("num_blocks %d", m.NumBlocks)
		}
		for j, base := range m.BaseAddrs {
			bl := m.BlockLens[j]
			if bl <= 0 || bl > math.MaxInt64/m.NumBlocks {
				return nil, bad("region %d: block_len %d × num_blocks %d", j, bl, m.NumBlocks)
			}
			size := bl * m.NumBlocks
			if base == 0 || base > math.MaxUint64-uint64(size) {
				return nil, bad("region %d: base address %#x for %d bytes", j, base, size)
			}
			out[rank] = append(out[rank], nixlRegion{base: base, bytes: size})
		}
	}
	return out, nil
}

// nixlHint adds the usual cause to an agent that could not be created
// because UCX_TLS leaves out tcp (NIXL's UCX backend needs it: without a
// transport that detects peer failure createBackend fails).
func nixlHint(err error) error {
	tls, set := os.LookupEnv("UCX_TLS")
	if !set || tls == "all" || strings.Contains(tls, "tcp") || strings.HasPrefix(tls, "^") {
		return err
	}
	return fmt.Errorf("%w (UCX_TLS=%s leaves out tcp, which NIXL's UCX backend needs: use UCX_TLS=tcp,self or tcp,shm,self)", err, tls)
}

// NIXLRemote is D's backend in two-agent mode over NIXL: D's regions
// registered with D's agent in this process, P's in the P agent's process,
// reached with NIXL_READ once the control channel's handshake loaded P's
// metadata. Prefill asks P to fill its blocks; a lost control connection
// is dialled again, with a new handshake (P may have restarted).
//
// With connector nixl-push the WRITEs are P's: Post asks P over the
// control channel to push the request it prefilled last, and the transfer
// is done once P reported NIXL's statistics and D's agent received the
// notification of every rank pair's WRITE (NIXL sends it after the data).
type NIXLRemote struct {
	*NIXL
	ctl *peerClient

	pmu    sync.Mutex
	pushes map[Handle]*nixlPush
	npush  Handle // push handles count down from -1: NIXL's count up
}

// nixlPush is a push P performs for D.
type nixlPush struct {
	notif string
	want  int // notifications: one per busy rank pair
	got   int
	done  chan struct{}
	st    *Stats
	err   error
}

// NewNIXLRemote makes D's backend, the P agent being at addr.
func NewNIXLRemote(name, addr, token string, kinds map[string]string) (Backend, error) {
	n, err := newNIXL(name, kinds, xfer.D)
	if err != nil {
		return nil, err
	}
	ctl := newPeerClient(addr, token)
	ctl.nixl = n
	return &NIXLRemote{NIXL: n, ctl: ctl, pushes: map[Handle]*nixlPush{}}, nil
}

// Prepare implements Backend. A pull is D's own READs; a push is checked
// here too (D's side against D's regions, P's against what P advertised)
// before P is asked to WRITE it.
func (r *NIXLRemote) Prepare(x *xfer.Transfer) (*Prepared, error) {
	if x.Mode != xfer.Push {
		return r.NIXL.Prepare(x)
	}
	start := r.clock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errNIXLClosed
	}
	p := &Prepared{x: x}
	for _, rp := range x.RankPairs {
		pl, dl := r.limits(xfer.P, rp.P), r.limits(xfer.D, rp.D)
		if _, err := p.addRankPair(rp, r.kindOf, &pl, &dl, false); err != nil {
			return nil, err
		}
	}
	p.prepUS = float64(r.clock().Sub(start).Nanoseconds()) / 1e3
	return p, nil
}

// Post implements Backend; a push asks P to WRITE and returns at once.
func (r *NIXLRemote) Post(p *Prepared, notif string) (Handle, error) {
	if p.x.Mode != xfer.Push {
		return r.NIXL.Post(p, notif)
	}
	if notif == "" {
		return 0, errors.New("transfer: nixl: a push needs a notification: D knows the WRITEs landed by it")
	}
	x := &nixlPush{notif: notif, done: make(chan struct{})}
	for _, rp := range p.ranks {
		if len(rp.batches) > 0 {
			x.want++
		}
	}
	r.pmu.Lock()
	r.npush--
	h := r.npush
	r.pushes[h] = x
	r.pmu.Unlock()
	go func() {
		defer close(x.done)
		x.st, x.err = r.ctl.push(notif)
	}()
	return h, nil
}

// Poll implements Backend. A push is done when P reported and every
// notification of it arrived.
func (r *NIXLRemote) Poll(h Handle) (bool, *Stats, error) {
	r.pmu.Lock()
	x, ok := r.pushes[h]
	r.pmu.Unlock()
	if !ok {
		return r.NIXL.Poll(h)
	}
	select {
	case <-x.done:
	default:
		return false, nil, nil
	}
	if x.err != nil {
		r.forget(h)
		return true, nil, x.err
	}
	for _, msg := range r.NIXL.Notifications() {
		if msg == x.notif {
			x.got++
		}
	}
	if x.got < x.want {
		return false, nil, nil
	}
	r.forget(h)
	return true, x.st, nil
}

// PeerPushes implements PeerPusher: P's agent can WRITE into this one.
func (r *NIXLRemote) PeerPushes() bool { return true }

// Cancel gives up a transfer: a push P still performs is forgotten here.
func (r *NIXLRemote) Cancel(h Handle) error {
	r.pmu.Lock()
	_, ok := r.pushes[h]
	r.pmu.Unlock()
	if ok {
		r.forget(h)
		return nil
	}
	return r.NIXL.Cancel(h)
}

func (r *NIXLRemote) forget(h Handle) {
	r.pmu.Lock()
	delete(r.pushes, h)
	r.pmu.Unlock()
}

// Register registers D's ranks with D's agent, then connects to P: the
// handshake checks P's metadata against P's ranks as D planned them and
// loads P's NIXL blob.
func (r *NIXLRemote) Register(regs []*xfer.Registration) error {
	pRegs, dRegs := splitRegs(regs)
	if err := r.NIXL.Register(dRegs); err != nil {
		return err
	}
	r.ctl.pRegs, r.ctl.dMD = pRegs, r.NIXL.SideMetadata(xfer.D)
	return r.ctl.connect()
}

// Metadata is D's version-15 metadata (real base addresses).
func (r *NIXLRemote) Metadata() ([]byte, error) { return json.Marshal(r.NIXL.SideMetadata(xfer.D)) }

// LoadRemote does nothing: P's metadata came with the handshake.
func (r *NIXLRemote) LoadRemote([]byte) error { return nil }

// Prefill implements Prefiller.
func (r *NIXLRemote) Prefill(req PrefillRequest) error { return r.ctl.Prefill(req) }

// Close drops the control connection, then D's agent and memory.
func (r *NIXLRemote) Close() error {
	r.ctl.closeCtrl()
	return r.NIXL.Close()
}
