package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// fleetToken is the agents' token in the fleet tests.
const fleetToken = "fleet-token"

// testNATS is a NATS server with JetStream on file storage, restartable on
// its address and directory.
type testNATS struct {
	t    testing.TB
	addr string
	dir  string
	srv  *natsserver.Server
}

func startNATS(t testing.TB) *testNATS {
	n := &testNATS{t: t, addr: freeAddr(t), dir: t.TempDir()}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *testNATS) url() string { return "nats://" + n.addr }

func (n *testNATS) start() {
	host, port, _ := splitLoopback(n.addr)
	srv, err := natsserver.NewServer(&natsserver.Options{ServerName: "fleet-test", Host: host, Port: port, JetStream: true,
		StoreDir: n.dir, NoSigs: true, NoLog: true, MaxPayload: 8 << 20})
	if err != nil {
		n.t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		n.t.Fatal("NATS did not start")
	}
	n.srv = srv
}

func (n *testNATS) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// replica is one kvscope serve on the shared event log.
type replica struct {
	replay uint64 // frames read back at start (0: the default)
	t      testing.TB
	addr   string
	nats   string
	srv    *server
	hs     *http.Server
	bus    *bus
}

func startReplica(t testing.TB, natsURL, addr string) *replica {
	r := &replica{t: t, addr: addr, nats: natsURL}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) start() {
	b, err := openBus(context.Background(), busOptions{URLs: r.nats, Logf: r.t.Logf})
	if err != nil {
		r.t.Fatal(err)
	}
	var ln net.Listener
	for i := 0; ; i++ { // the old listener's port may take a moment to free
		if ln, err = net.Listen("tcp", r.addr); err == nil || i == 50 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.bus = b
	r.srv = newServer(catalog(), serveOptions{Addr: r.addr, Token: fleetToken, Agent: "none", Bus: b, Replay: r.replay, Logf: func(string, ...any) {}}, nil)
	r.hs = newHTTPServer(r.srv.handler)
	go r.hs.Serve(ln)
}

func (r *replica) stop() {
	if r.hs == nil {
		return
	}
	r.srv.hub.close()
	r.hs.Close()
	r.bus.close()
	r.hs = nil
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
		u += fmt.Sprintf("?since=%d", s.since)
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
			if seen[e.Agent] == nil {
				seen[e.Agent] = map[uint64]bool{}
			}
			if seen[e.Agent][e.Seq] && !isState(e.Kind) {
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

// fleetEvent is the i-th event of a simulated agent: mostly descriptor
// batches, a transfer every 8th, a sample every 50th.
func fleetEvent(i int) event.Event {
	switch {
	case i%50 == 0:
		return event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: 1.5, P50US: 80, P99US: 400, Requests: i / 8}}
	case i%8 == 0:
		return event.Event{Kind: event.TransferDone, Done: &event.DoneData{Request: fmt.Sprintf("req-%d", i/8), Bytes: 1 << 20, Descs: 96, Merged: 12,
			TransferUS: 90, GBps: 11.6, Timing: event.Measured, Source: "host", Verified: "exact"}}
	}
	return event.Event{Kind: event.DescBatch, Batch: &event.BatchData{Request: fmt.Sprintf("req-%d", i/8), PRank: i % 2, DRank: i % 4,
		Layer: fmt.Sprintf("model.layers.%d.self_attn", i%24), Kind: "full", Descs: 8, Bytes: 131072, EndNS: 4000, Timing: event.Measured}}
}

// startFleetAgents starts n agents named by the format, spread over the
// replicas' addresses, each publishing its hello and then perAgent-1
// fleet events at rate a second; wg ends with their streams, pubs with
// their publishing.
func startFleetAgents(ctx context.Context, wg, pubs *sync.WaitGroup, n, perAgent, rate int, name string, addrs ...string) []*stream.Streamer {
	streamers := make([]*stream.Streamer, n)
	for i := range streamers {
		st := &stream.Streamer{Agent: fmt.Sprintf(name, i), URL: "ws://" + addrs[i%len(addrs)] + "/ws/agent", Token: fleetToken}
		streamers[i] = st
		wg.Add(1)
		go func() { defer wg.Done(); st.Run(ctx) }()
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: st.Agent, Role: "both", Backend: "host", GPUs: []event.GPU{}}})
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for j := 2; j <= perAgent; j++ {
				<-tick.C
				st.Publish(fleetEvent(j))
			}
		}()
	}
	return streamers
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
	n := startNATS(t)
	r1 := startReplica(t, n.url(), freeAddr(t))
	r2 := startReplica(t, n.url(), freeAddr(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	subs := []*fleetSub{newFleetSub(r1.addr), newFleetSub(r1.addr), newFleetSub(r2.addr), newFleetSub(r2.addr)}
	var wg sync.WaitGroup
	for i, s := range subs {
		s.logf = func(f string, a ...any) { t.Logf("subscriber %d: "+f, append([]any{i}, a...)...) }
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	var pubs sync.WaitGroup
	streamers := startFleetAgents(ctx, &wg, &pubs, agents, perAgent, rate, "gpu%02d.fleet/agent", r1.addr, r2.addr)

	time.Sleep(800 * time.Millisecond)
	t.Log("restarting replica 1")
	r1.stop()
	time.Sleep(300 * time.Millisecond)
	r1.start()
	subs[2].pause <- 2 * time.Second
	time.Sleep(800 * time.Millisecond)
	t.Log("restarting the NATS server")
	n.stop()
	time.Sleep(300 * time.Millisecond)
	n.start()
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
						t.Logf("%s: %s", r.addr, line)
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
				t.Errorf("replica %s's metrics lack %q", r.addr, want)
			}
		}
	}
	cancel()
	wg.Wait()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// TestFleetBrowser: in Chromium, the live view on replica 2 shows the
