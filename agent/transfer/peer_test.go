package transfer

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// startP serves P's ranks of a deployment on a loopback port.
func startP(t *testing.T, m *model.Model, pd *xfer.PD, x *xfer.Transfer, token string) string {
	t.Helper()
	h, ln := hostP(t, x.PRegs)
	t.Cleanup(serveP(t, m, pd, h, ln, token))
	return ln.Addr().String()
}

// hostP registers P's ranks in a host backend and opens a loopback port
// to serve them on.
func hostP(tb testing.TB, pRegs []*xfer.Registration) (*Host, net.Listener) {
	tb.Helper()
	h := NewHost(1<<30, nil)
	if err := h.Register(pRegs); err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return h, ln
}

// serveP serves P's registered host on ln, filling P's blocks for each
// prefill as the P agent does, until the returned stop is called.
func serveP(t *testing.T, m *model.Model, pd *xfer.PD, h *Host, ln net.Listener, token string) (stop func()) {
	return serve(&PeerServer{Mem: h, Token: token, Logf: t.Logf, Prefill: fillP(m, pd, h)}, ln)
}

// fillP is the P agent's prefill: it plans the request and writes P's
// blocks for it.
func fillP(m *model.Model, pd *xfer.PD, h *Host) func(PrefillRequest) error {
	return func(q PrefillRequest) error {
		px, err := pd.Compute(xfer.Request{PromptTokens: q.PromptTokens, PrefixHitTokens: q.PrefixHitTokens}, true)
		if err != nil {
			return err
		}
		return oracle.FillP(m, px, h)
	}
}

// serve runs srv on ln until the returned stop is called.
func serve(srv *PeerServer, ln net.Listener) (stop func()) {
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

// TestRemoteReconnectsAfterPRestarts: when the P agent restarts, the next
// prefill connects again (checking P's metadata) and D goes on.
func TestRemoteReconnectsAfterPRestarts(t *testing.T) {
	m, pd, x := prepare(t, deployments[0])
	h, ln := hostP(t, x.PRegs)
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
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	defer serveP(t, m, pd, h, ln, "")()
	if err := r.Prefill(req); err != nil {
		t.Fatalf("after P restarted: %v", err)
	}
}
