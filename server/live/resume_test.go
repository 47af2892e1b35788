package live

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// bigEvent is an error event of about n bytes (a long message), numbered
// seq.
func bigEvent(agent string, seq uint64, n int) event.Event {
	return event.Event{V: event.Version, Agent: agent, Seq: seq, TS: int64(seq), Kind: event.Error,
		Error: &event.ErrorData{Status: "ERR_TEST", Message: strings.Repeat("x", n)}}
}

// storeFrames publishes frames of events straight to the log: frames
// frames of perFrame events of about eventBytes each.
func storeFrames(t *testing.T, b *eventlog.Log, agent string, frames, perFrame, eventBytes int) {
	t.Helper()
	seq := uint64(0)
	for f := 0; f < frames; f++ {
		var evs []event.Event
		for i := 0; i < perFrame; i++ {
			seq++
			evs = append(evs, bigEvent(agent, seq, eventBytes))
		}
		data, err := event.EncodeFrame(evs)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(context.Background(), agent, "", data, evs[0].Seq, seq, int64(seq)); err != nil {
			t.Fatal(err)
		}
	}
}

// resume is one browser connection to /ws/live?since=N, until its
// history is over (the first fleet summary), until says so, or it
// closes: the header, the events and bytes it was sent, and how it
// closed.
type resume struct {
	header       string
	events       int
	bytes        int
	maxStream    uint64
	close        websocket.StatusCode
	reason       string
	firstEvent   uint64
	historyBytes int // bytes of the history frames (the catch-up)
}

func resumeOnce(t *testing.T, ctx context.Context, addr string, since uint64, until func(resume) bool) resume {
	t.Helper()
	return historyOnce(t, ctx, fmt.Sprintf("ws://%s/ws/live?since=%d", addr, since), until)
}

// historyOnce is resumeOnce for any /ws/live URL.
func historyOnce(t *testing.T, ctx context.Context, url string, until func(resume) bool) resume {
	t.Helper()
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(event.MaxFrameBytes + 1024)
	var r resume
	frames := -1
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			r.close = websocket.CloseStatus(err)
			var ce websocket.CloseError
			if errAs(err, &ce) {
				r.reason = ce.Reason
			}
			return r
		}
		if frames < 0 {
			r.header = string(data)
			frames, _ = event.HistoryCount(data)
			continue
		}
		if _, ok := event.ParseFleet(data); ok {
			return r // the history is over: live frames come next
		}
		evs, err := event.DecodeFrame(data)
		if err != nil {
			t.Fatalf("a frame that does not decode: %v", err)
		}
		if frames > 0 {
			frames--
			r.historyBytes += len(data)
		}
		r.bytes += len(data)
		for _, e := range evs {
			if r.firstEvent == 0 {
				r.firstEvent = e.Seq
			}
			r.events++
			r.maxStream = max(r.maxStream, e.Stream)
		}
		if until != nil && until(r) {
			return r
		}
	}
}

// TestResumeIsBoundedInBytes: a browser resuming from far behind (about
// 24 MiB stored since) is sent at most 16 MiB, then told with 1013 where
// to come back from; coming back as told, it gets every event once.
func TestResumeIsBoundedInBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := openLog(t, eventlog.Options{Token: identityToken})
	const frames, perFrame, eventBytes = 60, 100, 4000 // 24 MB
	storeFrames(t, b, "far", frames, perFrame, eventBytes)
	l := startServer(t, "127.0.0.1:0", serverOptions{token: identityToken, log: b, replay: 1, logf: t.Logf})
	defer l.stop()
	since, total, steps := uint64(1), 0, 0
	for {
		r := resumeOnce(t, ctx, l.addr, since, nil)
		steps++
		if r.historyBytes > maxCatchUpBytes {
			t.Fatalf("step %d: %d bytes of catch-up, at most %d", steps, r.historyBytes, maxCatchUpBytes)
		}
		total += r.events
		if r.close != websocket.StatusTryAgainLater {
			break
		}
		want := fmt.Sprintf("more to catch up: resume with ?since=%d", r.maxStream)
		if r.reason != want {
			t.Fatalf("step %d closed with %q, want %q", steps, r.reason, want)
		}
		since = r.maxStream
		total-- // the message resumed from is sent again: the browser drops what it has
		if steps > 10 {
			t.Fatal("the catch-up never ends")
		}
	}
	// The last step ends on the live stream (its first fleet summary).
	if steps < 2 || total < frames*perFrame {
		t.Errorf("%d steps, %d events, want at least 2 steps and all %d events", steps, total, frames*perFrame)
	}
}

