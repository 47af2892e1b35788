package transfer

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/binary"
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
	"github.com/kvscope/kvscope/core/xfer"
)

// Two agents, P and D, on two hosts: P serves its registered regions over
// TCP and D reads them, as NIXL's D pulls from P.
//
// The wire protocol is a sequence of messages, each one type byte, a
// big-endian uint32 length and a payload:
//
//	H  D→P  hello: JSON {token, d: D's version-15 metadata}
//	M  P→D  JSON: P's version-15 metadata, one entry per P rank
//	F  D→P  prefill: JSON {id, prompt_tokens, prefix_hit_tokens}; P plans
//	        the same request and writes its blocks as a prefill would
//	R  P→D  ready: JSON {id}
//	Q  D→P  read: uint32 count, then per descriptor uint32 rank, uint32
//	        region, uint64 offset, uint64 length
//	B  P→D  the bytes of every descriptor of the read, in order
//	E  P→D  an error (text); P closes the connection after it
//
// A read names a rank, a region index, an offset and a length; P checks
// each against its registered regions. Nothing on the wire is a memory
// address: base addresses in the metadata are informational.
const (
	msgHello   = 'H'
	msgMeta    = 'M'
	msgPrefill = 'F'
	msgReady   = 'R'
	msgRead    = 'Q'
	msgData    = 'B'
	msgError   = 'E'

	maxControlBytes = 4 << 20  // a hello, metadata, prefill or read message
	maxReadBytes    = 16 << 20 // the bytes one read may ask for
	readDescBytes   = 24
	peerTimeout     = 10 * time.Second
)

// PeerError is a failure the peer reported or a protocol violation.
type PeerError struct {
	Op  string
	Err error
}

