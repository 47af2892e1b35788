package live

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// replica is one kvscope serve's hub on the shared event log, restartable.
type replica struct {
	*livetest.Replica
	srv *liveServer // the hub now served
}

func startReplica(t testing.TB, natsURL, addr string) *replica {
	r := &replica{}
	r.Replica = livetest.StartReplica(t, natsURL, addr, func(ln net.Listener, nats string, replay uint64) func() {
		b, err := eventlog.Open(context.Background(), eventlog.Options{URLs: nats, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		r.srv = serveOn(ln, serverOptions{token: livetest.Token, log: b, replay: replay, logf: func(string, ...any) {}})
		return func() { r.srv.stop(); b.Close() }
	})
	return r
}

// fleetSub is a browser stand-in: it subscribes to a replica's /ws/live,
// resumes after the last stream message it saw when it reconnects, and
// keeps every (agent, seq) it received, counting duplicates within one
// connection (the hub must never send an event twice on a connection;
// across reconnections the history overlaps, as the browser expects).
type fleetSub struct {
	url      string
	mu       sync.Mutex
	got      map[string]map[uint64]bool
	sameConn int // an event received twice on one connection
	since    uint64
	conns    int
	pause    chan time.Duration
	logf     func(string, ...any)
	// Detail (dseq), per agent: the last seen, how many, the jumps in
	// it (what it was told it missed), and when the last arrived.
	dlast  map[string]uint64
	dcount map[string]int
	dgaps  map[string]uint64
	dat    map[string]time.Time
}

func newFleetSub(addr string) *fleetSub {
	return &fleetSub{url: "ws://" + addr + "/ws/live", got: map[string]map[uint64]bool{}, pause: make(chan time.Duration, 1), logf: func(string, ...any) {}}
}

func (s *fleetSub) run(ctx context.Context) {
	for ctx.Err() == nil {
		s.once(ctx)
		select {
		case <-ctx.Done():
		case d := <-s.pause: // a disconnected browser
			time.Sleep(d)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// once is one connection, until it fails or a pause is asked for.
func (s *fleetSub) once(ctx context.Context) {
	s.mu.Lock()
	u := s.url
	if s.since > 0 {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += fmt.Sprintf("%ssince=%d", sep, s.since)
	}
	s.conns++
	s.mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, _, err := websocket.Dial(cctx, u, nil)
	if err != nil {
		s.logf("dial %s: %v", u, err)
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(event.MaxFrameBytes + 1024)
	seen := map[string]map[uint64]bool{}
	first := true
	for {
		select {
		case d := <-s.pause:
			s.pause <- d // run sleeps it
			return
		default:
		}
		_, data, err := conn.Read(cctx)
		if err != nil {
			s.logf("%s: %v", u, err)
			return
		}
		if first {
			first = false
			if strings.HasPrefix(string(data), `{"history"`) {
				continue
			}
		}
		events, err := event.DecodeFrame(data)
		if err != nil {
			continue
		}
		s.mu.Lock()
		for _, e := range events {
			if e.Detail != 0 {
				if s.dlast == nil {
					s.dlast, s.dcount, s.dgaps, s.dat = map[string]uint64{}, map[string]int{}, map[string]uint64{}, map[string]time.Time{}
				}
				if last, ok := s.dlast[e.Agent]; ok && e.Detail > last+1 {
					s.dgaps[e.Agent] += e.Detail - last - 1
				}
				if e.Detail > s.dlast[e.Agent] {
					s.dlast[e.Agent] = e.Detail
				}
				s.dcount[e.Agent]++
				s.dat[e.Agent] = time.Now()
				continue
			}
			if seen[e.Agent] == nil {
				seen[e.Agent] = map[uint64]bool{}
			}
			if seen[e.Agent][e.Seq] && !event.IsState(e.Kind) {
				s.sameConn++
			}
			seen[e.Agent][e.Seq] = true
			if s.got[e.Agent] == nil {
				s.got[e.Agent] = map[uint64]bool{}
			}
			s.got[e.Agent][e.Seq] = true
			s.since = max(s.since, e.Stream)
		}
		s.mu.Unlock()
	}
}

// missing counts the events of want a subscriber does not have.
func (s *fleetSub) missing(want map[string]uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for agent, last := range want {
		for seq := uint64(1); seq <= last; seq++ {
			if !s.got[agent][seq] {
				n++
			}
		}
	}
	return n
}

// someMissing names a few missing events.
func (s *fleetSub) someMissing(want map[string]uint64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for agent, last := range want {
		for seq := uint64(1); seq <= last && len(out) < 12; seq++ {
			if !s.got[agent][seq] {
				out = append(out, fmt.Sprintf("%s#%d", agent, seq))
			}
		}
	}
	return strings.Join(out, " ")
}

// TestFleet is the fleet in short: 10 agents stream to two kvscope serve
// replicas that share one JetStream event log, and browsers (Go websocket
// clients) on both replicas see every agent's events. Meanwhile one
// replica restarts, the NATS server restarts (file storage), and a
// browser is disconnected for 2 s. In the end every subscriber holds every
// event no agent counted as dropped, and no connection carried an event
// twice.
func TestFleet(t *testing.T) {
	const agents, perAgent, rate = 10, 400, 100 // events, events per second per agent
	n := livetest.StartNATS(t)
	r1 := startReplica(t, n.URL(), livetest.FreeAddr(t))
	r2 := startReplica(t, n.URL(), livetest.FreeAddr(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	subs := []*fleetSub{newFleetSub(r1.Addr), newFleetSub(r1.Addr), newFleetSub(r2.Addr), newFleetSub(r2.Addr)}
	var wg sync.WaitGroup
	for i, s := range subs {
		s.logf = func(f string, a ...any) { t.Logf("subscriber %d: "+f, append([]any{i}, a...)...) }
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	var pubs sync.WaitGroup
	streamers := livetest.StartAgents(ctx, &wg, &pubs, agents, perAgent, rate, "gpu%02d.fleet/agent", r1.Addr, r2.Addr)

	time.Sleep(800 * time.Millisecond)
	t.Log("restarting replica 1")
	r1.Stop()
	time.Sleep(300 * time.Millisecond)
	r1.Start()
	subs[2].pause <- 2 * time.Second
	time.Sleep(800 * time.Millisecond)
	t.Log("restarting the NATS server")
	n.Stop()
	time.Sleep(300 * time.Millisecond)
	n.Start()
	pubs.Wait()

	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	want := map[string]uint64{}
	var dropped uint64
	for _, st := range streamers {
		if err := st.Flush(fctx); err != nil {
			t.Fatalf("agent %s: %d events never acknowledged: %v", st.Agent, st.Pending(), err)
		}
		want[st.Agent] = perAgent
		dropped += st.Dropped()
	}
	if dropped > 0 {
		t.Fatalf("the agents dropped %d events (their queues overflowed)", dropped)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		worst := 0
		for _, s := range subs {
			worst = max(worst, s.missing(want))
		}
		if worst == 0 {
			break
		}
		if time.Now().After(deadline) {
			for i, s := range subs {
				t.Errorf("subscriber %d (%s): %d of %d events missing after %d connections: %s", i, s.url, s.missing(want), agents*perAgent, s.conns, s.someMissing(want))
			}
			for _, r := range []*replica{r1, r2} {
				var sb strings.Builder
				r.srv.metrics.Write(&sb)
				for _, line := range strings.Split(sb.String(), "\n") {
					if strings.Contains(line, "dropped_frames") || strings.Contains(line, "bus_") {
						t.Logf("%s: %s", r.Addr, line)
					}
				}
			}
			t.FailNow()
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, s := range subs {
		s.mu.Lock()
		if s.sameConn > 0 {
			t.Errorf("subscriber %d: %d events arrived twice on one connection", i, s.sameConn)
		}
		t.Logf("subscriber %d: all %d events in %d connections", i, agents*perAgent, s.conns)
		s.mu.Unlock()
	}
	// Each replica's /metrics has the log's figures: what is stored, and
	// its consumer caught up.
	for _, r := range []*replica{r1, r2} {
		var sb strings.Builder
		r.srv.metrics.Write(&sb)
		text := sb.String()
		for _, want := range []string{"kvscope_stream_messages ", "kvscope_stream_consumer_delivered_total ", "kvscope_stream_consumer_lag 0\n", "kvscope_nats_reconnects_total "} {
			if !strings.Contains(text, want) {
				t.Errorf("replica %s's metrics lack %q", r.Addr, want)
			}
		}
	}
	cancel()
	wg.Wait()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// TestAgentsOnNATS: agents publish straight to kvscope serve's embedded
// NATS server (kvscope-agent --nats): their events reach the replica's
// browsers; a wrong token is refused with a message that says what the
// server takes; and an agent may publish only on its own subject.
func TestAgentsOnNATS(t *testing.T) {
	const tok = "nats-agent-token"
	b := openLog(t, eventlog.Options{Token: tok})
	l := startServer(t, "127.0.0.1:0", serverOptions{token: tok, log: b})
	defer l.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := newFleetSub(l.addr)
	go sub.run(ctx)

	agent := &stream.NATS{Streamer: stream.Streamer{Agent: "gpu1.example/agent"}, URLs: b.URL(),
		Auth: stream.NATSAuth{User: "gpu1.example/agent", Password: credFor(tok, "gpu1.example/agent")}}
	go agent.Run(ctx)
	agent.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "gpu1", Role: "both", GPUs: []event.GPU{}}})
	for i := 2; i <= 100; i++ {
		agent.Publish(livetest.FleetEvent(i))
	}
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	defer fcancel()
	if err := agent.Flush(fctx); err != nil {
		t.Fatalf("%d events not stored: %v", agent.Pending(), err)
	}
	for deadline := time.Now().Add(10 * time.Second); sub.missing(map[string]uint64{"gpu1.example/agent": 100}) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the browser has not got the agent's events: %s", sub.someMissing(map[string]uint64{"gpu1.example/agent": 100}))
		}
	}

	wrong := &stream.NATS{Streamer: stream.Streamer{Agent: "gpu2/agent"}, URLs: b.URL(), Auth: stream.NATSAuth{User: "gpu2/agent", Password: "not-the-token"}}
	if err := wrong.Run(ctx); err == nil || !strings.Contains(err.Error(), `refused agent "gpu2/agent"`) || !strings.Contains(err.Error(), "agent-token") {
		t.Errorf("a wrong token: %v", err)
	}

	perm := make(chan error, 4)
	nc, err := nats.Connect(b.URL(), nats.UserInfo("gpu3/agent", credFor(tok, "gpu3/agent")), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Publish(event.Subject("gpu1.example/agent"), []byte(`{"v":1}`)) // another agent's subject
	nc.Flush()
	select {
	case err := <-perm:
		if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Errorf("publishing as another agent: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("publishing on another agent's subject was not refused")
	}
}

// TestBusBadInput: a message on the stream that is no agent's frame
// (garbage, or a frame of another agent's events on one agent's
// subject) is skipped, counted and named in the log; the replica keeps
// serving. (The log's own bad input, an unreachable --nats and a missing
// credentials file, is eventlog's TestOpenBadInput.)
func TestBusBadInput(t *testing.T) {
	n := livetest.StartNATS(t)
	r := startReplica(t, n.URL(), livetest.FreeAddr(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := newFleetSub(r.Addr)
	go sub.run(ctx)
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Garbage, and a frame of another agent's events, on one agent's subject.
	nc.Publish(event.Subject("mallory"), []byte("not a frame"))
	forged, _ := event.EncodeFrame([]event.Event{{V: event.Version, Agent: "alice", Seq: 1, Kind: event.Sample, Sample: &event.SampleData{}}})
	msg := nats.NewMsg(event.Subject("mallory"))
	msg.Data, msg.Header = forged, nats.Header{stream.HeaderAgent: {"mallory"}}
	nc.PublishMsg(msg)
	nc.Flush()
	st := &stream.Streamer{Agent: "honest/agent", URL: "ws://" + r.Addr + "/ws/agent", Token: livetest.Credential("honest/agent")}
	go st.Run(ctx)
	for i := 1; i <= 50; i++ {
		st.Publish(livetest.FleetEvent(i))
	}
	for deadline := time.Now().Add(10 * time.Second); sub.missing(map[string]uint64{"honest/agent": 50}) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica stopped serving after a bad message")
		}
	}
	var sb strings.Builder
	r.srv.metrics.Write(&sb)
	if !strings.Contains(sb.String(), "kvscope_bus_bad_messages_total 2") {
		t.Errorf("bad messages not counted as 2:\n%s", sb.String())
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.got["alice"]) > 0 || len(sub.got["mallory"]) > 0 {
		t.Errorf("a forged or garbage message reached a browser: %v", sub.got)
	}
}
