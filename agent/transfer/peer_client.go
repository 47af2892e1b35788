package transfer

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvscope/kvscope/agent/transfer/peer"
	"github.com/kvscope/kvscope/core/xfer"
)

// peerClient is D's control connection to a P agent: the hello, the
// handshake checks, prefills, pushes, and a new handshake when P comes
// back. Remote and NIXLRemote are built on it.
type peerClient struct {
	addr, token string
	session     string
	pRegs       []*xfer.Registration // P's ranks as D planned them
	dMD         []xfer.Metadata
	nixl        NIXLPeer   // nil: the bytes move over TCP
	xmu         sync.Mutex // one control exchange at a time
	cmu         sync.Mutex
	ctrl        *peerConn
	closed      atomic.Bool
}

// peerConn is one of D's connections to P.
type peerConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func newPeerClient(addr, token string) *peerClient {
	var id [8]byte
	rand.Read(id[:])
	return &peerClient{addr: addr, token: token, session: hex.EncodeToString(id[:])}
}

// connect opens the control connection.
func (pc *peerClient) connect() error {
	c, err := pc.dial(0)
	if err != nil {
		return err
	}
	pc.cmu.Lock()
	pc.ctrl = c
	pc.cmu.Unlock()
	if pc.closed.Load() { // close ran meanwhile
		c.c.Close()
	}
	return nil
}