// TestResumeSaysWhatIsGone: a browser resuming after messages the log no
// longer holds (its size limit dropped them) is told how many in the
// history header ({"gone":N}), and counted on /metrics.
func TestResumeSaysWhatIsGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := openLog(t, eventlog.Options{Token: identityToken, MaxBytes: 1 << 20})
	storeFrames(t, b, "old", 40, 10, 10_000) // 4 MB into a 1 MiB stream
	l := startServer(t, "127.0.0.1:0", serverOptions{token: identityToken, log: b, replay: 1, logf: t.Logf})
	defer l.stop()
	r := resumeOnce(t, ctx, l.addr, 1, func(r resume) bool { return true })
	var gone uint64
	fmt.Sscanf(r.header[strings.Index(r.header, `"gone":`)+len(`"gone":`):], "%d", &gone)
	if h, _ := event.ReadHistory([]byte(r.header)); !strings.Contains(r.header, `"gone":`) || gone < 20 || h.Gone != gone {
		t.Fatalf("header %s: want the messages gone (at least 20 of 40) told", r.header)
	}
	if r.firstEvent != gone*10+1 {
		t.Errorf("the first event sent is %d, want %d (after the %d messages gone)", r.firstEvent, gone*10+1, gone)
	}
	var sb strings.Builder
	l.metrics.Write(&sb)
	if !strings.Contains(sb.String(), fmt.Sprintf("kvscope_hub_catchup_gone_total %d", gone)) {
		t.Errorf("the gap is not counted:\n%s", sb.String())
	}
	// A browser that missed nothing gone is told nothing.
	r = resumeOnce(t, ctx, l.addr, gone+1, func(r resume) bool { return true })
	if strings.Contains(r.header, "gone") {
		t.Errorf("resuming inside the log: header %s", r.header)
	}
}

// TestResumeThatCannotBeServedIsToldSo: with every catch-up slot taken
// (as under a storm of resumes), a resuming browser waits its turn and,
// past the wait, is told to come back (1013, with where from), never sent
// the recent history as if it were all it missed; once a slot frees, the
// same resume is served.
func TestResumeThatCannotBeServedIsToldSo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := openLog(t, eventlog.Options{Token: identityToken})
	storeFrames(t, b, "a", 5, 10, 100)
	l := startServer(t, "127.0.0.1:0", serverOptions{token: identityToken, log: b, logf: t.Logf})
	defer l.stop()
	l.hub.catchUpWait = 300 * time.Millisecond
	for i := 0; i < maxCatchUps; i++ {
		l.hub.catchUps <- struct{}{}
	}
	start := time.Now()
	r := resumeOnce(t, ctx, l.addr, 3, nil)
	if r.close != websocket.StatusTryAgainLater || !strings.Contains(r.reason, "resume with ?since=3") || r.events > 0 {
		t.Fatalf("a resume with no slot: %d events, closed %v %q; want none and 1013 naming since=3", r.events, r.close, r.reason)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("told to come back after %v, before its wait (300 ms)", waited)
	}
	<-l.hub.catchUps // one slot frees
	r = resumeOnce(t, ctx, l.addr, 3, func(r resume) bool { return r.events >= 30 })
	if r.events < 30 || r.firstEvent != 21 {
		t.Errorf("served: %d events from %d, want messages 3-5 (events 21-50)", r.events, r.firstEvent)
	}
}

