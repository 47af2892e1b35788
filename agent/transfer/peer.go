package transfer

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// Two agents, P and D, on two hosts. With the host backend P serves its
// registered regions over TCP and D reads them, as NIXL's D pulls from P.
// With the nixl backend this connection is only the control channel: the
// handshake carries each side's NIXL metadata, and the bytes move by NIXL
// over UCX (see nixl_peer.go).
//
// The wire protocol is a sequence of messages, each one type byte, a
// big-endian uint32 length and a payload:
//
//	H  D→P  hello: JSON {token, session, conn, d: D's version-15 metadata,
//	        nixl: D's NIXL agent name and getLocalMD blob (nixl backend)}
//	M  P→D  JSON: P's version-15 metadata, one entry per P rank
//	N  P→D  JSON: P's NIXL agent name and blob (nixl backend), sent once P
//	        checked D's token and loaded D's blob
//	F  D→P  prefill: JSON {id, prompt_tokens, prefix_hit_tokens}; P plans
//	        the same request and writes its blocks as a prefill would
//	R  P→D  ready: JSON {id}
//	W  D→P  push (nixl backend, connector nixl-push): JSON {notif}; P
//	        WRITEs the last prefilled request's blocks into D over NIXL,
//	        each request carrying notif
//	D  P→D  pushed: JSON, NIXL's statistics of the WRITEs
//	Q  D→P  read: uint32 count, then per descriptor uint32 rank, uint32
//	        region, uint64 offset, uint64 length
//	B  P→D  the bytes of every descriptor of the read, in order
//	E  P→D  an error (text); P closes the connection after it
//
// A read names a rank, a region index, an offset and a length; P checks
// each against its registered regions. Nothing a TCP read sends is a
// memory address: base addresses in the metadata are informational there.
// With NIXL they are the real addresses the peer registered, as in vLLM's
// handshake, and every remote descriptor is checked against the regions
// the peer advertised before it reaches NIXL.
const (
	msgHello   = 'H'
	msgMeta    = 'M'
	msgNIXL    = 'N'
	msgPrefill = 'F'
	msgReady   = 'R'
	msgPush    = 'W'
	msgPushed  = 'D'
	msgRead    = 'Q'
	msgData    = 'B'
	msgError   = 'E'

	maxHelloBytes   = 1 << 20  // a hello, read before the token is checked
	maxControlBytes = 4 << 20  // metadata, prefill or read messages
	maxReadBytes    = 16 << 20 // the bytes one read may ask for
	readDescBytes   = 24
	peerTimeout     = 10 * time.Second // dialling and the handshake
	opTimeout       = 60 * time.Second // one prefill or one read
	maxHandshakes   = 8                // connections between accept and a checked token
)

// PeerError is a failure the peer reported or a protocol violation.
type PeerError struct {
	Op  string
	Err error
}

