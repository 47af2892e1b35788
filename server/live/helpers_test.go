package live

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/runner"
	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/server/live/eventlog"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// testCatalog is the bundled model configs, for the agents the tests run.
func testCatalog() model.Catalog { return catalog.Bundled() }

// liveServer is a hub served on a real loopback port, as kvscope serve
// mounts it: /ws/agent, /ws/live and /metrics.
type liveServer struct {
	hub     *Hub
	metrics *metrics.Registry
	hs      *http.Server
	addr    string
	done    chan struct{}
}

// serverOptions are what a test's hub is made with.
type serverOptions struct {
	token         string
	record        io.Writer
	log           *eventlog.Log
	replay        uint64
	budget        Budget
	perCredential int
	logf          func(string, ...any)
}

// startLive listens on addr (retrying while a stopped server's port is
// released) and serves a new hub.
func startLive(t testing.TB, addr, token string, rec io.Writer) *liveServer {
	return startServer(t, addr, serverOptions{token: token, record: rec, logf: t.Logf})
}

func startServer(t testing.TB, addr string, o serverOptions) *liveServer {
	t.Helper()
	return serveOn(livetest.Listen(t, addr), o)
}

// serveOn serves a hub made with o on ln.
func serveOn(ln net.Listener, o serverOptions) *liveServer {
	reg := metrics.New()
	h := New(Options{Metrics: reg, Log: o.log, Replay: o.replay, Record: o.record, AgentBudget: o.budget, MaxAgentsPerCredential: o.perCredential, Logf: o.logf})
	mux := http.NewServeMux()
	mux.Handle("/ws/agent", h.AgentHandler(o.token))
	mux.Handle("/ws/live", h.LiveHandler())
	mux.Handle("/metrics", reg.Handler())
	l := &liveServer{hub: h, metrics: reg, addr: ln.Addr().String(), done: make(chan struct{})}
	l.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(l.done)
		l.hs.Serve(ln)
	}()
	return l
}

// stop ends every connection, as a stopping server does.
func (l *liveServer) stop() {
	l.hub.Close()
	l.hs.Close()
	<-l.done
}

// openLog opens an embedded event log with o, in a directory of its own
// unless o names one or a NATS server, closed when the test ends.
func openLog(t testing.TB, o eventlog.Options) *eventlog.Log {
	t.Helper()
	if o.DataDir == "" && o.URLs == "" {
		o.DataDir = t.TempDir()
	}
	b, err := eventlog.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// liveSub collects what /ws/live sends, reconnecting when asked.
type liveSub struct {
	mu     sync.Mutex
	events []event.Event
}

// follow reads /ws/live at addr until ctx ends or the connection drops.
func (s *liveSub) follow(ctx context.Context, addr string) error {
	conn, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws/live", nil)
	if err != nil {
		return err
	}
	defer conn.CloseNow()
	conn.SetReadLimit(8 << 20)
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		if _, ok := event.HistoryCount(data); ok {
			continue // the header before the history frames
		}
		if _, ok := event.ParseFleet(data); ok {
			continue // the fleet summary, once a second
		}
		evs, err := event.DecodeFrame(data)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.events = append(s.events, evs...)
		s.mu.Unlock()
	}
}

func (s *liveSub) snapshot() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events...)
}

// waitFor polls until cond holds on the events seen.
func (s *liveSub) waitFor(t *testing.T, what string, d time.Duration, cond func([]event.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond(s.snapshot()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s (%d events seen)", what, len(s.snapshot()))
}

// seqs are the distinct sequence numbers of one agent, and the highest.
func seqs(events []event.Event, agent string) (map[uint64]bool, uint64) {
	seen := map[uint64]bool{}
	var hi uint64
	for _, e := range events {
		if e.Agent == agent {
			seen[e.Seq] = true
			hi = max(hi, e.Seq)
		}
	}
	return seen, hi
}

func countExact(events []event.Event) int {
	n := 0
	for _, e := range events {
		if e.Kind == event.TransferDone && e.Done.Verified == "exact" {
			n++
		}
	}
	return n
}

// startAgent runs an agent on the default scenario (faster) streaming to
// addr; it returns its streamer and a stop function.
func startAgent(t *testing.T, addr, token string) (*stream.Streamer, func()) {
	t.Helper()
	s := scenario.Default()
	s.Rate = 25
	st := &stream.Streamer{Agent: "test-agent", URL: "ws://" + addr + "/ws/agent", Token: credFor(token, "test-agent"), Logf: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := runner.Start(ctx, runner.Config{Name: "test-agent", Scenario: s, Catalog: testCatalog(), Streamer: st, HostLimit: 512 << 20, Logf: t.Logf})
		if err != nil && ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
	}()
	return st, func() {
		cancel()
		<-done
	}
}

// syncBuffer is a bytes.Buffer a hub writes to while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// metricsText is what /metrics at addr serves.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// credFor is agent's credential from a server whose token is token.
func credFor(token, agent string) string {
	cred, _ := event.IssueCredential(token, agent)
	return cred
}
