package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

// TestLivePipeline is the live path end to end over real websockets: an
// agent streams verified transfers through the hub to a subscriber; the
// server stops and restarts on the same port mid-stream, and the agent
// resumes from the last acknowledged sequence, so the subscriber and the
// recording see every sequence number except the drops the agent counted.
func TestLivePipeline(t *testing.T) {
	recPath := filepath.Join(t.TempDir(), "events.jsonl")
	rec, err := os.OpenFile(recPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	const token = "t0ken"
	a := startLive(t, "127.0.0.1:0", token, rec)
	addr := a.addr
	st, stopAgent := startAgent(t, addr, token)
	defer stopAgent()

	sub := &liveSub{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := func() chan error {
		errc := make(chan error, 1)
		go func() { errc <- sub.follow(ctx, addr) }()
		return errc
	}
	first := follow()
	sub.waitFor(t, "60 events and 3 verified transfers", 30*time.Second, func(ev []event.Event) bool {
		return len(ev) >= 60 && countExact(ev) >= 3
	})
	ev := sub.snapshot()
	if ev[0].Kind != event.Hello || ev[0].Hello.NoGPU == "" && len(ev[0].Hello.GPUs) == 0 {
		t.Fatalf("first event %+v: want the hello with GPUs or the reason there are none", ev[0])
	}
	_, before := seqs(ev, "test-agent")

	// Stop the server mid-stream; the agent keeps transferring and queueing.
	a.stop()
	if err := <-first; err == nil {
		t.Fatal("the subscriber's connection survived the server")
	}
	time.Sleep(700 * time.Millisecond)
	b := startLive(t, addr, token, rec)
	defer b.stop()
	var second chan error
	for range 50 {
		second = follow()
		select {
		case err := <-second:
			t.Logf("resubscribe: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	sub.waitFor(t, "the agent to resume after the restart", 30*time.Second, func(ev []event.Event) bool {
		_, hi := seqs(ev, "test-agent")
		return hi > before+80
	})
	// The restarted server lost the agent's hello with its memory; the
	// agent, told so by the welcome, sent it again.
	sub.waitFor(t, "the agent to introduce itself to the restarted server", 10*time.Second, func([]event.Event) bool {
		b.hub.mu.Lock()
		defer b.hub.mu.Unlock()
		a := b.hub.agents["test-agent"]
		if a == nil {
			return false
		}
		st := a.state.List()
		return len(st) > 0 && st[0].Event.Kind == event.Hello && st[0].Event.Seq > before
	})
	stopAgent()
	cancel()

	ev = sub.snapshot()
	seen, hi := seqs(ev, "test-agent")
	missing := uint64(0)
	for q := uint64(1); q <= hi; q++ {
		if !seen[q] {
			missing++
		}
	}
	if dropped := st.Dropped(); missing > dropped {
		t.Fatalf("the subscriber misses %d of %d sequence numbers; the agent dropped only %d", missing, hi, dropped)
	}
	for _, e := range ev {
		if e.Kind == event.TransferDone && e.Done.Verified != "exact" {
			t.Fatalf("%s: verified %s", e.Done.Request, e.Done.Verified)
		}
		if e.Kind == event.Error {
			t.Fatalf("error event: %+v", e.Error)
		}
	}
	if n := countExact(ev); n < 5 {
		t.Fatalf("%d verified transfers, want at least 5", n)
	}

	// The recording of both servers holds the same contiguous sequence
	// (once the second has written what waits for the file).
	b.stop()
	rec.Sync()
	data, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []event.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, event.MaxFrameBytes)
	for sc.Scan() {
		var e event.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("record line %q: %v", sc.Text(), err)
		}
		recorded = append(recorded, e)
	}
	rseen, rhi := seqs(recorded, "test-agent")
	for q := uint64(1); q <= min(rhi, hi); q++ {
		if !rseen[q] && missing == 0 {
			t.Fatalf("the recording misses sequence %d", q)
		}
	}
	t.Logf("%d events (highest seq %d) across a restart, %d missing, %d dropped by the agent, %d verified transfers", len(ev), hi, missing, st.Dropped(), countExact(ev))
}

// TestAgentToken: an agent without the right bearer token gets 401, and
// the streamer reports it as such.
func TestAgentToken(t *testing.T) {
	l := startLive(t, "127.0.0.1:0", "right", nil)
	defer l.stop()
	for _, header := range []string{"", "Bearer wrong", "Basic right", "Bearer "} {
		req, _ := http.NewRequest("GET", "http://"+l.addr+"/ws/agent", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", header, resp.StatusCode)
		}
	}
	var logged []string
	var mu sync.Mutex
	st := &stream.Streamer{Agent: "intruder", URL: "ws://" + l.addr + "/ws/agent", Token: "wrong", Logf: func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		mu.Unlock()
	}}
	st.Publish(event.Event{Kind: event.Sample, Sample: &event.SampleData{}})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	st.Run(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(logged) == 0 || !strings.Contains(logged[0], "401") {
		t.Fatalf("streamer logged %q, want the 401 named", logged)
	}
	if st.Acked() != 0 {
		t.Fatal("an unauthorized agent's events were acknowledged")
	}
}

// TestBadFramesCloseOnlyTheirConnection: malformed, invalid and oversized
// frames close the connection that sent them with the matching status;
// a well-behaved agent and a subscriber on the same server carry on.
func TestBadFramesCloseOnlyTheirConnection(t *testing.T) {
	const token = "tok"
	l := startLive(t, "127.0.0.1:0", token, nil)
	defer l.stop()
	_, stopAgent := startAgent(t, l.addr, token)
	defer stopAgent()
	sub := &liveSub{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sub.follow(ctx, l.addr)
	sub.waitFor(t, "the good agent's first transfer", 20*time.Second, func(ev []event.Event) bool { return countExact(ev) >= 1 })

	big := append([]byte(`[{"v":1,"agent":"x","seq":1,"kind":"sample","sample":{},"pad":"`), bytes.Repeat([]byte("a"), event.MaxFrameBytes+10)...)
	big = append(big, `"}]`...)
	bad := []struct {
		name  string
		frame []byte
		want  websocket.StatusCode
	}{
		{"not JSON", []byte(`[{"v":1,`), websocket.StatusUnsupportedData},
		{"not an array", []byte(`{"v":1}`), websocket.StatusUnsupportedData},
		{"wrong version", []byte(`[{"v":2,"agent":"x","seq":1,"kind":"sample","sample":{}}]`), websocket.StatusUnsupportedData},
		{"unknown field", []byte(`[{"v":1,"agent":"x","seq":1,"kind":"sample","sample":{},"addr":"0xdead"}]`), websocket.StatusUnsupportedData},
		{"kind without payload", []byte(`[{"v":1,"agent":"x","seq":1,"kind":"desc_batch"}]`), websocket.StatusUnsupportedData},
		{"oversized", big, websocket.StatusMessageTooBig},
		{"another agent's events", []byte(`[{"v":1,"agent":"test-agent","seq":99999,"kind":"sample","sample":{}}]`), websocket.StatusUnsupportedData},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
			defer dcancel()
			conn, _, err := websocket.Dial(dctx, "ws://"+l.addr+"/ws/agent?agent=x", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			if _, msg, err := conn.Read(dctx); err != nil || string(msg) != `{"ack":0}` {
				t.Fatalf("welcome %q, %v", msg, err)
			}
			if err := conn.Write(dctx, websocket.MessageText, c.frame); err != nil && c.want != websocket.StatusMessageTooBig {
				t.Fatal(err)
			}
			_, _, err = conn.Read(dctx)
			if got := websocket.CloseStatus(err); got != c.want {
				t.Fatalf("closed with %v (%v), want %v", got, err, c.want)
			}
		})
	}
	// An agent must name itself; a second connection of a name replaces
	// the first.
	req, _ := http.NewRequest("GET", "http://"+l.addr+"/ws/agent", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no agent name: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	dial := func() *websocket.Conn {
		conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/agent?agent=twin", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, msg, err := conn.Read(ctx); err != nil || string(msg) != `{"ack":0}` {
			t.Fatalf("welcome %q, %v; want {\"ack\":0}", msg, err)
		}
		return conn
	}
	first := dial()
	defer first.CloseNow()
	second := dial()
	defer second.CloseNow()
	if _, _, err := first.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("the older connection of a name: %v, want closed with 1008", err)
	}

	// The good agent and the subscriber carried on.
	n := countExact(sub.snapshot())
	sub.waitFor(t, "more verified transfers after the bad frames", 20*time.Second, func(ev []event.Event) bool { return countExact(ev) > n+2 })
	for _, e := range sub.snapshot() {
		if e.Agent == "x" {
			t.Fatalf("an event from a rejected frame reached the subscriber: %+v", e)
		}
	}
}

