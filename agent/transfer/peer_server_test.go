package transfer

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/transfer/peer"
	"github.com/kvscope/kvscope/core/xfer"
)

// TestPeerRefusesBadReads speaks the wire protocol directly: reads outside
// P's regions, malformed reads and unknown messages get an error and the
// connection closes; P keeps serving other connections.
func TestPeerRefusesBadReads(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	addr := startP(t, m, pd, x, "")
	region := x.PRegs[0].Regions[0]
	read := func(descs ...peer.Desc) []byte {
		return peer.EncodeRead(len(descs), func(i int) peer.Desc { return descs[i] })
	}
	cases := []struct {
		name    string
		typ     byte
		payload []byte
		want    string
	}{
		{"past the region", peer.MsgRead, read(peer.Desc{Rank: 0, Region: 0, Offset: uint64(region.Bytes() - 8), Len: 16}), "outside"},
		{"no such rank", peer.MsgRead, read(peer.Desc{Rank: 9, Region: 0, Offset: 0, Len: 16}), "P rank 9 is not registered"},
		{"no such region", peer.MsgRead, read(peer.Desc{Rank: 0, Region: 4000, Offset: 0, Len: 16}), "no region 4000"},
		{"huge length", peer.MsgRead, read(peer.Desc{Rank: 0, Region: 0, Offset: 0, Len: 1 << 40}), "out of range"},
		{"truncated", peer.MsgRead, read(peer.Desc{Rank: 0, Region: 0, Offset: 0, Len: 16})[:20], "has 20 bytes"},
		{"unknown message", 'Z', nil, "unknown message"},
		{"prefill not JSON", peer.MsgPrefill, []byte("{"), "not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := dialRaw(t, addr, peer.Hello{Session: "raw"})
			r, w := d.r, d.w
			if err := peer.WriteMsg(w, c.typ, c.payload); err != nil {
				t.Fatal(err)
			}
			typ, body, err := peer.ReadMsg(r, peer.MaxControlBytes)
			if err != nil || typ != peer.MsgError || !strings.Contains(string(body), c.want) {
				t.Fatalf("answer %q %q (%v), want an error containing %q", typ, body, err, c.want)
			}
			if _, _, err := peer.ReadMsg(r, peer.MaxControlBytes); err == nil {
				t.Fatal("the connection stayed open after the error")
			}
		})
	}
	// A good read still works on a fresh connection.
	r := NewRemote(addr, "", 1, 1<<30, nil)
	defer r.Close()
	if err := r.Register(allRegs(x)); err != nil {
		t.Fatalf("P stopped serving after bad reads: %v", err)
	}
}

// FuzzPeerRead feeds arbitrary read messages to P: whatever it accepts
// lies inside its registered region; nothing panics.
func FuzzPeerRead(f *testing.F) {
	h, _ := synthetic(f, 4096, 16)
	f.Add(peer.EncodeRead(1, func(int) peer.Desc { return peer.Desc{Rank: 0, Region: 0, Offset: 4096, Len: 8192} }))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	region := h.buf(xfer.P, 0, 0)
	f.Fuzz(func(t *testing.T, body []byte) {
		bufs, total, err := resolve(h, body)
		if err != nil {
			return
		}
		var sum int64
		for _, b := range bufs {
			sum += int64(len(b))
			if !within(region, b) {
				t.Fatalf("a read resolved outside P's region")
			}
		}
		if sum != total || total > peer.MaxReadBytes {
			t.Fatalf("total %d, sum %d", total, sum)
		}
	})
}

// within reports whether b lies inside region's memory.
func within(region, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	for i := range region {
		if &region[i] == &b[0] {
			return i+len(b) <= len(region)
		}
	}
	return false
}

// TestPeerServesOneDAtATime: a second D agent is refused while one is
// connected (a prefill of one would rewrite blocks the other reads), and
// admitted once the first leaves.
func TestPeerServesOneDAtATime(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	addr := startP(t, m, pd, x, "")
	first := NewRemote(addr, "", 1, 1<<30, nil)
	if err := first.Register(allRegs(x)); err != nil {
		t.Fatal(err)
	}
	second := NewRemote(addr, "", 1, 1<<30, nil)
	if err := second.Register(allRegs(x)); err == nil || !strings.Contains(err.Error(), "already serves another D agent") {
		t.Fatalf("a second D agent: %v", err)
	}
	second.Close()
	first.Close()
	var err error
	for range 50 { // P notices the first agent's leaving
		third := NewRemote(addr, "", 1, 1<<30, nil)
		if err = third.Register(allRegs(x)); err == nil {
			third.Close()
			return
		}
		third.Close()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("after the first D agent left: %v", err)
}

// TestPeerHelloIsBounded: before the token is checked, a hello larger
// than its limit is refused without being read.
func TestPeerHelloIsBounded(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	addr := startP(t, m, pd, x, "tok")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hdr := []byte{peer.MsgHello, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], peer.MaxHelloBytes+1)
	conn.Write(hdr)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatalf("an oversized hello was answered (%d bytes)", n)
	}
}

// rawD is one connection of a D agent that speaks the protocol by hand.
type rawD struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// dialRaw connects to P and sends the hello; P must answer with its
// metadata.
func dialRaw(t *testing.T, addr string, h peer.Hello) *rawD {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d := &rawD{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}
	hello, _ := json.Marshal(h)
	if err := peer.WriteMsg(d.w, peer.MsgHello, hello); err != nil {
		t.Fatal(err)
	}
	if typ, _, err := peer.ReadMsg(d.r, peer.MaxControlBytes); err != nil || typ != peer.MsgMeta {
		t.Fatalf("hello answered %q, %v", typ, err)
	}
	return d
}

