package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/kvscope/kvscope/agent/gpu"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/xfer"
)

// Config is a whole agent: a scenario, a backend and where to stream.
type Config struct {
	Name      string // the agent's name on its events (default: the host name)
	Scenario  scenario.Scenario
	Catalog   model.Catalog
	ServerURL string // ws://host:port/ws/agent
	Token     string
	Backend   string // host (default) or nixl
	HostLimit int64  // bytes the host backend may allocate (default 1 GiB)
	// Role is both (P and D in this process, the default), p (serve P's
	// regions on Listen) or d (read them from the P agent at Peer).
	Role      string
	Listen    string // role p: the TCP address D agents connect to
	Peer      string // role d: the P agent's address
	PeerToken string // the token D presents to P
	PeerConns int    // role d: parallel connections to P (default 4)
	// KVFromGPU, when positive, sizes both engines' KV cache memory as this
	// fraction of the smallest discovered GPU's memory.
	KVFromGPU float64
	Metrics   *metrics.Registry
	Logf      func(format string, args ...any)
	// Streamer, when set, is used instead of a new one (tests).
	Streamer *stream.Streamer
	// NATS, when set, sends the events straight to the event log (NATS
	// JetStream) instead of a server's /ws/agent.
	NATS     string
	NATSAuth stream.NATSAuth
}

// eventStream takes the agent's events to the server or the event log,
// keeping them until they are stored.
type eventStream interface {
	Sink
	Run(ctx context.Context) error
	Flush(ctx context.Context) error
	Pending() uint64
}

// Start discovers GPUs, plans the scenario, and runs the runner and the
// streamer until ctx ends or the scenario is over; then it waits (up to
// 10 s) for the server to acknowledge every event, and returns.
func Start(ctx context.Context, c Config) error {
	if c.Name == "" {
		c.Name, _ = DefaultName(c.Role)
	}
	if c.HostLimit == 0 {
		c.HostLimit = 1 << 30
	}
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	m, err := c.Scenario.LoadModel(c.Catalog)
	if err != nil {
		return err
	}
	gpus := gpu.Discover()
	if gpus.Reason != "" {
		logf("GPUs: %s", gpus.Reason)
	}
	if c.KVFromGPU > 0 {
		if err := c.Scenario.UseGPUMemory(gpus.GPUs, c.KVFromGPU); err != nil {
			return err
		}
		logf("KV cache memory per rank from the GPUs: %d MiB", c.Scenario.P.KVCacheMemoryBytes>>20)
	}
	kinds := map[string]string{}
	for _, l := range m.Layers {
		kinds[l.Name] = string(l.Kind)
	}
	var st eventStream
	switch {
	case c.Streamer != nil:
		st = c.Streamer
	case c.NATS != "":
		st = &stream.NATS{Streamer: stream.Streamer{Agent: c.Name, Logf: logf, SplitDetail: true}, URLs: c.NATS, Auth: c.NATSAuth}
	case c.ServerURL != "":
		st = &stream.Streamer{Agent: c.Name, URL: c.ServerURL, Token: c.Token, Logf: logf, SplitDetail: true}
	}
	var sink Sink = st
	if st == nil {
		sink = &logSink{logf: logf}
	}
	kindOf := func(name string) string { return kinds[name] }
	r := &Runner{Scenario: c.Scenario, Model: m, Sink: sink, Metrics: c.Metrics, GPUs: gpus.GPUs, NoGPU: gpus.Reason, Role: c.Role, Logf: logf, Pair: c.Name}
	var run func(context.Context) error
	switch c.Role {
	case "", "both", "d":
		if r.Role == "" {
			r.Role = "both"
		}
		switch {
		case c.Role == "d":
			if c.Peer == "" {
				return fmt.Errorf("agent: --role d needs --peer, the P agent's address")
			}
			switch c.Backend {
			case "", "host":
				if c.PeerConns <= 0 {
					c.PeerConns = 4
				}
				r.Backend = transfer.NewRemote(c.Peer, c.PeerToken, c.PeerConns, c.HostLimit, kindOf)
			case "nixl":
				if r.Backend, err = transfer.NewNIXLRemote(c.Name, c.Peer, c.PeerToken, kinds); err != nil {
					return r.failStart(c, st, err)
				}
			default:
				return fmt.Errorf("agent: --backend %q: want host or nixl", c.Backend)
			}
		case c.Backend == "" || c.Backend == "host":
			r.Backend = transfer.NewHost(c.HostLimit, kindOf)
		case c.Backend == "nixl":
			if r.Backend, err = transfer.NewNIXL(c.Name, kinds); err != nil {
				return r.failStart(c, st, err)
			}
		default:
			return fmt.Errorf("agent: --backend %q: want host or nixl", c.Backend)
		}
		run = r.Run
	case "p":
		if c.Listen == "" {
			return fmt.Errorf("agent: --role p needs --listen, the address D agents connect to")
		}
		switch c.Backend {
		case "", "host":
			r.Backend = transfer.NewHost(c.HostLimit, kindOf)
		case "nixl":
			if r.Backend, err = transfer.NewNIXLSide(c.Name, xfer.P, kinds); err != nil {
				return r.failStart(c, st, err)
			}
		default:
			return fmt.Errorf("agent: --backend %q: want host or nixl", c.Backend)
		}
		ln, err := net.Listen("tcp", c.Listen)
		if err != nil {
			r.Backend.Close()
			return fmt.Errorf("agent: --listen %s: %w", c.Listen, err)
		}
		logf("P agent listening on %s", ln.Addr())
		run = func(ctx context.Context) error { return r.ServeP(ctx, r.Backend, ln, c.PeerToken) }
	default:
		return fmt.Errorf("agent: --role %q: want both, p or d", c.Role)
	}
	defer r.Backend.Close()
	if _, ok := r.Backend.(transfer.Prefiller); ok {
		// A P agent that stops answering must not hold D past its stop.
		defer context.AfterFunc(ctx, func() { r.Backend.Close() })()
	}
	return runStreaming(ctx, st, logf, run)
}

