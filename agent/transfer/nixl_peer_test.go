//go:build nixl && cgo

package transfer_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// nixlP is a P agent of a two-agent deployment over NIXL, in this process:
// a one-sided NIXL backend and the control channel's server.
type nixlP struct {
	b    transfer.NIXLSide
	stop func()
}

// startNIXLP registers P's ranks with a P-only NIXL agent and serves the
// control channel on ln (a fresh loopback port when ln is nil).
func startNIXLP(t *testing.T, name string, m *model.Model, x *xfer.Transfer, ln net.Listener) (*nixlP, string) {
	t.Helper()
	b, err := transfer.NewNIXLSide(name, xfer.P, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Register(x.PRegs); err != nil {
		t.Fatal(err)
	}
	if ln == nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	srv := &transfer.PeerServer{Mem: b, NIXL: b, Token: "s3cret", Logf: t.Logf, Prefill: func(q transfer.PrefillRequest) error {
		return oracle.FillP(m, x, b) // x is the one request these tests move
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ctx, ln)
	}()
	p := &nixlP{b: b}
	p.stop = func() {
		cancel()
		<-done
		b.Close()
	}
	t.Cleanup(p.stop)
	return p, ln.Addr().String()
}

// pull prefills x on P, READs it into D through NIXL and returns the
// oracle's verdict and D's statistics.
func pull(t *testing.T, d transfer.Backend, m *model.Model, x *xfer.Transfer, id string) (oracle.Verdict, *transfer.Stats, error) {
	t.Helper()
	if err := d.(transfer.Prefiller).Prefill(transfer.PrefillRequest{ID: id, PromptTokens: x.Request.PromptTokens}); err != nil {
		return "", nil, err
	}
	prover, err := oracle.NewProver(m, x, d, true)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Prepare(x)
	if err != nil {
		return "", nil, err
	}
	h, err := d.Post(p, id+":done")
	if err != nil {
		return "", nil, err
	}
	st, err := transfer.Wait(d, h)
	if err != nil {
		return "", nil, err
	}
	return prover.Verify().Verdict, st, nil
}

// notified waits until P's agent has received want notifications of id.
func notified(t *testing.T, p transfer.Backend, id string, want int) {
	t.Helper()
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for got < want && time.Now().Before(deadline) {
		for _, msg := range p.Notifications() {
			if msg == id+":done" {
				got++
			}
		}
		time.Sleep(time.Millisecond)
	}
	if got != want {
		t.Errorf("P received %d notifications of %s, want one per rank pair (%d)", got, id, want)
	}
}

func busyRankPairs(x *xfer.Transfer) int {
	n := 0
	for _, rp := range x.RankPairs {
		if len(rp.Pairs) > 0 {
			n++
		}
	}
	return n
}

// TestNIXLTwoAgents runs P and D as two NIXL agents that know each other
// only through the control channel's handshake: D READs P's blocks over
// UCX, the oracle proves them, and P learns of each READ from NIXL's
// notification. Then the failures: a descriptor outside what P advertised
// never reaches NIXL and leaves the next request exact; P restarting
// (a new agent, new addresses) is met with a new handshake.
func TestNIXLTwoAgents(t *testing.T) {
	m, x := nixlTransfer(t, 2, 4, "nixl")
	p, addr := startNIXLP(t, "kvscope-two", m, x, nil)
	d, err := transfer.NewNIXLRemote("kvscope-two-d", addr, "s3cret", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Register(append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)); err != nil {
		t.Fatal(err)
	}

	v, st, err := pull(t, d, m, x, "req-1")
	if err != nil || v != oracle.Exact {
		t.Fatalf("pull: %s, %v", v, err)
	}
	if st.Bytes != x.Bytes || st.Merged != x.Merged || st.Timing != event.Measured || st.Source != "nixl" {
		t.Errorf("stats: %d bytes, %d merged, %s by %q; want %d, %d, measured by nixl", st.Bytes, st.Merged, st.Timing, st.Source, x.Bytes, x.Merged)
	}
	notified(t, p.b, "req-1", busyRankPairs(x))

	t.Run("a descriptor outside P's advertised regions", func(t *testing.T) {
		bad := *x
		bad.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
		rp := &bad.RankPairs[0]
		rp.Pairs = append([]xfer.Pair(nil), rp.Pairs...)
		q := &rp.Pairs[len(rp.Pairs)-1]
		q.Src.Offset = x.PRegs[rp.P].Regions[q.Src.Region].Bytes() - q.Len + 8
		if _, err := d.Prepare(&bad); err == nil || !strings.Contains(err.Error(), "advertised") {
			t.Fatalf("Prepare: %v, want a refusal naming what P advertised", err)
		}
		// D's other requests are untouched.
		if v, _, err := pull(t, d, m, x, "req-2"); err != nil || v != oracle.Exact {
			t.Fatalf("the next pull: %s, %v", v, err)
		}
	})

	t.Run("P restarts", func(t *testing.T) {
		p.stop()
		if _, _, err := pull(t, d, m, x, "req-3"); err == nil {
			t.Fatal("a pull with P gone succeeded")
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the port of the stopped P is taken: %v", err)
		}
		p2, _ := startNIXLP(t, "kvscope-two", m, x, ln)
		v, _, err := pull(t, d, m, x, "req-4")
		if err != nil || v != oracle.Exact {
			t.Fatalf("pull after P came back: %s, %v", v, err)
		}
		notified(t, p2.b, "req-4", busyRankPairs(x))
	})
}

// TestNIXLHandshakeRefusals: a D agent moving bytes another way, a NIXL
// blob that is not the named agent's, and two agents of one name.
func TestNIXLHandshakeRefusals(t *testing.T) {
	m, x := nixlTransfer(t, 2, 2, "nixl")
	_, addr := startNIXLP(t, "kvscope-refuse", m, x, nil)
	all := append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)

	t.Run("D over TCP", func(t *testing.T) {
		r := transfer.NewRemote(addr, "s3cret", 1, 1<<30, nil)
		defer r.Close()
		if err := r.Register(all); err == nil || !strings.Contains(err.Error(), "--backend nixl") {
			t.Errorf("Register: %v, want a refusal naming --backend nixl", err)
		}
	})
	t.Run("wrong token", func(t *testing.T) {
		d, err := transfer.NewNIXLRemote("kvscope-refuse-d", addr, "wrong", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := d.Register(all); err == nil || !strings.Contains(err.Error(), "wrong token") {
			t.Errorf("Register: %v, want wrong token", err)
		}
	})
	// One-sided backends checked directly.
	a, err := transfer.NewNIXLSide("kvscope-name", xfer.D, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := transfer.NewNIXLSide("kvscope-other", xfer.P, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Register(x.PRegs); err != nil {
		t.Fatal(err)
	}
	hb, err := b.NIXLHello()
	if err != nil {
		t.Fatal(err)
	}
	md := b.SideMetadata(xfer.P)
	tests := []struct {
		name  string
		hello transfer.NIXLHello
		md    []xfer.Metadata
		want  string
	}{
		{"the blob is another agent's", transfer.NIXLHello{Agent: "kvscope-impostor-P", MD: hb.MD}, md, "blob is agent"},
		{"the peer has this agent's name", transfer.NIXLHello{Agent: "kvscope-name-D", MD: hb.MD}, md, "as this one is"},
		{"no blob", transfer.NIXLHello{Agent: hb.Agent}, md, "no metadata blob"},
		{"a garbage blob", transfer.NIXLHello{Agent: hb.Agent, MD: []byte("not a NIXL blob")}, md, "loadRemoteMD"},
		{"an advertised region without an address", hb, func() []xfer.Metadata {
			c := append([]xfer.Metadata(nil), md...)
			c[0].BaseAddrs = append([]uint64{0}, c[0].BaseAddrs[1:]...)
			return c
		}(), "base address"},
		{"ranks out of order", hb, []xfer.Metadata{md[1], md[0]}, "tp_rank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := a.LoadPeer(tt.hello, xfer.P, tt.md); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadPeer: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if err := a.LoadPeer(hb, xfer.P, md); err != nil {
		t.Errorf("the real hello: %v", err)
	}
	if err := a.LoadPeer(hb, xfer.P, md); err != nil {
		t.Errorf("the same hello again (a peer that reconnects): %v", err)
	}
}
