package runner

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// ServeP is the P agent of a two-agent deployment: it registers P's ranks
// in host memory and serves them to D agents on ln until ctx ends. For each
// request a D agent announces, it plans the same transfer and writes P's
// blocks as a prefill would; D then reads them and proves them with the
// oracle.
func (r *Runner) ServeP(ctx context.Context, host *transfer.Host, ln net.Listener, token string) error {
	r.Role = "p"
	pd, _, _, first, err := r.begin()
	if err != nil {
		return err
	}
	if err := host.Register(first.PRegs); err != nil {
		return err
	}
	for _, reg := range first.PRegs {
		r.registered(reg)
	}
	var prefills atomic.Int64
	srv := &transfer.PeerServer{
		Host: host, Token: token, Logf: r.Logf,
		Prefill: func(q transfer.PrefillRequest) error {
			x, err := compute(pd, xfer.Request{PromptTokens: q.PromptTokens, PrefixHitTokens: q.PrefixHitTokens})
			if err != nil {
				return fmt.Errorf("request %s: %w", q.ID, err)
			}
			prefills.Add(1)
			return oracle.FillP(r.Model, x, host)
		},
		OnHandshake: func(remote string, d []xfer.Metadata) {
			r.emit(event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{
				Summary: fmt.Sprintf("D agent at %s: %d ranks of version-%d metadata", remote, len(d), xfer.HandshakeVersion),
				Path:    string(first.Path), PTP: len(first.PRegs), DTP: len(d)}})
		},
	}
	go r.sampleServed(ctx, srv, &prefills)
	r.logf("P agent serving %d ranks on %s", len(first.PRegs), ln.Addr())
	return srv.Serve(ctx, ln)
}

// sampleServed emits P's 1 Hz samples: the bytes D agents read in the last
// second and the requests prefilled so far.
func (r *Runner) sampleServed(ctx context.Context, srv *transfer.PeerServer, prefills *atomic.Int64) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := srv.Served()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := srv.Served()
		r.emit(event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: float64(now-last) / 1e9, Requests: int(prefills.Load()),
			DroppedEvents: r.Sink.Dropped()}})
		if r.Metrics != nil {
			r.Metrics.Add("agent_tx_bytes_total", "Bytes the agent's transfers moved.", float64(now-last))
		}
		last = now
	}
}
