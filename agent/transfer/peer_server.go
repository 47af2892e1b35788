package transfer

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvscope/kvscope/agent/transfer/peer"
	"github.com/kvscope/kvscope/core/xfer"
)

// maxHandshakes bounds the connections between accept and a checked token.
const maxHandshakes = 8

// PeerServer serves P's registered regions to D agents: over TCP reads
// when Mem is a *Host, or as the control channel of NIXL when NIXL is set.
//
// The reads of D's connections are served in parallel; a prefill (or a
// push) waits for the reads in flight and holds the next ones back until
// it is done, since it rewrites (or sends) the blocks they read.
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

	served atomic.Int64
	// blocks orders what touches P's blocks: a prefill or a push holds it
	// exclusively, each read shares it while it resolves and sends its bytes.
	blocks     sync.RWMutex
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
func (s *PeerServer) join(c net.Conn, h peer.Hello) error {
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
// checked, a connection may hold at most MaxHelloBytes, and at most
// maxHandshakes connections are read at once.
func (s *PeerServer) hello(c net.Conn, r *bufio.Reader, fail func(string, error) error) (peer.Hello, error) {
	var hello peer.Hello
	select {
	case s.handshakes <- struct{}{}:
		defer func() { <-s.handshakes }()
	default:
		return hello, fail("hello", errors.New("too many connections in their handshake; retry"))
	}
	c.SetReadDeadline(time.Now().Add(peer.HandshakeTimeout))
	typ, body, err := peer.ReadMsg(r, peer.MaxHelloBytes)
	if err != nil {
		return hello, &peer.Error{Op: "hello", Err: err}
	}
	if typ != peer.MsgHello {
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

// handle serves one connection: the handshake, then D's messages until D
// leaves or a message fails.
func (s *PeerServer) handle(c net.Conn) error {
	defer c.Close()
	r, w := bufio.NewReaderSize(c, 64<<10), bufio.NewWriterSize(c, 256<<10)
	fail := func(op string, err error) error {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		peer.WriteMsg(w, peer.MsgError, []byte(err.Error()))
		return &peer.Error{Op: op, Err: err}
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
	if err := peer.WriteMsg(w, peer.MsgMeta, md); err != nil {
		return err
	}
	if s.NIXL != nil {
		nh, err := s.NIXL.NIXLHello()
		if err != nil {
			return fail("nixl", err)
		}
		body, _ := json.Marshal(nh)
		if err := peer.WriteMsg(w, peer.MsgNIXL, body); err != nil {
			return err
		}
	}
	if s.OnHandshake != nil && hello.Conn == 0 {
		s.OnHandshake(c.RemoteAddr().String(), hello.D)
	}
	for {
		c.SetReadDeadline(time.Time{})
		typ, n, err := peer.ReadHeader(r, peer.MaxControlBytes)
		if err != nil {
			return err
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch typ {
		case peer.MsgPrefill:
			err = s.prefill(w, body, fail)
		case peer.MsgPush:
			err = s.push(w, body, fail)
		case peer.MsgRead:
			err = s.read(c, w, body, fail)
		default:
			err = fail("message", fmt.Errorf("unknown message type %q", typ))
		}
		if err != nil {
			return err
		}
	}
}

// prefill fills P's blocks for a request, no read in flight, and answers
// that they are ready.
func (s *PeerServer) prefill(w *bufio.Writer, body []byte, fail func(string, error) error) error {
	var req PrefillRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return fail("prefill", fmt.Errorf("not JSON: %v", err))
	}
	s.blocks.Lock()
	err := s.Prefill(req)
	s.blocks.Unlock()
	if err != nil {
		return fail("prefill", err)
	}
	ack, _ := json.Marshal(peer.Ready{ID: req.ID})
	return peer.WriteMsg(w, peer.MsgReady, ack)
}

// push WRITEs the last prefilled request into D, no prefill or read in
// flight, and answers with NIXL's statistics.
func (s *PeerServer) push(w *bufio.Writer, body []byte, fail func(string, error) error) error {
	var req peer.Push
	if err := json.Unmarshal(body, &req); err != nil {
		return fail("push", fmt.Errorf("not JSON: %v", err))
	}
	if s.Push == nil {
		return fail("push", errors.New("this P agent does not push: D reads (connector nixl)"))
	}
	s.blocks.Lock()
	st, err := s.Push(req.Notif)
	s.blocks.Unlock()
	if err != nil {
		return fail("push", err)
	}
	out, _ := json.Marshal(peer.Report(*st))
	return peer.WriteMsg(w, peer.MsgPushed, out)
}

// read sends the bytes of a read's descriptors. It shares P's blocks with
// the reads of D's other connections, so that no prefill rewrites the
// bytes while they are sent.
func (s *PeerServer) read(c net.Conn, w *bufio.Writer, body []byte, fail func(string, error) error) error {
	host, ok := s.Mem.(*Host)
	if !ok || s.NIXL != nil {
		return fail("read", errors.New("P moves the bytes with NIXL: D reads with NIXL_READ, not over this connection"))
	}
	s.blocks.RLock()
	defer s.blocks.RUnlock()
	bufs, total, err := resolve(host, body)
	if err != nil {
		return fail("read", err)
	}
	c.SetWriteDeadline(time.Now().Add(peer.OpTimeout))
	if err := peer.WriteMsg(w, peer.MsgData, bufs...); err != nil {
		return &peer.Error{Op: "read", Err: err}
	}
	s.served.Add(total)
	return nil
}

// checkBackend refuses a D agent that moves bytes another way than P.
func (s *PeerServer) checkBackend(h peer.Hello) error {
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

// resolve validates a read's descriptors against P's regions and returns
// their bytes, in order, and how many there are.
func resolve(host *Host, body []byte) ([][]byte, int64, error) {
	n, err := peer.ParseRead(body)
	if err != nil {
		return nil, 0, err
	}
	out := make([][]byte, 0, n)
	var total int64
	host.mu.Lock()
	defer host.mu.Unlock()
	for i := range n {
		d, err := peer.ReadDesc(body, i)
		if err != nil {
			return nil, 0, err
		}
		b, err := host.slice(xfer.P, int(d.Rank), xfer.Loc{Region: int(d.Region), Offset: int64(d.Offset)}, int64(d.Len))
		if err != nil {
			return nil, 0, fmt.Errorf("descriptor %d: %w", i, err)
		}
		total += int64(len(b))
		if total > peer.MaxReadBytes {
			return nil, 0, fmt.Errorf("a read asks for more than %d bytes", peer.MaxReadBytes)
		}
		out = append(out, b)
	}
	return out, total, nil
}
