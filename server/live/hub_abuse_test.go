package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/internal/budget"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

// bigHello is a hello whose host name is n bytes of '<' (a string field an
// agent controls: escaped as HTML it would be six times as large).
func bigHello(agent string, seq uint64, n int) event.Event {
	return event.Event{V: 1, Agent: agent, Seq: seq, TS: int64(seq), Kind: event.Hello, Hello: &event.HelloData{Host: strings.Repeat("<", n)}}
}

func registration(agent string, seq uint64, rank int) event.Event {
	return event.Event{V: 1, Agent: agent, Seq: seq, TS: int64(seq), Kind: event.Registration, Registration: &event.RegistrationData{Side: "P", Rank: rank}}
}

// The hub-abuse tests run on both hubs kvscope serve may have: one that
// keeps agents' events in memory (replay, the tests), and one on an event
// log, an embedded NATS JetStream server, which stores an agent's frame and
// gets it back through its follower (kvscope serve's default).
var abuseHubs = []struct {
	name  string
	start func(t *testing.T, record io.Writer) *Hub
}{
	{"memory", func(t *testing.T, record io.Writer) *Hub {
		h := New(Options{Record: record})
		t.Cleanup(h.Close)
		return h
	}},
	{"nats", func(t *testing.T, record io.Writer) *Hub {
		b, err := eventlog.Open(context.Background(), eventlog.Options{DataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		h := New(Options{Log: b, Record: record}) // follows the log until Close
		t.Cleanup(func() {
			h.Close()
			b.Close()
		})
		return h
	}},
}

// send stores events as their agent's frame, as /ws/agent does, and waits
// until the hub has them (on NATS: back from the log), so subscribers have
// been offered them. It returns how long the store took: what the agent's
// acknowledgement waits for.
func send(t *testing.T, h *Hub, events ...event.Event) time.Duration {
	t.Helper()
	frame, err := event.EncodeFrame(events)
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	start := time.Now()
	if _, err := h.store(context.Background(), last.Agent, "", events, frame); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Microsecond) {
		h.mu.Lock()
		var got uint64
		if a := h.agents[last.Agent]; a != nil {
			got = a.lastSeq
		}
		h.mu.Unlock()
		if got >= last.Seq {
			return took
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s's event %d never reached the hub (it has %d)", last.Agent, last.Seq, got)
		}
	}
}

// TestHubBoundsItsMemory: the replay buffer and each agent's state are
// bounded in bytes as well as events, whatever size the events are.
func TestHubBoundsItsMemory(t *testing.T) {
	for _, kind := range abuseHubs {
		t.Run(kind.name, func(t *testing.T) {
			h := kind.start(t, nil)
			// 40 events of ~512 KiB: 20 MiB offered to an 8 MiB buffer.
			for i := 1; i <= 40; i++ {
				send(t, h, bigHello(fmt.Sprintf("a%d", i%4), uint64(i), 512<<10))
			}
			h.mu.Lock()
			recent, counted := h.recent.events(), h.recent.bytes
			h.mu.Unlock()
			total := 0
			for _, st := range recent {
				total += len(st.Raw)
			}
			if total != counted || total > 8<<20 || len(recent) == 0 {
				t.Fatalf("the replay buffer holds %d bytes in %d events (counted %d), want at most 8 MiB", total, len(recent), counted)
			}
			// One agent's hello and 500 registrations of ~4 KiB of state each.
			send(t, h, bigHello("s", 1, 1))
			for i := 2; i <= 500; i++ {
				e := registration("s", uint64(i), i)
				e.Registration.Side = strings.Repeat("P", 4<<10)
				send(t, h, e)
			}
			h.mu.Lock()
			st := h.agents["s"].state.List()
			h.mu.Unlock()
			size := 0
			for _, x := range st {
				size += len(x.Raw)
			}
			if len(st) > event.MaxStateEvents || size > event.MaxStateBytes || st[0].Event.Kind != event.Hello {
				t.Fatalf("agent s's state: %d events, %d bytes, first %s; want at most %d events, %d bytes, the hello first", len(st), size, st[0].Event.Kind, event.MaxStateEvents, event.MaxStateBytes)
			}
		})
	}
}

// fillAgents has n agents each send a hello (a host name of hostBytes '<')
// and regs registrations to h.
func fillAgents(t *testing.T, h *Hub, n, hostBytes, regs int) {
	t.Helper()
	for a := range n {
		name := fmt.Sprintf("agent-%03d", a)
		evs := []event.Event{bigHello(name, 1, hostBytes)}
		for r := range regs {
			evs = append(evs, registration(name, uint64(r+2), r))
		}
		send(t, h, evs...)
	}
}

// TestHubHistoryFitsTheBrowser: 200 agents' hellos and registrations
// (12,800 events) reach a new subscriber in frames within the app's
// limits, each agent whole in one frame, its hello first.
func TestHubHistoryFitsTheBrowser(t *testing.T) {
	for _, kind := range abuseHubs {
		t.Run(kind.name, func(t *testing.T) {
			h := kind.start(t, nil)
			fillAgents(t, h, 200, 10, 63)
			_, frames := h.subscribe()
			seen := map[string]int{} // agent -> the frame it was in
			for i, f := range frames {
				if len(f) > event.MaxFrameBytes {
					t.Fatalf("history frame %d: %d bytes", i, len(f))
				}
				evs, err := event.DecodeFrame(f)
				if err != nil {
					t.Fatalf("history frame %d: %v", i, err)
				}
				for _, e := range evs {
					if j, ok := seen[e.Agent]; ok && j != i {
						t.Fatalf("agent %s is split over frames %d and %d", e.Agent, j, i)
					} else if !ok && e.Kind != event.Hello {
						t.Fatalf("agent %s starts with a %s", e.Agent, e.Kind)
					}
					seen[e.Agent] = i
				}
			}
			if len(seen) != 200 || len(frames) < 4 {
				t.Fatalf("%d agents in %d frames, want 200 in at least 4 (12,800 events)", len(seen), len(frames))
			}
		})
	}
}

// TestHubFramesAreNotHTMLEscaped: "<" an agent sends is one byte in the
// subscribers' frames and the recording, not "\u003c".
func TestHubFramesAreNotHTMLEscaped(t *testing.T) {
	for _, kind := range abuseHubs {
		t.Run(kind.name, func(t *testing.T) {
			var rec syncBuffer
			h := kind.start(t, &rec)
			s, _ := h.subscribe()
			send(t, h, bigHello("a", 1, 1000))
			frame := (<-s.frames).data
			if bytes.Contains(frame, []byte(`\u003c`)) || !bytes.Contains(frame, bytes.Repeat([]byte("<"), 1000)) || len(frame) > 1300 {
				t.Fatalf("a frame of %d bytes for 1,000 '<': escaped", len(frame))
			}
			h.Close() // the recording has what waited for it
			if r := rec.String(); strings.Contains(r, `\u003c`) || !strings.Contains(r, strings.Repeat("<", 1000)) {
				t.Fatal("the recording escapes '<'")
			}
		})
	}
}

// TestAgentNames: names are letters, digits and . _ - : @ / +; anything
// else (a newline would forge a log line) is refused with the reason.
func TestAgentNames(t *testing.T) {
	for _, ok := range []string{"embedded", "gpu-node-07/p", "vm/d", "user@host:7700", "a.b_c+1"} {
		if err := event.CheckAgentName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a\nkvscope: forged line", "tab\there", "<script>", "sp ace", strings.Repeat("x", 129), "ünï"} {
		if err := event.CheckAgentName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	l := startLive(t, "127.0.0.1:0", "tok", nil)
	defer l.stop()
	srvURL := "http://" + l.addr
	req, _ := http.NewRequest("GET", srvURL+"/ws/agent?agent="+url.QueryEscape("a\nkvscope: forged"), nil)
	req.Header.Set("Authorization", "Bearer "+credFor("tok", "a"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a name with a newline: %d, want 400", resp.StatusCode)
	}
	// An agent's streamer with such a name stops at once with the
	// server's reason, on one line.
	st := &stream.Streamer{Agent: "a\nkvscope: forged", URL: "ws" + strings.TrimPrefix(srvURL, "http") + "/ws/agent", Token: credFor("tok", "a")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = st.Run(ctx)
	var re *stream.RefusedError
	if !errors.As(err, &re) || re.Status != 400 || !strings.Contains(err.Error(), `character '\n' at byte 1`) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a streamer named with a newline: %v, want the server's 400 and its reason on one line", err)
	}
}

// TestHubAcksNeverWaitForSubscribers: 200 subscribers joining and
// leaving (each takes a large history, holds its subscription for a
// millisecond as a connection would, and comes back 10 ms later) while an
// agent sends frames: storing each (what its ack waits for; on NATS, until
// JetStream has it) stays under 100 ms.
func TestHubAcksNeverWaitForSubscribers(t *testing.T) {
	for _, kind := range abuseHubs {
		t.Run(kind.name, func(t *testing.T) {
			h := kind.start(t, nil)
			fillAgents(t, h, 200, 2000, 20)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						s, hist := h.subscribe()
						_ = hist
						time.Sleep(time.Millisecond)
						h.unsubscribe(s)
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			var lat []time.Duration
			for i := 1; i <= 300; i++ {
				lat = append(lat, send(t, h, event.Event{V: 1, Agent: "streamer", Seq: uint64(i), TS: int64(i), Kind: event.Sample, Sample: &event.SampleData{}}))
				time.Sleep(time.Millisecond)
			}
			close(stop)
			wg.Wait()
			slices.Sort(lat)
			p99 := lat[len(lat)*99/100]
			t.Logf("store latency with 200 subscribers churning: p50 %v, p99 %v, max %v", lat[len(lat)/2], p99, lat[len(lat)-1])
			if p99 > 100*time.Millisecond*time.Duration(budget.Slack()) {
				t.Fatalf("store p99 %v with subscribers churning, want under 100 ms", p99)
			}
		})
	}
}

// TestFleetSummaryIsBounded: the fleet summary every subscriber gets is
// one message within a browser's limits (event.MaxFrameBytes, at most
// maxFleetLines lines), not HTML-escaped, whatever agents send: hellos
// whose host, role, backend and engine are the largest an event may hold
// (~1 MB of '<' in all), slow transfers with as large a request name, and
// more agents than it lists. Those left out are counted; fields are
// clipped.
func TestFleetSummaryIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		agents int
		field  int // bytes of '<' in each of the hello's four text fields
		listed int // the agents the summary lists (-1: not checked)
	}{
		{"a few agents with 1 MB hellos", 8, 250_000, 8},
		{"more agents than a summary lists", 1500, 10, maxFleetLines},
		{"lines that pass the byte bound", 1000, 1000, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Options{})
			for a := range tc.agents {
				name := fmt.Sprintf("agent-%04d", a)
				big := strings.Repeat("<", tc.field)
				hello := event.Event{V: 1, Agent: name, Seq: 1, TS: 1, Kind: event.Hello, Hello: &event.HelloData{Host: big, Role: big, Backend: big, Engine: big}}
				evs := []event.Event{hello}
				if a < 2*maxSlowest {
					evs = append(evs, event.Event{V: 1, Agent: name, Seq: 2, TS: 2, Kind: event.TransferDone, Done: &event.DoneData{
						Request: strings.Repeat("<", 1_000_000), TransferUS: float64(a + 1), Timing: event.Measured, Verified: "exact"}})
				}
				h.Publish(evs)
			}
			msg := h.fleetSummary()
			var f struct {
				event.FleetSummary
				Omitted int `json:"fleet_omitted"`
			}
			if err := json.Unmarshal(msg, &f); err != nil {
				t.Fatalf("the summary does not decode: %v", err)
			}
			if _, ok := event.ParseFleet(msg); !ok {
				t.Fatal("the browser's ParseFleet does not take the summary")
			}
			t.Logf("%d agents: a summary of %d bytes, %d lines, %d left out, %d slow transfers", tc.agents, len(msg), len(f.Fleet), f.Omitted, len(f.Slowest))
			if len(msg) > event.MaxFrameBytes || len(f.Fleet) > maxFleetLines {
				t.Fatalf("a summary of %d bytes and %d lines, want at most %d and %d", len(msg), len(f.Fleet), event.MaxFrameBytes, maxFleetLines)
			}
			if bytes.Contains(msg, []byte(`\u003c`)) || !bytes.Contains(msg, []byte("<<<")) {
				t.Fatal("the summary escapes '<'")
			}
			if len(f.Fleet)+f.Omitted != tc.agents || tc.listed >= 0 && len(f.Fleet) != tc.listed {
				t.Fatalf("%d listed and %d left out of %d agents, want %d listed", len(f.Fleet), f.Omitted, tc.agents, tc.listed)
			}
			if len(f.Slowest) != min(tc.agents, maxSlowest) {
				t.Fatalf("%d slow transfers, want %d", len(f.Slowest), min(tc.agents, maxSlowest))
			}
			for _, l := range f.Fleet {
				if len(l.Host) > maxFleetField || len(l.Role) > maxFleetField || len(l.Backend) > maxFleetField || len(l.Engine) > maxFleetField {
					t.Fatalf("agent %s's line is not clipped: host of %d bytes", l.Agent, len(l.Host))
				}
			}
			for _, s := range f.Slowest {
				if len(s.Request) > maxFleetField {
					t.Fatalf("a slow transfer's request of %d bytes", len(s.Request))
				}
			}
			if !sort.SliceIsSorted(f.Fleet, func(i, j int) bool { return f.Fleet[i].Agent < f.Fleet[j].Agent }) {
				t.Fatal("the lines are not in name order")
			}
		})
	}
}