// TestLiveChecksOrigin: a browser page from another origin cannot
// subscribe; /ws/live is read-only.
func TestLiveChecksOrigin(t *testing.T) {
	l := startLive(t, "127.0.0.1:0", "tok", nil)
	defer l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/live", &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin subscribe: %v (status %v), want 403", err, resp)
	}
	conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/live", &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://" + l.addr}}})
	if err != nil {
		t.Fatalf("same-origin subscribe: %v", err)
	}
	defer conn.CloseNow()
	conn.Write(ctx, websocket.MessageText, []byte(`[{"v":1,"agent":"x","seq":1,"kind":"sample","sample":{}}]`))
	_, _, err = conn.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation && !errors.Is(err, io.EOF) {
		t.Logf("writing to /ws/live: %v", err)
	}
	if n := len(l.hub.recent.events()); n != 0 {
		t.Fatalf("a subscriber's message reached the hub (%d events)", n)
	}
}

// TestHubSlowSubscriber: a subscriber that never reads loses its oldest
// frames (counted); publishing never blocks and a reading subscriber gets
// every frame.
func TestHubSlowSubscriber(t *testing.T) {
	h := New(Options{})
	slow, _ := h.subscribe()
	fast, _ := h.subscribe()
	got := make(chan int)
	go func() {
		n := 0
		for range fast.frames {
			n++
			if n == 3000 {
				break
			}
		}
		got <- n
	}()
	start := time.Now()
	for i := 1; i <= 3000; i++ {
		h.Publish([]event.Event{{V: 1, Agent: "a", Seq: uint64(i), Kind: event.Sample, Sample: &event.SampleData{}}})
		for len(fast.frames) > h.subQueue/2 {
			time.Sleep(100 * time.Microsecond) // the reading subscriber keeps up
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("publishing 3000 frames took %v: a slow subscriber stalled the hub", d)
	}
	select {
	case n := <-got:
		if n != 3000 {
			t.Fatalf("the reading subscriber got %d frames", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reading subscriber did not get every frame")
	}
	h.mu.Lock()
	dropped := slow.dropped
	h.mu.Unlock()
	if dropped != 3000-uint64(h.subQueue) {
		t.Fatalf("the slow subscriber dropped %d frames, want %d (3000 minus its queue of %d)", dropped, 3000-h.subQueue, h.subQueue)
	}
	// Resent events (an agent reconnecting) are stored once.
	if last := h.Publish([]event.Event{{V: 1, Agent: "a", Seq: 999, Kind: event.Sample, Sample: &event.SampleData{}}}); last != 3000 {
		t.Fatalf("a resent event moved the acknowledgement to %d", last)
	}
}

// TestHubSlowSubscriberOnTheLog: with the event log, a subscriber that
// never reads is told to resume from the log once its queue is full
// (nothing dropped in silence); publishing never waits for it and a
// reading subscriber gets every frame.
func TestHubSlowSubscriberOnTheLog(t *testing.T) {
	reg := metrics.New()
	h := New(Options{Metrics: reg})
	h.log = &eventlog.Log{} // offer's behaviour with a log; nothing here reads it
	slow, _ := h.subscribe()
	fast, _ := h.subscribe()
	const frames = 3000
	got := make(chan int)
	go func() {
		n := 0
		for range fast.frames {
			if n++; n == frames {
				break
			}
		}
		got <- n
	}()
	start := time.Now()
	for i := 1; i <= frames; i++ {
		h.Publish([]event.Event{{V: 1, Agent: "a", Seq: uint64(i), Kind: event.Sample, Sample: &event.SampleData{}}})
		for len(fast.frames) > h.subQueue/2 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("publishing %d frames took %v: a slow subscriber stalled the hub", frames, d)
	}
	select {
	case n := <-got:
		if n != frames {
			t.Fatalf("the reading subscriber got %d frames", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the reading subscriber did not get every frame")
	}
	select {
	case <-slow.behind:
	default:
		t.Fatal("the subscriber that never read was not told to resume from the log")
	}
	select {
	case <-fast.behind:
		t.Fatal("the reading subscriber was told to resume")
	default:
	}
	var sb strings.Builder
	reg.Write(&sb)
	if !strings.Contains(sb.String(), "kvscope_hub_subscriber_resumes_total 1\n") {
		t.Errorf("metrics: want one resume counted:\n%s", sb.String())
	}
}

// TestReplay: a recording plays back into the hub in frames of at most
// 50 ms of recorded time, every event once, in order.
func TestReplay(t *testing.T) {
	var events []event.Event
	ts := int64(1e18)
	for i := 1; i <= 10; i++ {
		if i == 4 || i == 8 {
			ts += int64(80 * time.Millisecond) // a pause: a new frame
		}
		ts += int64(time.Millisecond)
		events = append(events, event.Event{V: 1, Agent: "rec", Seq: uint64(i), TS: ts, Kind: event.Sample, Sample: &event.SampleData{Requests: i}})
	}
	h := New(Options{})
	s, _ := h.subscribe()
	Replay(context.Background(), h, events, 0)
	var sizes []int
	var seq uint64
	for len(s.frames) > 0 {
		evs, err := event.DecodeFrame((<-s.frames).data)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(evs))
		for _, e := range evs {
			if e.Seq != seq+1 {
				t.Fatalf("seq %d after %d", e.Seq, seq)
			}
			seq = e.Seq
		}
	}
	if fmt.Sprint(sizes) != "[3 4 3]" || seq != 10 {
		t.Fatalf("frames of %v events up to seq %d, want [3 4 3] up to 10", sizes, seq)
	}
}

// TestHubHistory: a browser that subscribes long after an agent started
// still gets its hello and registrations first, then the recent events,
// in one frame a browser accepts; an agent restarting under the same name
// starts a new sequence instead of being dropped as a repeat.
func TestHubHistory(t *testing.T) {
	h := New(Options{})
	seq, ts := uint64(0), int64(0)
	pub := func(e event.Event) uint64 {
		seq++
		ts++
		e.V, e.Agent, e.Seq, e.TS = 1, "a", seq, ts
		return h.Publish([]event.Event{e})
	}
	pub(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "h", NoGPU: "no NVIDIA driver"}})
	for r := range 3 {
		pub(event.Event{Kind: event.Registration, Registration: &event.RegistrationData{Side: "P", Rank: r}})
	}
	for range 5000 {
		pub(batchEvent())
	}
	_, hist := h.subscribe()
	if len(hist) != 1 {
		t.Fatalf("%d history frames for one agent, want 1", len(hist))
	}
	frame := hist[0]
	if len(frame) > event.MaxFrameBytes {
		t.Fatalf("history frame of %d bytes", len(frame))
	}
	evs, err := event.DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Kind != event.Hello || evs[1].Kind != event.Registration || evs[3].Kind != event.Registration || evs[4].Kind != event.DescBatch {
		t.Fatalf("history starts %s %s … %s %s, want the hello, 3 registrations, then batches", evs[0].Kind, evs[1].Kind, evs[3].Kind, evs[4].Kind)
	}
	if last := evs[len(evs)-1].Seq; last != seq {
		t.Fatalf("history ends at seq %d, want the newest, %d", last, seq)
	}
	// The agent resends its first events (an acknowledgement was lost):
	// they are repeats, not a restart.
	if ack := h.Publish(evs[:1]); ack != seq {
		t.Fatalf("a resent hello moved the acknowledgement to %d, want %d", ack, seq)
	}
	// The agent restarts: its new hello at seq 1 is stored, and so is
	// what follows.
	seq = 0
	if ack := pub(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "h2"}}); ack != 1 {
		t.Fatalf("a restarted agent's hello acknowledged as %d, want 1", ack)
	}
	if ack := pub(batchEvent()); ack != 2 {
		t.Fatalf("after the restart: ack %d, want 2", ack)
	}
	h.mu.Lock()
	st := h.agents["a"].state.List()
	h.mu.Unlock()
	if len(st) != 1 || st[0].Event.Hello == nil || st[0].Event.Hello.Host != "h2" {
		t.Fatalf("state after the restart: %+v, want only the new hello", st)
	}
}

