package runner

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// ServeP is the P agent of a two-agent deployment: it registers P's ranks
// with b and serves them to D agents on ln until ctx ends. For each
// request a D agent announces, it plans the same transfer and writes P's
// blocks as a prefill would; D then moves them and proves them with the
// oracle. With the host backend D reads them over ln; with a one-sided
// NIXL backend (transfer.NIXLSide) ln carries only the control channel,
// D READs them through NIXL, and P learns that a request's reads landed
// from the notifications D attaches to them.
func (r *Runner) ServeP(ctx context.Context, b transfer.Backend, ln net.Listener, token string) error {
	r.Role = "p"
	mem, ok := b.(transfer.PeerMemory)
	if !ok {
		return fmt.Errorf("runner: --role p cannot serve from the %s backend", b.Name())
	}
	pd, _, _, first, err := r.begin()
	if err != nil {
		return err
	}
	if err := b.Register(first.PRegs); err != nil {
		return err
	}
	for _, reg := range first.PRegs {
		r.registered(reg)
	}
	var prefills atomic.Int64
	track := &completions{pending: map[string]*completion{}}
	var lmu sync.Mutex
	var last *xfer.Transfer // the last prefilled request, which a push moves
	srv := &transfer.PeerServer{
		Mem: mem, Token: token, Logf: r.Logf,
		Prefill: func(q transfer.PrefillRequest) error {
			x, err := compute(pd, xfer.Request{PromptTokens: q.PromptTokens, PrefixHitTokens: q.PrefixHitTokens})
			if err != nil {
				return fmt.Errorf("request %s: %w", q.ID, err)
			}
			prefills.Add(1)
			track.expect(q.ID, x)
			lmu.Lock()
			last = x
			lmu.Unlock()
			return oracle.FillP(r.Model, x, mem)
		},
		OnHandshake: func(remote string, d []xfer.Metadata) {
			r.emit(event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{
				Summary: fmt.Sprintf("D agent at %s: %d ranks of version-%d metadata", remote, len(d), xfer.HandshakeVersion),
				Path:    string(first.Path), PTP: len(first.PRegs), DTP: len(d)}})
		},
	}
	served, requests := srv.Served, prefills.Load
	if ns, ok := b.(transfer.NIXLSide); ok {
		srv.NIXL = ns
		served, requests = track.bytes.Load, track.done.Load
		go r.collect(ctx, b, track)
		if first.Mode == xfer.Push {
			srv.Push = func(notif string) (*transfer.Stats, error) {
				lmu.Lock()
				x := last
				lmu.Unlock()
				if x == nil {
					return nil, fmt.Errorf("push before any prefill")
				}
				return r.push(b, x, notif, track)
			}
		}
	}
	go r.sampleServed(ctx, served, requests)
	r.logf("P agent serving %d ranks on %s", len(first.PRegs), ln.Addr())
	return srv.Serve(ctx, ln)
}

// push WRITEs a prefilled request into D (connector nixl-push between two
// agents) and waits for NIXL to complete it.
func (r *Runner) push(b transfer.Backend, x *xfer.Transfer, notif string, c *completions) (*transfer.Stats, error) {
	p, err := b.Prepare(x)
	if err != nil {
		return nil, err
	}
	h, err := b.Post(p, notif)
	if err != nil {
		return nil, err
	}
	st, err := transfer.WaitFor(b, h, transferLimit)
	if err != nil {
		return nil, err
	}
	c.bytes.Add(st.Bytes)
	c.done.Add(1)
	r.logf("pushed %d bytes into D (NIXL WRITE, %.0f µs by NIXL's telemetry)", st.Bytes, st.TransferUS)
	return st, nil
}

// completions tallies, per request, the NIXL notifications P received:
// one per rank pair's READ, each sent by NIXL once that READ completed.
type completions struct {
	mu      sync.Mutex
	pending map[string]*completion
	order   []string
	bytes   atomic.Int64 // of completed requests
	done    atomic.Int64 // completed requests
}

type completion struct {
	want, got int
	bytes     int64
}

// maxPending bounds the requests waiting for notifications (a D agent
// whose transfer failed never sends them).
const maxPending = 64

// expect records a prefilled request's rank pairs.
func (c *completions) expect(id string, x *xfer.Transfer) {
	want := 0
	for _, rp := range x.RankPairs {
		if len(rp.Pairs) > 0 {
			want++
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; !ok {
		c.order = append(c.order, id)
	}
	c.pending[id] = &completion{want: want, bytes: x.Bytes}
	for len(c.order) > maxPending {
		delete(c.pending, c.order[0])
		c.order = c.order[1:]
	}
}

// notified counts one notification ("<id>:done"); it reports whether
// that completed the request.
func (c *completions) notified(msg string) (string, bool) {
	id, ok := strings.CutSuffix(msg, ":done")
	if !ok {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[id]
	if p == nil {
		return id, false
	}
	p.got++
	if p.got < p.want {
		return id, false
	}
	delete(c.pending, id)
	for i, o := range c.order {
		if o == id {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	c.bytes.Add(p.bytes)
	c.done.Add(1)
	return id, true
}

// collect reads P's NIXL notifications until ctx ends.
func (r *Runner) collect(ctx context.Context, b transfer.Backend, c *completions) {
	every(ctx, time.Millisecond, func() {
		for _, msg := range b.Notifications() {
			if id, done := c.notified(msg); done {
				r.logf("request %s: every READ of D landed (NIXL notifications)", id)
			}
		}
	})
}

// sampleServed emits P's 1 Hz samples: the bytes D agents moved in the
// last second and the requests served so far.
func (r *Runner) sampleServed(ctx context.Context, served, requests func() int64) {
	last := served()
	every(ctx, time.Second, func() {
		now := served()
		r.emit(event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: float64(now-last) / 1e9, Requests: int(requests()),
			DroppedEvents: r.Sink.Dropped()}})
		if r.Metrics != nil {
			r.Metrics.Add("agent_tx_bytes_total", "Bytes the agent's transfers moved.", float64(now-last))
		}
		last = now
	})
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}