// events of agents connected to replica 1 (through the shared JetStream
// log); replica 2 restarts meanwhile, the page reconnects and resumes from
// the log: in the end it has every event, with no sequence gap.
func TestFleetBrowser(t *testing.T) {
	ctx, _, _ := browser(t)
	const agents, perAgent, rate = 4, 600, 200
	n := startNATS(t)
	r1 := startReplica(t, n.url(), freeAddr(t))
	r2 := startReplica(t, n.url(), freeAddr(t))
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+r2.addr+"/?view=flow")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #live`))); err != nil {
		t.Fatalf("the live panel never showed: %v", err)
	}
	waitFor(t, ctx, "the live websocket opens", `!!document.querySelector('[data-testid="live-status"][data-state="open"]')`, 15*time.Second)
	actx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg, pubs sync.WaitGroup
	streamers := startFleetAgents(actx, &wg, &pubs, agents, perAgent, rate, "host%d/agent", r1.addr)
	time.Sleep(time.Second)
	t.Log("restarting replica 2, the page's, with a history of 8 frames: the page must resume from the log")
	r2.stop()
	r2.replay = 8
	time.Sleep(500 * time.Millisecond)
	r2.start()
	pubs.Wait()
	for _, st := range streamers {
		fctx, fcancel := context.WithTimeout(actx, 20*time.Second)
		if err := st.Flush(fctx); err != nil {
			t.Fatalf("%s: %v", st.Agent, err)
		}
		fcancel()
	}
	want := agents * perAgent
	waitFor(t, ctx, fmt.Sprintf("all %d events in the page", want),
		fmt.Sprintf(`document.querySelector('[data-testid="live-events"]')?.dataset.count == '%d'`, want), 30*time.Second)
	gaps, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-gaps"]').dataset.count`))
	if err != nil || gaps != "0" {
		t.Errorf("the page counts %s events missed (%v), want 0", gaps, err)
	}
	cancel()
	wg.Wait()
}