func (e *PeerError) Error() string { return fmt.Sprintf("peer %s: %v", e.Op, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

type peerHello struct {
	Token string          `json:"token"`
	Conn  int             `json:"conn"` // 0 is D's control connection
	D     []xfer.Metadata `json:"d"`
}

// PrefillRequest asks P to plan a request and fill its blocks.
type PrefillRequest struct {
	ID              string `json:"id"`
	PromptTokens    int    `json:"prompt_tokens"`
	PrefixHitTokens int    `json:"prefix_hit_tokens"`
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

// PeerServer serves P's registered regions to D agents.
type PeerServer struct {
	Host  *Host
	Token string // D must present it; empty accepts any D (loopback tests)
	// Prefill plans a request and writes P's blocks for it.
	Prefill func(PrefillRequest) error
	// OnHandshake is told each D's metadata (may be nil).
	OnHandshake func(remote string, d []xfer.Metadata)
	Logf        func(format string, args ...any)

	served atomic.Int64
	mu     sync.Mutex // one prefill at a time
}

// Served is the bytes served to D agents so far.
func (s *PeerServer) Served() int64 { return s.served.Load() }

// Serve accepts D agents until ctx ends.
func (s *PeerServer) Serve(ctx context.Context, ln net.Listener) error {
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

func (s *PeerServer) handle(c net.Conn) error {
	defer c.Close()
	r, w := bufio.NewReaderSize(c, 64<<10), bufio.NewWriterSize(c, 256<<10)
	fail := func(op string, err error) error {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		writeMsg(w, msgError, []byte(err.Error()))
		return &PeerError{op, err}
	}
	c.SetReadDeadline(time.Now().Add(peerTimeout))
	typ, body, err := readMsg(r, maxControlBytes)
	if err != nil {
		return &PeerError{"hello", err}
	}
	var hello peerHello
	if typ != msgHello {
		return fail("hello", fmt.Errorf("the first message is %q, want a hello", typ))
	}
	if err := json.Unmarshal(body, &hello); err != nil {
		return fail("hello", fmt.Errorf("hello is not JSON: %v", err))
	}
	if s.Token != "" && subtle.ConstantTimeCompare([]byte(hello.Token), []byte(s.Token)) != 1 {
		return fail("hello", errors.New("wrong token"))
	}
	md, err := json.Marshal(s.Host.sideMetadata(xfer.P))
	if err != nil {
		return err
	}
	if err := writeMsg(w, msgMeta, md); err != nil {
		return err
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
		case msgRead:
			bufs, total, err := s.resolve(body)
			if err != nil {
				return fail("read", err)
			}
			if err := writeMsg(w, msgData, bufs...); err != nil {
				return err
			}
			s.served.Add(total)
		default:
			return fail("message", fmt.Errorf("unknown message type %q", typ))
		}
	}
}

// resolve validates a read's descriptors against P's regions.
func (s *PeerServer) resolve(body []byte) ([][]byte, int64, error) {
	if len(body) < 4 {
		return nil, 0, errors.New("a read needs a descriptor count")
	}
	n := int(binary.BigEndian.Uint32(body))
	if len(body) != 4+n*readDescBytes {
		return nil, 0, fmt.Errorf("a read of %d descriptors has %d bytes, want %d", n, len(body), 4+n*readDescBytes)
	}
	out := make([][]byte, 0, n)
	var total int64
	s.Host.mu.Lock()
	defer s.Host.mu.Unlock()
	for i := range n {
		d := decodeDesc(body[4+i*readDescBytes:])
		if d.n > maxReadBytes || d.offset > 1<<62 || int64(d.rank) > 1<<20 || int64(d.region) > 1<<20 {
			return nil, 0, fmt.Errorf("descriptor %d: rank %d region %d [%d, +%d) is out of range", i, d.rank, d.region, d.offset, d.n)
		}
		b, err := s.Host.slice(xfer.P, int(d.rank), xfer.Loc{Region: int(d.region), Offset: int64(d.offset)}, int64(d.n))
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

// sideMetadata is the version-15 metadata of one side's registered ranks.
func (h *Host) sideMetadata(side xfer.Side) []xfer.Metadata {
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

// Remote is D's backend in two-agent mode: D's regions in local host
// memory, P's read over TCP from a PeerServer. Register performs the
// handshake: P's metadata must be what D planned for P.
type Remote struct {
	*Host
	addr, token string
	conns       int
	pRegs       []*xfer.Registration
	dMD         []xfer.Metadata
	ctrl        *peerConn
	pool        chan *peerConn
}

type peerConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// NewRemote makes D's backend, reading from the P agent at addr over conns
// parallel connections once Register is called.
func NewRemote(addr, token string, conns int, limit int64, kindOf func(string) string) *Remote {
	return &Remote{Host: NewHost(limit, kindOf), addr: addr, token: token, conns: max(1, conns)}
}

// Name implements Backend.
func (r *Remote) Name() string { return "host+tcp" }

// Register allocates D's regions locally, connects to P and checks P's
// metadata against P's registrations as D planned them.
func (r *Remote) Register(regs []*xfer.Registration) error {
	var dRegs []*xfer.Registration
	for _, reg := range regs {
		if reg.Side == xfer.P {
			r.pRegs = append(r.pRegs, reg)
		} else {
			dRegs = append(dRegs, reg)
		}
	}
	if err := r.Host.Register(dRegs); err != nil {
		return err
	}
	r.dMD = r.Host.sideMetadata(xfer.D)
	r.pool = make(chan *peerConn, r.conns)
	for i := 0; i <= r.conns; i++ {
		pc, pMD, err := r.dial(i)
		if err != nil {
			r.closeConns()
			return err
		}
		if i == 0 {
			if err := checkPeerMetadata(r.pRegs, pMD); err != nil {
				pc.c.Close()
				return err
			}
			r.ctrl = pc
			continue
		}
		r.pool <- pc
	}
	return nil
}

func (r *Remote) dial(conn int) (*peerConn, []xfer.Metadata, error) {
	c, err := net.DialTimeout("tcp", r.addr, peerTimeout)
	if err != nil {
		return nil, nil, &PeerError{"dial", err}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	pc := &peerConn{c: c, r: bufio.NewReaderSize(c, 256<<10), w: bufio.NewWriterSize(c, 64<<10)}
	hello, _ := json.Marshal(peerHello{Token: r.token, Conn: conn, D: r.dMD})
	c.SetDeadline(time.Now().Add(peerTimeout))
	if err := writeMsg(pc.w, msgHello, hello); err != nil {
		c.Close()
		return nil, nil, &PeerError{"hello", err}
	}
	body, err := pc.expect(msgMeta, maxControlBytes)
	if err != nil {
		c.Close()
		return nil, nil, &PeerError{"hello", err}
	}
	c.SetDeadline(time.Time{})
	var md []xfer.Metadata
	if err := json.Unmarshal(body, &md); err != nil {
		c.Close()
		return nil, nil, &PeerError{"hello", fmt.Errorf("P's metadata is not JSON: %v", err)}
	}
	return pc, md, nil
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

// Prefill asks P to plan the request and write its blocks.
func (r *Remote) Prefill(req PrefillRequest) error {
	if r.ctrl == nil {
		return &PeerError{"prefill", errors.New("not connected: Register first")}
	}
	body, _ := json.Marshal(req)
	if err := writeMsg(r.ctrl.w, msgPrefill, body); err != nil {
		return &PeerError{"prefill", err}
	}
	if _, err := r.ctrl.expect(msgReady, maxControlBytes); err != nil {
		return &PeerError{"prefill", err}
	}
	return nil
}

// Prepare validates D's side of each descriptor against D's regions and
// P's side against P's regions as planned (P checks them again).
func (r *Remote) Prepare(x *xfer.Transfer) (*Prepared, error) {
	return r.Host.prepare(x, func(rank int, q xfer.Pair) ([]byte, error) {
		_, reg, err := regionOf(r.pRegs, xfer.P, rank, q.Src.Region)
		if err == nil {
			err = checkRange(xfer.P, rank, reg, q.Src.Offset, q.Len)
		}
		return nil, err
	})
}

// Post reads each rank pair's batches over its own connection, straight
// into D's regions.
func (r *Remote) Post(p *Prepared, notif string) (Handle, error) {
	return r.Host.post(p, notif, func(ro rankOps, start time.Time) ([]event.BatchData, error) {
		pc := <-r.pool
		out, err := runBatches(ro, start, r.Host.clock, func(b batch) error { return pc.read(ro.p, b.ops) })
		if err != nil {
			// The connection may be mid-message: replace it.
			pc.c.Close()
			if fresh, _, derr := r.dial(1); derr == nil {
				pc = fresh
			}
		}
		r.pool <- pc
		return out, err
	})
}

// Prefiller is a backend whose P lives in another agent: it asks that
// agent to fill P's blocks for a request.
type Prefiller interface {
	Prefill(PrefillRequest) error
}

// read fetches ops in chunks of at most maxReadBytes.
func (pc *peerConn) read(rank int, ops []copyOp) error {
	for len(ops) > 0 {
		n, bytes := 0, int64(0)
		for n < len(ops) && (n == 0 || bytes+int64(len(ops[n].dst)) <= maxReadBytes) {
			bytes += int64(len(ops[n].dst))
			n++
		}
		msg := make([]byte, 4+n*readDescBytes)
		binary.BigEndian.PutUint32(msg, uint32(n))
		for i, op := range ops[:n] {
			encodeDesc(msg[4+i*readDescBytes:], readDesc{rank: uint32(rank), region: uint32(op.pair.Src.Region), offset: uint64(op.pair.Src.Offset), n: uint64(op.pair.Len)})
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
			if _, err := io.ReadFull(pc.r, op.dst); err != nil {
				return &PeerError{"read", err}
			}
		}
		ops = ops[n:]
	}
	return nil
}

func (r *Remote) closeConns() {
	if r.ctrl != nil {
		r.ctrl.c.Close()
		r.ctrl = nil
	}
	for {
		select {
		case pc := <-r.pool:
			pc.c.Close()
		default:
			return
		}
	}
}

// Close drops the connections and D's buffers.
func (r *Remote) Close() error {
	r.closeConns()
	return r.Host.Close()
}