// send writes one message.
func (d *rawD) send(t *testing.T, typ byte, payload []byte) {
	t.Helper()
	if err := peer.WriteMsg(d.w, typ, payload); err != nil {
		t.Fatal(err)
	}
}

// expect reads one message, which must be of type typ with n payload
// bytes (n < 0: any).
func (d *rawD) expect(t *testing.T, typ byte, n int) {
	t.Helper()
	d.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, body, err := peer.ReadMsg(d.r, peer.MaxReadBytes)
	if err != nil || got != typ || n >= 0 && len(body) != n {
		t.Fatalf("got message %q of %d bytes (%v), want %q of %d", got, len(body), err, typ, n)
	}
}

// readGate holds every write of read data (peer.MsgData) P makes until the
// test opens it, and counts, on P's side, the reads sending at once.
type readGate struct {
	entered    chan struct{} // a read reached its write
	open       chan struct{} // closed: held reads go on, new ones pass
	opened     sync.Once
	inflight   atomic.Int32 // reads at the gate or past it, not yet written
	prefilling atomic.Bool  // a prefill is writing P's blocks
	overlaps   atomic.Int32 // reads that wrote while a prefill ran
}

func (g *readGate) pass() {
	g.inflight.Add(1)
	defer g.inflight.Add(-1)
	if g.prefilling.Load() {
		g.overlaps.Add(1)
	}
	g.entered <- struct{}{}
	<-g.open
}

func (g *readGate) release() { g.opened.Do(func() { close(g.open) }) }

// gatedListener hands P connections whose data writes pass g. A read's
// data message is small here: one write, which starts with its type.
type gatedListener struct {
	net.Listener
	g *readGate
}

func (l gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return gatedConn{c, l.g}, nil
}

type gatedConn struct {
	net.Conn
	g *readGate
}

func (c gatedConn) Write(p []byte) (int, error) {
	if len(p) > 0 && p[0] == peer.MsgData {
		c.g.pass()
	}
	return c.Conn.Write(p)
}

// TestPeerReadsInParallel: the reads of D's connections are in flight at
// once, as P sees them; a prefill that arrives meanwhile waits until they
// are sent, and a read that arrives during a prefill is answered after it.
func TestPeerReadsInParallel(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	h, ln := hostP(t, x.PRegs)
	g := &readGate{entered: make(chan struct{}, 16), open: make(chan struct{})}
	readsAtPrefill := make(chan int32, 4) // the reads in flight as each prefill began
	held, resume := make(chan struct{}), make(chan struct{})
	fill := fillP(m, pd, h)
	srv := &PeerServer{Mem: h, Logf: t.Logf, Prefill: func(q PrefillRequest) error {
		g.prefilling.Store(true)
		defer g.prefilling.Store(false)
		readsAtPrefill <- g.inflight.Load()
		if q.ID == "held" {
			close(held)
			<-resume
		}
		return fill(q)
	}}
	t.Cleanup(serve(srv, gatedListener{ln, g}))
	t.Cleanup(g.release) // runs first: no read stays held

	addr := ln.Addr().String()
	ctrl := dialRaw(t, addr, peer.Hello{Session: "d", Conn: 0})
	a := dialRaw(t, addr, peer.Hello{Session: "d", Conn: 1})
	b := dialRaw(t, addr, peer.Hello{Session: "d", Conn: 2})
	read := peer.EncodeRead(1, func(int) peer.Desc { return peer.Desc{Rank: 0, Region: 0, Offset: 0, Len: 16} })
	prefill := func(id string) []byte {
		body, _ := json.Marshal(PrefillRequest{ID: id, PromptTokens: deployments[0].req.PromptTokens, PrefixHitTokens: deployments[0].req.PrefixHitTokens})
		return body
	}

	a.send(t, peer.MsgRead, read)
	b.send(t, peer.MsgRead, read)
	for i := range 2 {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 reads of two connections in flight at once: P serialises its reads", i)
		}
	}

	ctrl.send(t, peer.MsgPrefill, prefill("r1"))
	// A writer waiting for P's blocks makes TryRLock fail: then the
	// prefill has asked for them while both reads hold them.
	for deadline := time.Now().Add(10 * time.Second); srv.blocks.TryRLock(); runtime.Gosched() {
		srv.blocks.RUnlock()
		if len(readsAtPrefill) != 0 {
			t.Fatal("a prefill ran while two reads were sending P's blocks")
		}
		if time.Now().After(deadline) {
			t.Fatal("the prefill never asked for P's blocks")
		}
	}
	if len(readsAtPrefill) != 0 {
		t.Fatal("a prefill ran while two reads were sending P's blocks")
	}
	g.release()
	a.expect(t, peer.MsgData, 16)
	b.expect(t, peer.MsgData, 16)
	ctrl.expect(t, peer.MsgReady, -1)

	ctrl.send(t, peer.MsgPrefill, prefill("held"))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the second prefill never began")
	}
	a.send(t, peer.MsgRead, read)
	close(resume)
	ctrl.expect(t, peer.MsgReady, -1)
	a.expect(t, peer.MsgData, 16)
	for i := range 2 {
		if n := <-readsAtPrefill; n != 0 {
			t.Errorf("prefill %d began with %d reads in flight, want none", i+1, n)
		}
	}
	if n := g.overlaps.Load(); n != 0 {
		t.Errorf("%d reads sent P's blocks while a prefill wrote them", n)
	}
}