// runStreaming runs the agent's job with the event streamer beside it, and
// sends what is queued when the job ends.
func runStreaming(ctx context.Context, st eventStream, logf func(string, ...any), run func(context.Context) error) error {
	var wg sync.WaitGroup
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	if st != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.Run(streamCtx); err != nil {
				logf("agent: %v", err) // the events cannot leave (a refused --nats login)
			}
		}()
	}
	err := run(ctx)
	if err != nil {
		logf("agent: %v", err)
	}
	if st != nil && ctx.Err() == nil {
		// The scenario is over: send what is queued, then stop.
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if ferr := st.Flush(fctx); ferr != nil {
			logf("agent: %d events not acknowledged by the server before stopping", st.Pending())
		}
		cancel()
	}
	stopStream()
	wg.Wait()
	return err
}

// failStart reports a backend that could not start (NIXL's status name
// in an error event, which reaches the server when one is given) and
// returns the error.
func (r *Runner) failStart(c Config, st eventStream, err error) error {
	status := "ERR_BACKEND"
	var ne *transfer.NIXLError
	if errors.As(err, &ne) {
		status = ne.StatusName()
	}
	err = fmt.Errorf("agent: --backend %s: %w", c.Backend, err)
	return runStreaming(context.Background(), st, r.logf, func(context.Context) error {
		r.emit(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: status, Message: event.Clip(err.Error(), maxMessage)}})
		return err
	})
}

// logSink is where events go when no server is given: each transfer is
// logged in one line (the runner logs errors itself).
type logSink struct {
	mu   sync.Mutex
	logf func(format string, args ...any)
}

// Publish implements Sink.
func (l *logSink) Publish(e event.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Kind {
	case event.Hello:
		l.logf("agent: %s (%s, %s, role %s)", e.Hello.Scenario, e.Hello.Backend, e.Hello.Memory, e.Hello.Role)
	case event.Handshake:
		l.logf("handshake: %s %s", e.Handshake.Summary, e.Handshake.Rejection)
	case event.TransferDone:
		d := e.Done
		l.logf("%s: %d bytes, %d descriptors (%d merged), %.0f µs (%s by %s), %.2f GB/s, %s", d.Request, d.Bytes, d.Descs, d.Merged, d.TransferUS, d.Timing, d.Source, d.GBps, d.Verified)
	}
}

// Dropped implements Sink: nothing is dropped.
func (l *logSink) Dropped() uint64 { return 0 }

// DefaultName is an agent's name when none is given: the host name, with
// the role of one agent of a pair (both may share a host).
func DefaultName(role string) (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("the host name (the default --name): %w", err)
	}
	if role == "p" || role == "d" {
		host += "/" + role
	}
	return host, nil
}
