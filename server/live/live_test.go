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
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
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
			conn, _, err := websocket.Dial(dctx, "ws://"+l.addr+"/ws/agent?agent=x", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + credFor(token, "x")}}})
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
	req.Header.Set("Authorization", "Bearer "+credFor(token, "x"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no agent name: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	dial := func() *websocket.Conn {
		conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/agent?agent=twin", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + credFor(token, "twin")}}})
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
