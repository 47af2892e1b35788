package transfer

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// startP serves P's ranks of a deployment on a loopback port.
func startP(t *testing.T, m *model.Model, pd *xfer.PD, x *xfer.Transfer, token string) string {
	t.Helper()
	h := NewHost(1<<30, nil)
	if err := h.Register(x.PRegs); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(serveP(t, m, pd, h, ln, token))
	return ln.Addr().String()
}

// serveP serves P's registered host on ln, filling P's blocks for each
// prefill as the P agent does, until the returned stop is called.
func serveP(t *testing.T, m *model.Model, pd *xfer.PD, h *Host, ln net.Listener, token string) (stop func()) {
	srv := &PeerServer{Mem: h, Token: token, Logf: t.Logf, Prefill: func(q PrefillRequest) error {
		px, err := pd.Compute(xfer.Request{PromptTokens: q.PromptTokens, PrefixHitTokens: q.PrefixHitTokens}, true)
		if err != nil {
			return err
		}
		return oracle.FillP(m, px, h)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ctx, ln)
	}()
	return func() {
		cancel()
		<-done
	}
}

// TestTwoAgentsOverTCP: D reads P's bytes over loopback TCP after the
// handshake and the oracle proves every byte.
func TestTwoAgentsOverTCP(t *testing.T) {
	for _, d := range deployments {
		if d.connector != "nixl" {
			continue // two agents move bytes by D reading (pull)
		}
		t.Run(d.name, func(t *testing.T) {
			m, pd, x := prepare(t, d)
			addr := startP(t, m, pd, x, "s3cret")
			r := NewRemote(addr, "s3cret", 2, 1<<30, nil)
			defer r.Close()
			if err := r.Register(allRegs(x)); err != nil {
				t.Fatal(err)
			}
			if err := r.Prefill(PrefillRequest{ID: "r1", PromptTokens: d.req.PromptTokens, PrefixHitTokens: d.req.PrefixHitTokens}); err != nil {
				t.Fatal(err)
			}
			prover, err := oracle.NewProver(m, x, r, true)
			if err != nil {
				t.Fatal(err)
			}
			p, err := r.Prepare(x)
			if err != nil {
				t.Fatal(err)
			}
			id, err := r.Post(p, "")
			if err != nil {
				t.Fatal(err)
			}
			st, err := Wait(r, id)
			if err != nil {
				t.Fatal(err)
			}
			if res := prover.Verify(); res.Verdict != oracle.Exact {
				t.Fatalf("D's bytes: %s (%v)", res.Verdict, res.Mismatch)
			}
			if st.Bytes != x.Bytes {
				t.Errorf("moved %d bytes, want %d", st.Bytes, x.Bytes)
			}
		})
	}
}

func TestTwoAgentsHandshakeFailures(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	addr := startP(t, m, pd, x, "s3cret")

	r := NewRemote(addr, "wrong", 1, 1<<30, nil)
	if err := r.Register(allRegs(x)); err == nil || !strings.Contains(err.Error(), "wrong token") {
		t.Errorf("wrong token: %v", err)
	}
	r.Close()

	// D planned another model: P's metadata does not match.
	other := deployments[0]
	other.model, other.mem = "Qwen__Qwen3-0.6B", 128<<20
	_, _, ox := prepare(t, other)
	r = NewRemote(addr, "s3cret", 1, 1<<30, nil)
	if err := r.Register(allRegs(ox)); err == nil || !strings.Contains(err.Error(), "P and D must run the same scenario") {
		t.Errorf("mismatched scenario: %v", err)
	}
	r.Close()
}

// TestPeerRefusesBadReads speaks the wire protocol directly: reads outside
// P's regions, malformed reads and unknown messages get an error and the
// connection closes; P keeps serving other connections.
func TestPeerRefusesBadReads(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	addr := startP(t, m, pd, x, "")
	region := x.PRegs[0].Regions[0]
	read := func(descs ...readDesc) []byte {
		b := make([]byte, 4+len(descs)*readDescBytes)
		binary.BigEndian.PutUint32(b, uint32(len(descs)))
		for i, d := range descs {
			encodeDesc(b[4+i*readDescBytes:], d)
		}
		return b
	}
	cases := []struct {
		name    string
		typ     byte
		payload []byte
		want    string
	}{
		{"past the region", msgRead, read(readDesc{0, 0, uint64(region.Bytes() - 8), 16}), "outside"},
		{"no such rank", msgRead, read(readDesc{9, 0, 0, 16}), "P rank 9 is not registered"},
		{"no such region", msgRead, read(readDesc{0, 4000, 0, 16}), "no region 4000"},
		{"huge length", msgRead, read(readDesc{0, 0, 0, 1 << 40}), "out of range"},
		{"truncated", msgRead, read(readDesc{0, 0, 0, 16})[:20], "has 20 bytes"},
		{"unknown message", 'Z', nil, "unknown message"},
		{"prefill not JSON", msgPrefill, []byte("{"), "not JSON"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			r, w := bufio.NewReader(conn), bufio.NewWriter(conn)
			hello, _ := json.Marshal(peerHello{Session: "raw"})
			if err := writeMsg(w, msgHello, hello); err != nil {
				t.Fatal(err)
			}
			if typ, _, err := readMsg(r, maxControlBytes); err != nil || typ != msgMeta {
				t.Fatalf("hello answered %q, %v", typ, err)
			}
			if err := writeMsg(w, c.typ, c.payload); err != nil {
				t.Fatal(err)
			}
			typ, body, err := readMsg(r, maxControlBytes)
			if err != nil || typ != msgError || !strings.Contains(string(body), c.want) {
				t.Fatalf("answer %q %q (%v), want an error containing %q", typ, body, err, c.want)
			}
			if _, _, err := readMsg(r, maxControlBytes); err == nil {
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
	ok := make([]byte, 4+readDescBytes)
	binary.BigEndian.PutUint32(ok, 1)
	encodeDesc(ok[4:], readDesc{0, 0, 4096, 8192})
	f.Add(ok)
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
		if sum != total || total > maxReadBytes {
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
	hdr := []byte{msgHello, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], maxHelloBytes+1)
	conn.Write(hdr)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatalf("an oversized hello was answered (%d bytes)", n)
	}
}

// TestRemoteReconnectsAfterPRestarts: when the P agent restarts, the next
// prefill connects again (checking P's metadata) and D goes on.
func TestRemoteReconnectsAfterPRestarts(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	h := NewHost(1<<30, nil)
	if err := h.Register(x.PRegs); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	stop := serveP(t, m, pd, h, ln, "")
	r := NewRemote(addr, "", 1, 1<<30, nil)
	defer r.Close()
	if err := r.Register(allRegs(x)); err != nil {
		t.Fatal(err)
	}
	req := PrefillRequest{ID: "r", PromptTokens: deployments[0].req.PromptTokens, PrefixHitTokens: deployments[0].req.PrefixHitTokens}
	if err := r.Prefill(req); err != nil {
		t.Fatal(err)
	}
	stop()
	if ln, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer serveP(t, m, pd, h, ln, "")()
	if err := r.Prefill(req); err != nil {
		t.Fatalf("after P restarted: %v", err)
	}
}