func (e *PeerError) Error() string { return fmt.Sprintf("peer %s: %v", e.Op, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

type peerHello struct {
	Token   string          `json:"token"`
	Session string          `json:"session"` // one D agent's connections share it
	Conn    int             `json:"conn"`    // 0 is D's control connection
	D       []xfer.Metadata `json:"d"`
	NIXL    *NIXLHello      `json:"nixl,omitempty"`
}

// NIXLHello is one side's NIXL identity in the handshake: its agent's name
// and its getLocalMD blob (which holds raw addresses: a peer loads it only
// after the token check).
type NIXLHello struct {
	Agent string `json:"agent"`
	MD    []byte `json:"md"`
}

// NIXLPeer is a NIXL backend holding one side of a two-agent deployment.
type NIXLPeer interface {
	// NIXLHello is this side's agent name and metadata blob.
	NIXLHello() (NIXLHello, error)
	// LoadPeer loads the other side's blob, after checking that it is the
	// agent the hello names and not this one, and keeps the regions the
	// peer advertised (md: its version-15 metadata, real base addresses)
	// to check every remote descriptor against. A peer loaded before (an
	// agent that restarted) is dropped first.
	LoadPeer(h NIXLHello, side xfer.Side, md []xfer.Metadata) error
}

// NIXLSide is a NIXL backend holding one side of a two-agent deployment
// (NewNIXLSide): a Backend, the memory a P agent serves from, and the
// NIXL half of the handshake.
type NIXLSide interface {
	Backend
	PeerMemory
	NIXLPeer
}

// PeerMemory is what a P agent serves from: the registered memory a
// prefill writes, and its version-15 metadata.
type PeerMemory interface {
	oracle.Memory
	// SideMetadata is the version-15 metadata of one side's ranks.
	SideMetadata(side xfer.Side) []xfer.Metadata
}

// PrefillRequest asks P to plan a request and fill its blocks.
type PrefillRequest struct {
	ID              string `json:"id"`
	PromptTokens    int    `json:"prompt_tokens"`
	PrefixHitTokens int    `json:"prefix_hit_tokens"`
}

// pushRequest asks P to push the last prefilled request.
type pushRequest struct {
	Notif string `json:"notif"`
}

// pushed is P's report of a push: NIXL's numbers, measured on P.
type pushed struct {
	Bytes      int64             `json:"bytes"`
	Descs      int               `json:"descs"`
	Merged     int               `json:"descs_merged"`
	PrepUS     float64           `json:"prep_us"`
	PostUS     float64           `json:"post_us"`
	TransferUS float64           `json:"transfer_us"`
	Timing     event.Timing      `json:"timing"`
	Source     string            `json:"source"`
	Batches    []event.BatchData `json:"batches"`
}

func pushedOf(st *Stats) pushed {
	return pushed{Bytes: st.Bytes, Descs: st.Descs, Merged: st.Merged, PrepUS: st.PrepUS, PostUS: st.PostUS, TransferUS: st.TransferUS,
		Timing: st.Timing, Source: st.Source, Batches: st.Batches}
}

func (p pushed) stats() *Stats {
	return &Stats{Bytes: p.Bytes, Descs: p.Descs, Merged: p.Merged, PrepUS: p.PrepUS, PostUS: p.PostUS, TransferUS: p.TransferUS,
		Timing: p.Timing, Source: p.Source, Batches: p.Batches}
}

type readDesc struct {
	rank, region uint32
	offset, n    uint64
}

func writeMsg(w *bufio.Writer, typ byte, payload ...[]byte) error {
	var n int
	for _, p := range payload {
		n += len(p)
	}
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(n))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range payload {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return w.Flush()
}

// readHeader reads a message's type and length, refusing one over limit.
func readHeader(r *bufio.Reader, limit int) (byte, int, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n > limit {
		return 0, 0, fmt.Errorf("message %q of %d bytes exceeds %d", hdr[0], n, limit)
	}
	return hdr[0], n, nil
}

func readMsg(r *bufio.Reader, limit int) (byte, []byte, error) {
	typ, n, err := readHeader(r, limit)
	if err != nil {
		return 0, nil, err
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return typ, buf, nil
}

// PeerServer serves P's registered regions to D agents: over TCP reads
// when Mem is a *Host, or as the control channel of NIXL when NIXL is set.
type PeerServer struct {
	Mem   PeerMemory
	NIXL  NIXLPeer // nil: D reads over TCP
	Token string   // D must present it; empty accepts any D (loopback tests)
	// Prefill plans a request and writes P's blocks for it.
	Prefill func(PrefillRequest) error
	// Push WRITEs the last prefilled request into D, each NIXL request
	// carrying notif, and returns once they completed (nil: P does not
	// push; the nixl backend with connector nixl-push does).
	Push func(notif string) (*Stats, error)
	// OnHandshake is told each D's metadata (may be nil).
	OnHandshake func(remote string, d []xfer.Metadata)
	Logf        func(format string, args ...any)

	served     atomic.Int64
	mu         sync.Mutex // one prefill at a time
	handshakes chan struct{}

	smu     sync.Mutex
	session string                // the D agent being served ("" for none)
	ctrl    net.Conn              // its control connection
	conns   map[net.Conn]struct{} // its connections
}

// join admits a connection to the D session it names: the control
// connection opens a session when none is open; data connections join the
// open one. A P agent serves one D agent at a time, since a prefill
// rewrites the blocks another D could be reading.
func (s *PeerServer) join(c net.Conn, h peerHello) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	switch {
	case h.Session == "":
		return errors.New("hello names no session")
	case h.Conn == 0 && s.session != "" && s.session != h.Session:
		return errors.New("P already serves another D agent")
	case h.Conn != 0 && s.session != h.Session:
		return errors.New("no open session for this data connection: connect the control connection first")
	}
	if h.Conn == 0 {
		s.session, s.ctrl = h.Session, c
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return nil
}

// leave removes a connection; the control connection's leaving ends its
// session and closes the session's other connections.
func (s *PeerServer) leave(c net.Conn) {
	s.smu.Lock()
	defer s.smu.Unlock()
	delete(s.conns, c)
	if c == s.ctrl {
		s.session, s.ctrl = "", nil
		for other := range s.conns {
			other.Close()
		}
	}
}

// Served is the bytes served to D agents so far.
func (s *PeerServer) Served() int64 { return s.served.Load() }

// Serve accepts D agents until ctx ends.
func (s *PeerServer) Serve(ctx context.Context, ln net.Listener) error {
	s.handshakes = make(chan struct{}, maxHandshakes)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			if err := s.handle(c); err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil && s.Logf != nil {
				s.Logf("peer %s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

// hello reads and checks a connection's hello. Until the token is
// checked, a connection may hold at most maxHelloBytes, and at most
// maxHandshakes connections are read at once.
func (s *PeerServer) hello(c net.Conn, r *bufio.Reader, fail func(string, error) error) (peerHello, error) {
	var hello peerHello
	select {
	case s.handshakes <- struct{}{}:
		defer func() { <-s.handshakes }()
	default:
		return hello, fail("hello", errors.New("too many connections in their handshake; retry"))
	}
	c.SetReadDeadline(time.Now().Add(peerTimeout))
	typ, body, err := readMsg(r, maxHelloBytes)
	if err != nil {
		return hello, &PeerError{"hello", err}
	}
	if typ != msgHello {
		return hello, fail("hello", fmt.Errorf("the first message is %q, want a hello", typ))
	}
	if err := json.Unmarshal(body, &hello); err != nil {
		return hello, fail("hello", fmt.Errorf("hello is not JSON: %v", err))
	}
	if s.Token != "" && subtle.ConstantTimeCompare([]byte(hello.Token), []byte(s.Token)) != 1 {
		return hello, fail("hello", errors.New("wrong token"))
	}
	return hello, nil
}

func (s *PeerServer) handle(c net.Conn) error {
	defer c.Close()
	r, w := bufio.NewReaderSize(c, 64<<10), bufio.NewWriterSize(c, 256<<10)
	fail := func(op string, err error) error {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		writeMsg(w, msgError, []byte(err.Error()))
		return &PeerError{op, err}
	}
	hello, err := s.hello(c, r, fail)
	if err != nil {
		return err
	}
	if err := s.checkBackend(hello); err != nil {
		return fail("hello", err)
	}
	if err := s.join(c, hello); err != nil {
		return fail("hello", err)
	}
	defer s.leave(c)
	if s.NIXL != nil {
		// The token is checked: D's blob (raw addresses) may be loaded.
		if err := s.NIXL.LoadPeer(*hello.NIXL, xfer.D, hello.D); err != nil {
			return fail("nixl", err)
		}
	}
	md, err := json.Marshal(s.Mem.SideMetadata(xfer.P))
	if err != nil {
		return err
	}
	if err := writeMsg(w, msgMeta, md); err != nil {
		return err
	}
	if s.NIXL != nil {
		nh, err := s.NIXL.NIXLHello()
		if err != nil {
			return fail("nixl", err)
		}
		body, _ := json.Marshal(nh)
		if err := writeMsg(w, msgNIXL, body); err != nil {
			return err
		}
	}
	if s.OnHandshake != nil && hello.Conn == 0 {
		s.OnHandshake(c.RemoteAddr().String(), hello.D)
	}
	for {
		c.SetReadDeadline(time.Time{})
		typ, n, err := readHeader(r, maxControlBytes)
		if err != nil {
			return err
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch typ {
		case msgPrefill:
			var req PrefillRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return fail("prefill", fmt.Errorf("not JSON: %v", err))
			}
			s.mu.Lock()
			err := s.Prefill(req)
			s.mu.Unlock()
			if err != nil {
				return fail("prefill", err)
			}
			ack, _ := json.Marshal(map[string]string{"id": req.ID})
			if err := writeMsg(w, msgReady, ack); err != nil {
				return err
			}
		case msgPush:
			var req pushRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return fail("push", fmt.Errorf("not JSON: %v", err))
			}
			if s.Push == nil {
				return fail("push", errors.New("this P agent does not push: D reads (connector nixl)"))
			}
			s.mu.Lock()
			st, err := s.Push(req.Notif)
			s.mu.Unlock()
			if err != nil {
				return fail("push", err)
			}
			out, _ := json.Marshal(pushedOf(st))
			if err := writeMsg(w, msgPushed, out); err != nil {
				return err
			}
		case msgRead:
			host, ok := s.Mem.(*Host)
			if !ok || s.NIXL != nil {
				return fail("read", errors.New("P moves the bytes with NIXL: D reads with NIXL_READ, not over this connection"))
			}
			// Serve the read under the prefill lock, so no prefill rewrites
			// the bytes while they are sent.
			s.mu.Lock()
			bufs, total, err := resolve(host, body)
			if err == nil {
				c.SetWriteDeadline(time.Now().Add(opTimeout))
				err = writeMsg(w, msgData, bufs...)
				if err != nil {
					err = &PeerError{"read", err}
				}
			} else {
				err = fail("read", err)
			}
			s.mu.Unlock()
			if err != nil {
				return err
			}
			s.served.Add(total)
		default:
			return fail("message", fmt.Errorf("unknown message type %q", typ))
		}
	}
}

// checkBackend refuses a D agent that moves bytes another way than P.
func (s *PeerServer) checkBackend(h peerHello) error {
	switch {
	case s.NIXL != nil && h.NIXL == nil:
		return errors.New("P moves the bytes with NIXL (--backend nixl): start D with --backend nixl too")
	case s.NIXL == nil && h.NIXL != nil:
		return errors.New("P serves its regions over TCP (--backend host): start D with --backend host, or P with --backend nixl")
	case s.NIXL != nil && h.Conn != 0:
		return errors.New("P moves the bytes with NIXL: the control connection is the only one")
	}
	return nil
}

// resolve validates a read's descriptors against P's regions.
func resolve(host *Host, body []byte) ([][]byte, int64, error) {
	if len(body) < 4 {
		return nil, 0, errors.New("a read needs a descriptor count")
	}
	n := int(binary.BigEndian.Uint32(body))
	if len(body) != 4+n*readDescBytes {
		return nil, 0, fmt.Errorf("a read of %d descriptors has %d bytes, want %d", n, len(body), 4+n*readDescBytes)
	}
	out := make([][]byte, 0, n)
	var total int64
	host.mu.Lock()
	defer host.mu.Unlock()
	for i := range n {
		d := decodeDesc(body[4+i*readDescBytes:])
		if d.n > maxReadBytes || d.offset > 1<<62 || int64(d.rank) > 1<<20 || int64(d.region) > 1<<20 {
			return nil, 0, fmt.Errorf("descriptor %d: rank %d region %d [%d, +%d) is out of range", i, d.rank, d.region, d.offset, d.n)
		}
		b, err := host.slice(xfer.P, int(d.rank), xfer.Loc{Region: int(d.region), Offset: int64(d.offset)}, int64(d.n))
		if err != nil {
			return nil, 0, fmt.Errorf("descriptor %d: %w", i, err)
		}
		total += int64(len(b))
		if total > maxReadBytes {
			return nil, 0, fmt.Errorf("a read asks for more than %d bytes", maxReadBytes)
		}
		out = append(out, b)
	}
	return out, total, nil
}

func encodeDesc(b []byte, d readDesc) {
	binary.BigEndian.PutUint32(b[0:], d.rank)
	binary.BigEndian.PutUint32(b[4:], d.region)
	binary.BigEndian.PutUint64(b[8:], d.offset)
	binary.BigEndian.PutUint64(b[16:], d.n)
}

func decodeDesc(b []byte) readDesc {
	return readDesc{rank: binary.BigEndian.Uint32(b[0:]), region: binary.BigEndian.Uint32(b[4:]),
		offset: binary.BigEndian.Uint64(b[8:]), n: binary.BigEndian.Uint64(b[16:])}
}

// peerClient is D's control connection to a P agent: the hello, the
// handshake checks, prefills, and a new handshake when P comes back.
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

// Remote is D's backend in two-agent mode: D's regions in local host
// memory, P's read over TCP from a PeerServer. Register performs the
// handshake: P's metadata must be what D planned for P.
type Remote struct {
	*Host
	*peerClient
	conns  int
	pool   chan *peerConn
	pSizes [][]int64 // rank -> region -> bytes of pRegs, for Prepare
}

type peerConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// NewRemote makes D's backend, reading from the P agent at addr over conns
// parallel connections once Register is called.
func NewRemote(addr, token string, conns int, limit int64, kindOf func(string) string) *Remote {
	return &Remote{Host: NewHost(limit, kindOf), peerClient: newPeerClient(addr, token), conns: max(1, conns)}
}

// Name implements Backend.
func (r *Remote) Name() string { return "host+tcp" }

// splitRegs separates P's registrations from D's.
func splitRegs(regs []*xfer.Registration) (p, d []*xfer.Registration) {
	for _, reg := range regs {
		if reg.Side == xfer.P {
			p = append(p, reg)
		} else {
			d = append(d, reg)
		}
	}
	return p, d
}

// Register allocates D's regions locally, connects to P and checks P's
// metadata against P's registrations as D planned them.
func (r *Remote) Register(regs []*xfer.Registration) error {
	pRegs, dRegs := splitRegs(regs)
	if err := r.Host.Register(dRegs); err != nil {
		return err
	}
	r.pRegs, r.dMD = pRegs, r.Host.SideMetadata(xfer.D)
	r.pSizes = regionSizes(pRegs)
	r.pool = make(chan *peerConn, r.conns)
	if err := r.connect(); err != nil {
		return err
	}
	for i := 1; i <= r.conns; i++ {
		pc, err := r.dial(i)
		if err != nil {
			r.closeConns()
			return err
		}
		r.pool <- pc
	}
	return nil
}

// dial opens a connection of D's session (0 is the control connection),
// and checks P's metadata against what D planned for P. With NIXL, the
// control connection then takes P's NIXL hello and loads P's blob.
func (r *peerClient) dial(conn int) (*peerConn, error) {
	if r.closed.Load() {
		return nil, &PeerError{"dial", errors.New("the backend is closed")}
	}
	c, err := net.DialTimeout("tcp", r.addr, peerTimeout)
	if err != nil {
		return nil, &PeerError{"dial", err}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	pc := &peerConn{c: c, r: bufio.NewReaderSize(c, 256<<10), w: bufio.NewWriterSize(c, 64<<10)}
	h := peerHello{Token: r.token, Session: r.session, Conn: conn, D: r.dMD}
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
		return nil, &PeerError{op, err}
	}
	c.SetDeadline(time.Now().Add(peerTimeout))
	if err := writeMsg(pc.w, msgHello, hello); err != nil {
		return fail("hello", err)
	}
	body, err := pc.expect(msgMeta, maxControlBytes)
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
		body, err := pc.expect(msgNIXL, maxControlBytes)
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
	got, body, err := readMsg(pc.r, limit)
	if err != nil {
		return nil, err
	}
	if got == msgError {
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
		return &PeerError{"handshake", fmt.Errorf("P rank %d: %s is %v, D planned %v: P and D must run the same scenario", rank, field, g, w)}
	}
	if len(got) != len(want) {
		return &PeerError{"handshake", fmt.Errorf("P advertises %d ranks, D planned %d: P and D must run the same scenario", len(got), len(want))}
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
		return &PeerError{"prefill", errors.New("not connected: Register first")}
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
		return nil, &PeerError{"push", errors.New("not connected to P")}
	}
	body, _ := json.Marshal(pushRequest{Notif: notif})
	ctrl.c.SetDeadline(time.Now().Add(opTimeout))
	defer ctrl.c.SetDeadline(time.Time{})
	fail := func(err error) (*Stats, error) {
		ctrl.c.Close()
		r.cmu.Lock()
		if r.ctrl == ctrl {
			r.ctrl = nil
		}
		r.cmu.Unlock()
		return nil, &PeerError{"push", err}
	}
	if err := writeMsg(ctrl.w, msgPush, body); err != nil {
		return fail(err)
	}
	out, err := ctrl.expect(msgPushed, maxControlBytes)
	if err != nil {
		return fail(err)
	}
	var p pushed
	if err := json.Unmarshal(out, &p); err != nil {
		return fail(fmt.Errorf("P's report is not JSON: %v", err))
	}
	return p.stats(), nil
}

func (pc *peerConn) prefill(body []byte) error {
	pc.c.SetDeadline(time.Now().Add(opTimeout))
	defer pc.c.SetDeadline(time.Time{})
	if err := writeMsg(pc.w, msgPrefill, body); err != nil {
		return &PeerError{"prefill", err}
	}
	if _, err := pc.expect(msgReady, maxControlBytes); err != nil {
		return &PeerError{"prefill", err}
	}
	return nil
}

// Prepare validates D's side of each descriptor against D's regions and
// P's side against P's regions as planned (P checks them again).
func (r *Remote) Prepare(x *xfer.Transfer) (*Prepared, error) {
	return r.Host.prepare(x, func(rank int) limits {
		l := limits{side: xfer.P, rank: rank, why: r}
		if rank >= 0 && rank < len(r.pSizes) {
			l.size = r.pSizes[rank]
		}
		return l
	})
}

// refuse implements refuser: P's side is checked against P's regions as
// planned, D's against D's registered regions.
func (r *Remote) refuse(side xfer.Side, rank int, at xfer.Loc, n int64) error {
	if side != xfer.P {
		return r.Host.refuse(side, rank, at, n)
	}
	_, reg, err := regionOf(r.pRegs, xfer.P, rank, at.Region)
	if err == nil {
		err = checkRange(xfer.P, rank, reg, at.Offset, n)
	}
	return err
}

// Post reads each rank pair's batches over its own connection, straight
// into D's regions.
func (r *Remote) Post(p *Prepared, notif string) (Handle, error) {
	return r.Host.post(p, notif, func(ro rankOps, start time.Time) ([]event.BatchData, error) {
		pc := <-r.pool
		out, err := runBatches(ro, start, r.Host.clock, func(b batch) error { return pc.read(&ro, b.ops) })
		if err != nil {
			// The connection may be mid-message: replace it.
			pc.c.Close()
			if fresh, derr := r.dial(1); derr == nil {
				pc = fresh
			}
		}
		r.pool <- pc
		return out, err
	})
}

// PeerPusher is a D backend whose P agent can push into it (connector
// nixl-push between two agents: NIXLRemote).
type PeerPusher interface {
	PeerPushes() bool
}

// Prefiller is a backend whose P lives in another agent: it asks that
// agent to fill P's blocks for a request.
type Prefiller interface {
	Prefill(PrefillRequest) error
}

// read fetches a rank pair's ops in chunks of at most maxReadBytes.
func (pc *peerConn) read(ro *rankOps, ops []copyOp) error {
	defer pc.c.SetDeadline(time.Time{})
	for len(ops) > 0 {
		pc.c.SetDeadline(time.Now().Add(opTimeout))
		n, bytes := 0, int64(0)
		for n < len(ops) && (n == 0 || bytes+ops[n].n <= maxReadBytes) {
			bytes += ops[n].n
			n++
		}
		msg := make([]byte, 4+n*readDescBytes)
		binary.BigEndian.PutUint32(msg, uint32(n))
		for i, op := range ops[:n] {
			encodeDesc(msg[4+i*readDescBytes:], readDesc{rank: uint32(ro.p), region: uint32(op.src.Region), offset: uint64(op.src.Offset), n: uint64(op.n)})
		}
		if err := writeMsg(pc.w, msgRead, msg); err != nil {
			return &PeerError{"read", err}
		}
		typ, size, err := readHeader(pc.r, maxReadBytes)
		if err != nil {
			return &PeerError{"read", err}
		}
		if typ == msgError {
			body := make([]byte, size)
			io.ReadFull(pc.r, body)
			return &PeerError{"read", fmt.Errorf("P says: %s", body)}
		}
		if typ != msgData || int64(size) != bytes {
			return &PeerError{"read", fmt.Errorf("got message %q of %d bytes, want %d bytes of data", typ, size, bytes)}
		}
		for _, op := range ops[:n] {
			if _, err := io.ReadFull(pc.r, ro.dst.bytes(op.dst, op.n)); err != nil {
				return &PeerError{"read", err}
			}
		}
		ops = ops[n:]
	}
	return nil
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

func (r *Remote) closeConns() {
	r.closeCtrl()
	for {
		select {
		case pc := <-r.pool:
			pc.c.Close()
		default:
			return
		}
	}
}

// Close drops the connections and D's buffers; a transfer in flight fails.
func (r *Remote) Close() error {
	r.closeConns()
	return r.Host.Close()
}