// TestHubForgetsIdleAgents: an agent with no connection for an hour is
// forgotten, so a long-running server's memory stays bounded; one still
// connected is kept however long it is quiet, and so is one never
// connected here (known from the event log only).
func TestHubForgetsIdleAgents(t *testing.T) {
	h := New(Options{})
	for _, name := range []string{"gone", "quiet", "elsewhere"} {
		h.Publish([]event.Event{{V: 1, Agent: name, Seq: 1, TS: 1, Kind: event.Hello, Hello: &event.HelloData{}}})
		if name != "elsewhere" {
			h.agents[name].seen = time.Now().Add(-2 * forgetAfter)
		}
	}
	h.agents["quiet"].conn = &websocket.Conn{} // connected
	h.mu.Lock()
	h.prune(time.Now())
	h.mu.Unlock()
	if h.agents["gone"] != nil {
		t.Error("an agent gone for two hours is still remembered")
	}
	if a := h.agents["quiet"]; a == nil || a.lastSeq != 1 || a.state.Len() != 1 {
		t.Error("a connected agent was forgotten")
	}
	if a := h.agents["elsewhere"]; a == nil || a.lastSeq != 1 {
		t.Error("an agent never connected here was forgotten")
	}
}

// TestHubPruneForgetsAllOfAnAgent: over a real loopback websocket, an
// agent that said who it is, transferred and left is, an hour later,
// forgotten whole when another agent connects: its sequence, state,
// stored position and fleet line go in one step, and when it comes back
// it is welcomed with {"ack":0}, so it sends who it is again.
func TestHubPruneForgetsAllOfAnAgent(t *testing.T) {
	const token = "tok"
	l := startLive(t, "127.0.0.1:0", token, nil)
	defer l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(name string) *websocket.Conn {
		conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/agent?agent="+name, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	read := func(conn *websocket.Conn) string {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	gone := dial("gone")
	if w := read(gone); w != `{"ack":0}` {
		t.Fatalf("welcome %s", w)
	}
	frame, _ := event.EncodeFrame([]event.Event{
		{V: 1, Agent: "gone", Seq: 1, TS: 1, Kind: event.Hello, Hello: &event.HelloData{Host: "h"}},
		registration("gone", 2, 0),
		{V: 1, Agent: "gone", Seq: 3, TS: 3, Kind: event.TransferDone, Done: &event.DoneData{Request: "r", TransferUS: 5, Timing: event.Measured, Verified: "exact"}},
	})
	if err := gone.Write(ctx, websocket.MessageText, frame); err != nil {
		t.Fatal(err)
	}
	if ack := read(gone); ack != `{"ack":3}` {
		t.Fatalf("ack %s, want 3", ack)
	}
	gone.Close(websocket.StatusNormalClosure, "")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l.hub.mu.Lock()
		a := l.hub.agents["gone"]
		left := a.conn == nil
		if left { // an hour passes; a log had stored it too
			a.seen, a.storedSeq, a.storedTS = time.Now().Add(-2*forgetAfter), 3, 3
		}
		l.hub.mu.Unlock()
		if left {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent's connection never ended")
		}
	}
	other := dial("other") // connecting prunes
	defer other.CloseNow()
	read(other)
	l.hub.mu.Lock()
	_, kept := l.hub.agents["gone"]
	l.hub.mu.Unlock()
	if kept {
		t.Fatal("an agent gone for two hours is still remembered")
	}
	l.hub.fleetMu.Lock()
	l.hub.fleetMsg = nil // a fresh summary
	l.hub.fleetMu.Unlock()
	f, ok := event.ParseFleet(l.hub.fleetSummary())
	if !ok {
		t.Fatal("no fleet summary")
	}
	for _, line := range f.Fleet {
		if line.Agent == "gone" {
			t.Errorf("the forgotten agent still has a fleet line: %+v", line)
		}
	}
	back := dial("gone")
	defer back.CloseNow()
	if w := read(back); w != `{"ack":0}` {
		t.Fatalf("the forgotten agent coming back is welcomed with %s, want {\"ack\":0}", w)
	}
}