// TestAgentsOnNATS: agents publish straight to kvscope serve's embedded
// NATS server (kvscope-agent --nats): their events reach the replica's
// browsers; a wrong token is refused with a message that says what the
// server takes; and an agent may publish only on its own subject.
func TestAgentsOnNATS(t *testing.T) {
	const tok = "nats-agent-token"
	b, err := openBus(context.Background(), busOptions{DataDir: t.TempDir(), Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	srv := newServer(catalog(), serveOptions{Addr: "127.0.0.1:0", Token: tok, Agent: "none", Bus: b}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := newHTTPServer(srv.handler)
	go hs.Serve(ln)
	defer func() { srv.hub.close(); hs.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := newFleetSub(ln.Addr().String())
	go sub.run(ctx)

	agent := &stream.NATS{Streamer: stream.Streamer{Agent: "gpu1.example/agent"}, URLs: b.url,
		Auth: stream.NATSAuth{User: "gpu1.example/agent", Password: tok}}
	go agent.Run(ctx)
	agent.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "gpu1", Role: "both", GPUs: []event.GPU{}}})
	for i := 2; i <= 100; i++ {
		agent.Publish(fleetEvent(i))
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

	wrong := &stream.NATS{Streamer: stream.Streamer{Agent: "gpu2/agent"}, URLs: b.url, Auth: stream.NATSAuth{User: "gpu2/agent", Password: "not-the-token"}}
	if err := wrong.Run(ctx); err == nil || !strings.Contains(err.Error(), `refused agent "gpu2/agent"`) || !strings.Contains(err.Error(), "--token") {
		t.Errorf("a wrong token: %v", err)
	}

	perm := make(chan error, 4)
	nc, err := nats.Connect(b.url, nats.UserInfo("gpu3/agent", tok), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { perm <- err }))
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

// TestBusBadInput: an unreachable --nats, a missing credentials file and a
// message on the stream that is no agent's frame each get an error naming
// them; the replica skips the bad message, counts it and keeps serving.
func TestBusBadInput(t *testing.T) {
	dead := "nats://" + freeAddr(t)
	if _, err := openBus(context.Background(), busOptions{URLs: dead}); err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("an unreachable --nats: %v", err)
	}
	n := startNATS(t)
	if _, err := openBus(context.Background(), busOptions{URLs: n.url(), Auth: stream.NATSAuth{Creds: "/nonexistent.creds"}}); err == nil ||
		!strings.Contains(err.Error(), "--nats-creds /nonexistent.creds") {
		t.Errorf("a missing creds file: %v", err)
	}
	r := startReplica(t, n.url(), freeAddr(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := newFleetSub(r.addr)
	go sub.run(ctx)
	// Garbage, and a frame of another agent's events, on one agent's subject.
	r.bus.nc.Publish(event.Subject("mallory"), []byte("not a frame"))
	forged, _ := event.EncodeFrame([]event.Event{{V: event.Version, Agent: "alice", Seq: 1, Kind: event.Sample, Sample: &event.SampleData{}}})
	msg := nats.NewMsg(event.Subject("mallory"))
	msg.Data, msg.Header = forged, nats.Header{stream.HeaderAgent: {"mallory"}}
	r.bus.nc.PublishMsg(msg)
	st := &stream.Streamer{Agent: "honest/agent", URL: "ws://" + r.addr + "/ws/agent", Token: fleetToken}
	go st.Run(ctx)
	for i := 1; i <= 50; i++ {
		st.Publish(fleetEvent(i))
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

// TestReplayFromStream: kvscope replay --nats reads the events of a range
// of stream messages, stamped with their sequence numbers.
func TestReplayFromStream(t *testing.T) {
	n := startNATS(t)
	b, err := openBus(context.Background(), busOptions{URLs: n.url()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	for f := uint64(0); f < 3; f++ {
		evs := []event.Event{{V: event.Version, Agent: "a", Seq: 2*f + 1, TS: 1, Kind: event.Sample, Sample: &event.SampleData{}},
			{V: event.Version, Agent: "a", Seq: 2*f + 2, TS: 2, Kind: event.Sample, Sample: &event.SampleData{}}}
		frame, _ := event.EncodeFrame(evs)
		if err := b.publish(context.Background(), "a", frame, 2*f+1, 2*f+2, 2); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := openBus(context.Background(), busOptions{URLs: n.url(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.close()
	events, err := ro.readEvents(context.Background(), 2, 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%d@%d", e.Seq, e.Stream))
	}
	if fmt.Sprint(got) != "[3@2 4@2 5@3 6@3]" {
		t.Errorf("messages 2-3: %v, want [3@2 4@2 5@3 6@3]", got)
	}
}

// TestRouteStored: a stored frame's events come out with their stream
// sequence first and every field of their own, equal to encoding them
// with it; strings holding braces, quotes and escapes do not confuse the
// split; the payloads the hub reads are decoded, a descriptor batch's is
// not; a frame of another agent, with a stream sequence of its own, or
// with a payload the hub reads that does not decode is refused, naming
// the event.
func TestRouteStored(t *testing.T) {
	evs := []event.Event{
		{V: event.Version, Agent: "a", Seq: 1, TS: 5, Kind: event.Error, Error: &event.ErrorData{Status: "ERR_X", Message: `brace } { "quoted" \ back\slash \"`}},
		{V: event.Version, Agent: "a", Seq: 2, TS: 6, Kind: event.Sample, Sample: &event.SampleData{GBps: 1.5}},
		{V: event.Version, Agent: "a", Seq: 3, TS: 7, Kind: event.DescBatch, Batch: &event.BatchData{Request: "r}", Descs: 4, Timing: event.Measured}},
	}
	frame, err := event.EncodeFrame(evs)
	if err != nil {
		t.Fatal(err)
	}
	events, raws, err := routeStored(frame, "a", 42)
	if err != nil || len(raws) != 3 || len(events) != 3 {
		t.Fatalf("%d events, %d raws, %v", len(events), len(raws), err)
	}
	for i, raw := range raws {
		if !bytes.HasPrefix(raw, []byte(`{"stream_seq":42,"v":1,`)) {
			t.Errorf("raw %d: %s", i, raw)
		}
		var got event.Event
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		want := evs[i]
		want.Stream = 42
		if fmt.Sprint(got.Error, got.Sample, got.Batch, got.Seq, got.Stream) != fmt.Sprint(want.Error, want.Sample, want.Batch, want.Seq, want.Stream) {
			t.Errorf("raw %d: %+v, want %+v", i, got, want)
		}
		if e := events[i]; e.Seq != want.Seq || e.Stream != 42 || e.Kind != want.Kind || e.TS != want.TS {
			t.Errorf("event %d: %+v, want %+v", i, e, want)
		}
	}
	if events[0].Error == nil || events[0].Error.Status != "ERR_X" || events[1].Sample == nil || events[1].Sample.GBps != 1.5 || events[2].Batch != nil {
		t.Errorf("payloads: %+v %+v %+v", events[0].Error, events[1].Sample, events[2].Batch)
	}
	for _, tt := range []struct{ frame, agent, want string }{
		{string(frame), "b", `event 0: agent: "a" in a message of agent "b"`},
		{`[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","stream_seq":0,"batch":{}}]`, "a", "event 0: stream_seq: set in a stored event"},
		{`[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","batch":{}},{"v":1,"agent":"a","seq":2,"kind":"sample","sample":{"gbps":"fast"}}]`, "a", "event 1: event: json: cannot unmarshal"},
		{`[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","batch":{}]`, "a", "event 0"},
		{`{"a":1}`, "a", "not a JSON array"},
	} {
		if _, _, err := routeStored([]byte(tt.frame), tt.agent, 1); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.frame, err, tt.want)
		}
	}
}

// TestFleetView: in Chromium, 25 agents stream (more than the page draws
// unasked): the fleet table lists all 25 with their rates, the page
// subscribes to none of their batches until a row is clicked, then draws
// that agent's bands only; the slowest transfers are listed fleet-wide.
func TestFleetView(t *testing.T) {
	ctx, _, _ := browser(t)
	n := startNATS(t)
	r := startReplica(t, n.url(), freeAddr(t))
	actx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 25 {
		st := &stream.Streamer{Agent: fmt.Sprintf("gpu%02d/agent", i), URL: "ws://" + r.addr + "/ws/agent", Token: fleetToken}
		wg.Add(2)
		go func() { defer wg.Done(); st.Run(actx) }()
		go func() {
			defer wg.Done()
			st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: fmt.Sprintf("gpu%02d", i), Role: "both", Backend: "host", GPUs: []event.GPU{}}})
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for j := 2; actx.Err() == nil; j++ {
				select {
				case <-actx.Done():
					return
				case <-tick.C:
				}
				e := fleetEvent(j)
				if e.Done != nil {
					e.Done.TransferUS = float64(100*i + j%7) // agent 24 is the slowest
				}
				st.Publish(e)
			}
		}()
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+r.addr+"/?view=flow")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "25 agents in the fleet table", `document.querySelectorAll('[data-testid="fleet-agent"]').length == 25`, 30*time.Second)
	waitFor(t, ctx, "rates in the fleet table",
		`[...document.querySelectorAll('[data-testid="fleet-agent"]')].every(r => Number(r.children[6].textContent.replace(/,/g, '')) > 0)`, 15*time.Second)
	time.Sleep(time.Second)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="live-band"]').length`)); err != nil || n != 0 {
		t.Errorf("%d bands drawn before any agent was picked (%v): a page should not take every agent's batches", n, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`[data-testid="fleet-agent"][data-agent="gpu03/agent"]`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "gpu03's bands", `document.querySelectorAll('.live-agent[data-agent="gpu03/agent"] [data-testid="live-band"]').length > 0`, 20*time.Second)
	others, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('.live-agent')].filter(d => d.dataset.agent != 'gpu03/agent').length`))
	if others != 0 {
		t.Errorf("%d other agents drawn after picking gpu03", others)
	}
	waitFor(t, ctx, "the slowest transfers, fleet-wide", `document.querySelector('[data-testid="fleet-slowest"] td')?.textContent == 'gpu24/agent'`, 15*time.Second)
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "fleet", shot)
}

// TestMain lets a test run this test binary as kvscope itself
// (KVSCOPE_SERVER_MAIN=1): a real kvscope serve process.
func TestMain(m *testing.M) {
	if os.Getenv("KVSCOPE_SERVER_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer a process writes to while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeWithoutItsLog: kvscope serve --nats naming a server nobody runs
// says so, naming it, and serves the app and the API all the same.
func TestServeWithoutItsLog(t *testing.T) {
	dead := "nats://" + freeAddr(t)
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--addr", addr, "--agent", "none", "--nats", dead)
	cmd.Env = append(os.Environ(), "KVSCOPE_SERVER_MAIN=1")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/api/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/api/models: %d", resp.StatusCode)
			}
			break
		}
		if i == 100 {
			t.Fatalf("the server did not come up: %s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "event log unavailable") || !strings.Contains(out.String(), dead) {
		t.Errorf("the log does not say the event log at %s is unavailable:\n%s", dead, out.String())
	}
}