// TestAgentBudgetSheds: an agent sending far more than its budget has
// its moment events shed past it (counted, and acknowledged: it does not
// send them again) while its hello and errors always pass; another agent
// within its budget loses nothing.
func TestAgentBudgetSheds(t *testing.T) {
	l := startServer(t, "127.0.0.1:0", serverOptions{token: identityToken, budget: Budget{EventsPerSec: 200, Burst: time.Second}, logf: t.Logf})
	defer l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := newFleetSub(l.addr)
	go sub.run(ctx)
	time.Sleep(100 * time.Millisecond)
	flood := &stream.Streamer{Agent: "flood", URL: "ws://" + l.addr + "/ws/agent", Token: credFor(identityToken, "flood"), QueueSize: 20_000}
	calm := &stream.Streamer{Agent: "calm", URL: "ws://" + l.addr + "/ws/agent", Token: credFor(identityToken, "calm")}
	go flood.Run(ctx)
	go calm.Run(ctx)
	start := time.Now()
	flood.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "h", GPUs: []event.GPU{}}})
	for i := 2; i <= 10_000; i++ {
		flood.Publish(livetest.FleetEvent(i))
	}
	flood.Publish(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_LAST", Message: "the last word"}})
	for i := 1; i <= 100; i++ {
		calm.Publish(livetest.FleetEvent(i))
	}
	for _, st := range []*stream.Streamer{flood, calm} {
		if err := st.Flush(ctx); err != nil {
			t.Fatalf("%s: %d not acknowledged: %v", st.Agent, st.Pending(), err)
		}
	}
	took := time.Since(start).Seconds()
	for deadline := time.Now().Add(10 * time.Second); sub.missing(map[string]uint64{"calm": 100}) > 0 || !sub.has("flood", 10_001); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("calm misses %s; flood's last error arrived: %v", sub.someMissing(map[string]uint64{"calm": 100}), sub.has("flood", 10_001))
		}
	}
	sub.mu.Lock()
	got := len(sub.got["flood"])
	hello := sub.got["flood"][1]
	sub.mu.Unlock()
	allowed := int(200*1+200*took) + 2 // the burst, the rate, the hello and the error
	if got > allowed || got < 150 || !hello {
		t.Errorf("flood: %d of 10,001 events delivered in %.1f s (hello %v); want its hello, its error and at most %d", got, took, hello, allowed)
	}
	var sb strings.Builder
	l.metrics.Write(&sb)
	if !strings.Contains(sb.String(), fmt.Sprintf("kvscope_hub_shed_events_total %d", 10_001-got)) {
		t.Errorf("shed events not counted as %d:\n%s", 10_001-got, sb.String())
	}
}

// has reports whether the subscriber got agent's event seq.
func (s *fleetSub) has(agent string, seq uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[agent][seq]
}

func errAs(err error, target any) bool { return errors.As(err, target) }

// TestPickedAgentsHistoryFromTheLog: in a fleet whose recent events no
// replica holds in memory (300 agents; this replica followed the log from
// its last message only), a browser that picks two agents is sent every
// event the log holds of them, stamped with their stream sequence, and
// nothing of the others.
func TestPickedAgentsHistoryFromTheLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := openLog(t, eventlog.Options{Token: identityToken})
	const agents, frames, perFrame = 300, 4, 2
	for f := 0; f < frames; f++ {
		for a := 0; a < agents; a++ {
			name := fmt.Sprintf("a%03d", a)
			var evs []event.Event
			for i := 0; i < perFrame; i++ {
				seq := uint64(f*perFrame + i + 1)
				evs = append(evs, event.Event{V: event.Version, Agent: name, Seq: seq, TS: int64(seq), Kind: event.Sample, Sample: &event.SampleData{}})
			}
			data, _ := event.EncodeFrame(evs)
			if err := b.Publish(ctx, name, "", data, evs[0].Seq, evs[len(evs)-1].Seq, evs[len(evs)-1].TS); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := startServer(t, "127.0.0.1:0", serverOptions{token: identityToken, log: b, replay: 1, logf: t.Logf})
	defer l.stop()
	per := map[string]int{}
	conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/live?agents=a007,a250", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(event.MaxFrameBytes + 1024)
	stamped := 0
	for header := true; ; header = false {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if header {
			continue
		}
		if _, ok := event.ParseFleet(data); ok {
			break
		}
		evs, err := event.DecodeFrame(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			per[e.Agent]++
			if e.Stream != 0 {
				stamped++
			}
		}
	}
	// Then live: a new event of a007 once, nothing of an agent not picked.
	for _, name := range []string{"a100", "a007"} {
		seq := uint64(frames*perFrame + 1)
		data, _ := event.EncodeFrame([]event.Event{{V: event.Version, Agent: name, Seq: seq, TS: int64(seq), Kind: event.Sample, Sample: &event.SampleData{}}})
		if err := b.Publish(ctx, name, "", data, seq, seq, int64(seq)); err != nil {
			t.Fatal(err)
		}
	}
	for live := false; !live; {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := event.DecodeFrame(data)
		if err != nil {
			continue // a fleet summary
		}
		for _, e := range evs {
			if e.Agent != "a007" || e.Seq != uint64(frames*perFrame+1) {
				t.Errorf("live after the history: %s seq %d, want only a007's new event %d", e.Agent, e.Seq, frames*perFrame+1)
			}
			live = true
		}
	}
	want := frames * perFrame
	if per["a007"] != want || per["a250"] != want || len(per) != 2 || stamped != 2*want {
		t.Errorf("picked a007 and a250: history %v (%d stamped), want %d events of each (all stamped) and no other agent's", per, stamped, want)
	}
}