// dial opens a connection of D's session (0 is the control connection),
// and checks P's metadata against what D planned for P. With NIXL, the
// control connection then takes P's NIXL hello and loads P's blob.
func (r *peerClient) dial(conn int) (*peerConn, error) {
	if r.closed.Load() {
		return nil, &peer.Error{Op: "dial", Err: errors.New("the backend is closed")}
	}
	c, err := net.DialTimeout("tcp", r.addr, peer.HandshakeTimeout)
	if err != nil {
		return nil, &peer.Error{Op: "dial", Err: err}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	pc := &peerConn{c: c, r: bufio.NewReaderSize(c, 256<<10), w: bufio.NewWriterSize(c, 64<<10)}
	h := peer.Hello{Token: r.token, Session: r.session, Conn: conn, D: r.dMD}
	if r.nixl != nil {
		nh, err := r.nixl.NIXLHello()
		if err != nil {
			c.Close()
			return nil, err
		}
		h.NIXL = &nh
	}
	hello, _ := json.Marshal(h)
	fail := func(op string, err error) (*peerConn, error) {
		c.Close()
		return nil, &peer.Error{Op: op, Err: err}
	}
	c.SetDeadline(time.Now().Add(peer.HandshakeTimeout))
	if err := peer.WriteMsg(pc.w, peer.MsgHello, hello); err != nil {
		return fail("hello", err)
	}
	body, err := pc.expect(peer.MsgMeta, peer.MaxControlBytes)
	if err != nil {
		return fail("hello", err)
	}
	var md []xfer.Metadata
	if err := json.Unmarshal(body, &md); err != nil {
		return fail("hello", fmt.Errorf("P's metadata is not JSON: %v", err))
	}
	if err := checkPeerMetadata(r.pRegs, md); err != nil {
		c.Close()
		return nil, err
	}
	if r.nixl != nil {
		body, err := pc.expect(peer.MsgNIXL, peer.MaxControlBytes)
		if err != nil {
			return fail("nixl", err)
		}
		var nh NIXLHello
		if err := json.Unmarshal(body, &nh); err != nil {
			return fail("nixl", fmt.Errorf("P's NIXL hello is not JSON: %v", err))
		}
		if err := r.nixl.LoadPeer(nh, xfer.P, md); err != nil {
			return fail("nixl", err)
		}
	}
	c.SetDeadline(time.Time{})
	return pc, nil
}

// expect reads one message of the given type; an error message from P
// becomes the error.
func (pc *peerConn) expect(typ byte, limit int) ([]byte, error) {
	got, body, err := peer.ReadMsg(pc.r, limit)
	if err != nil {
		return nil, err
	}
	if got == peer.MsgError {
		return nil, fmt.Errorf("P says: %s", body)
	}
	if got != typ {
		return nil, fmt.Errorf("got message %q, want %q", got, typ)
	}
	return body, nil
}

// checkPeerMetadata is D's side of the handshake: every P rank's metadata
// must match what D planned, field by field (base addresses aside).
func checkPeerMetadata(want []*xfer.Registration, got []xfer.Metadata) error {
	reject := func(rank int, field string, w, g any) error {
		return &peer.Error{Op: "handshake", Err: fmt.Errorf("P rank %d: %s is %v, D planned %v: P and D must run the same scenario", rank, field, g, w)}
	}
	if len(got) != len(want) {
		return &peer.Error{Op: "handshake", Err: fmt.Errorf("P advertises %d ranks, D planned %d: P and D must run the same scenario", len(got), len(want))}
	}
	for i, reg := range want {
		w, g := xfer.MetadataOf(reg), got[i]
		for _, f := range []struct {
			name string
			w, g any
		}{
			{"version", w.Version, g.Version}, {"tp_size", w.TPSize, g.TPSize}, {"tp_rank", w.TPRank, g.TPRank},
			{"block_size", w.BlockSize, g.BlockSize}, {"kv_cache_layout", w.KVCacheLayout, g.KVCacheLayout},
			{"blocks_first", w.BlocksFirst, g.BlocksFirst}, {"compatibility_hash", w.CompatHash, g.CompatHash},
			{"num_blocks", w.NumBlocks, g.NumBlocks}, {"block_lens", w.BlockLens, g.BlockLens},
			{"ssm_sizes", w.SSMSizes, g.SSMSizes}, {"region_members", w.Members, g.Members},
		} {
			if !reflect.DeepEqual(f.w, f.g) {
				return reject(i, f.name, f.w, f.g)
			}
		}
	}
	return nil
}

// Prefill asks P to plan the request and write its blocks. When the
// control connection has failed (P restarted, the network dropped), it
// connects again (the handshake included) and retries once.
func (r *peerClient) Prefill(req PrefillRequest) error {
	r.xmu.Lock()
	defer r.xmu.Unlock()
	r.cmu.Lock()
	ctrl := r.ctrl
	r.cmu.Unlock()
	if ctrl == nil && r.pRegs == nil {
		return &peer.Error{Op: "prefill", Err: errors.New("not connected: Register first")}
	}
	body, _ := json.Marshal(req)
	var err error
	if ctrl != nil {
		if err = ctrl.prefill(body); err == nil || r.closed.Load() {
			return err
		}
		ctrl.c.Close() // known dead: the next prefill dials at once
		r.cmu.Lock()
		if r.ctrl == ctrl {
			r.ctrl = nil
		}
		r.cmu.Unlock()
	}
	if derr := r.connect(); derr != nil {
		if err != nil {
			return fmt.Errorf("%w; reconnecting: %v", err, derr)
		}
		return fmt.Errorf("reconnecting: %w", derr)
	}
	r.cmu.Lock()
	ctrl = r.ctrl
	r.cmu.Unlock()
	return ctrl.prefill(body)
}

func (pc *peerConn) prefill(body []byte) error {
	pc.c.SetDeadline(time.Now().Add(peer.OpTimeout))
	defer pc.c.SetDeadline(time.Time{})
	if err := peer.WriteMsg(pc.w, peer.MsgPrefill, body); err != nil {
		return &peer.Error{Op: "prefill", Err: err}
	}
	if _, err := pc.expect(peer.MsgReady, peer.MaxControlBytes); err != nil {
		return &peer.Error{Op: "prefill", Err: err}
	}
	return nil
}

// push asks P to WRITE the last prefilled request into D and waits for
// P's report. A failure drops the control connection (P closed it); the
// next prefill dials again.
func (r *peerClient) push(notif string) (*Stats, error) {
	r.xmu.Lock()
	defer r.xmu.Unlock()
	r.cmu.Lock()
	ctrl := r.ctrl
	r.cmu.Unlock()
	if ctrl == nil {
		return nil, &peer.Error{Op: "push", Err: errors.New("not connected to P")}
	}
	body, _ := json.Marshal(peer.Push{Notif: notif})
	ctrl.c.SetDeadline(time.Now().Add(peer.OpTimeout))
	defer ctrl.c.SetDeadline(time.Time{})
	fail := func(err error) (*Stats, error) {
		ctrl.c.Close()
		r.cmu.Lock()
		if r.ctrl == ctrl {
			r.ctrl = nil
		}
		r.cmu.Unlock()
		return nil, &peer.Error{Op: "push", Err: err}
	}
	if err := peer.WriteMsg(ctrl.w, peer.MsgPush, body); err != nil {
		return fail(err)
	}
	out, err := ctrl.expect(peer.MsgPushed, peer.MaxControlBytes)
	if err != nil {
		return fail(err)
	}
	var rep peer.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		return fail(fmt.Errorf("P's report is not JSON: %v", err))
	}
	st := Stats(rep)
	return &st, nil
}

// closeCtrl drops the control connection.
func (r *peerClient) closeCtrl() {
	r.closed.Store(true)
	r.cmu.Lock()
	if r.ctrl != nil {
		r.ctrl.c.Close()
	}
	r.cmu.Unlock()
}
