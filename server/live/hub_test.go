package live

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

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
		conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/agent?agent="+name, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + credFor(token, name)}}})
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

// TestHubBehindTakesNoMore: once a subscriber on the log has been told to
// resume, it is queued nothing more, even as its queue drains (its
// connection may send what was queued before it notices). A frame queued
// after the one it lost would carry it past that frame's stream position,
// and its resume from the last position it saw would never bring it back.
func TestHubBehindTakesNoMore(t *testing.T) {
	h := New(Options{})
	h.log = &eventlog.Log{} // offer's behaviour with a log; nothing here reads it
	s, _ := h.subscribe()
	sample := func(seq int) []event.Event {
		return []event.Event{{V: 1, Agent: "a", Seq: uint64(seq), Kind: event.Sample, Sample: &event.SampleData{}}}
	}
	n := 0
	for {
		n++
		h.Publish(sample(n))
		select {
		case <-s.behind:
		default:
			continue
		}
		break
	}
	lost := n // the first frame it was not queued
	drain := func() (seqs []uint64) {
		for {
			select {
			case f := <-s.frames:
				s.take(f)
				events, err := event.DecodeFrame(f.data)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range events {
					seqs = append(seqs, e.Seq)
				}
			default:
				return seqs
			}
		}
	}
	if seqs := drain(); len(seqs) == 0 || seqs[len(seqs)-1] >= uint64(lost) {
		t.Fatalf("queued before falling behind at %d: %v…", lost, seqs[max(0, len(seqs)-3):])
	}
	for i := 1; i <= 100; i++ {
		h.Publish(sample(lost + i))
	}
	if seqs := drain(); len(seqs) != 0 {
		t.Errorf("after falling behind at seq %d and draining, %d more were queued (from %d): its resume would skip %d", lost, len(seqs), seqs[0], lost)
	}
}
