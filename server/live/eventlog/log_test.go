package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// TestOpenBadInput: an unreachable --nats and a missing credentials file
// each get an error naming them.
func TestOpenBadInput(t *testing.T) {
	dead := "nats://" + livetest.FreeAddr(t)
	if _, err := Open(context.Background(), Options{URLs: dead}); err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("an unreachable --nats: %v", err)
	}
	n := livetest.StartNATS(t)
	if _, err := Open(context.Background(), Options{URLs: n.URL(), Auth: stream.NATSAuth{Creds: "/nonexistent.creds"}}); err == nil ||
		!strings.Contains(err.Error(), "--nats-creds /nonexistent.creds") {
		t.Errorf("a missing creds file: %v", err)
	}
}

// TestReplayFromStream: kvscope replay --nats reads the events of a range
// of stream messages, stamped with their sequence numbers.
func TestReplayFromStream(t *testing.T) {
	n := livetest.StartNATS(t)
	b, err := Open(context.Background(), Options{URLs: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for f := uint64(0); f < 3; f++ {
		evs := []event.Event{{V: event.Version, Agent: "a", Seq: 2*f + 1, TS: 1, Kind: event.Sample, Sample: &event.SampleData{}},
			{V: event.Version, Agent: "a", Seq: 2*f + 2, TS: 2, Kind: event.Sample, Sample: &event.SampleData{}}}
		frame, _ := event.EncodeFrame(evs)
		if err := b.Publish(context.Background(), "a", "", frame, 2*f+1, 2*f+2, 2); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := Open(context.Background(), Options{URLs: n.URL(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var events []event.Event
	for next := ro.Events(context.Background(), 2, 3, 100); ; {
		e, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
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
	events, raws, err := Route(frame, "a", 42)
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
		{`[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","batch":{}},{"v":1,"agent":"a","seq":2,"kind":"sample","sample":{"gbps":"fast"}}]`, "a", "event 1: sample: json: cannot unmarshal"},
		{`[{"v":1,"agent":"a","seq":1,"kind":"transfer_done","done":{"bytes":"many","timing":"measured"}}]`, "a", "event 0: done.bytes: want a number"},
		{`[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","batch":{}]`, "a", "event 0"},
		{`{"a":1}`, "a", "not a JSON array"},
	} {
		if _, _, err := Route([]byte(tt.frame), tt.agent, 1); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.frame, err, tt.want)
		}
	}
}

// TestEventsStreamsARange: Events reads a range of the log a chunk at a
// time (kvscope replay --nats plays it so, whatever its length): every
// event of messages 3 to the end, in order, each stamped with its
// message, then io.EOF; messages stored after the first read are past its
// end.
func TestEventsStreamsARange(t *testing.T) {
	b, err := Open(context.Background(), Options{DataDir: t.TempDir(), Token: "events-test-token-0123"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	publish := func(f uint64) {
		var evs []event.Event
		for i := uint64(1); i <= 10; i++ {
			evs = append(evs, event.Event{V: event.Version, Agent: "a", Seq: 10*(f-1) + i, TS: int64(f), Kind: event.Sample, Sample: &event.SampleData{}})
		}
		frame, _ := event.EncodeFrame(evs)
		if err := b.Publish(context.Background(), "a", "", frame, evs[0].Seq, evs[9].Seq, int64(f)); err != nil {
			t.Fatal(err)
		}
	}
	for f := uint64(1); f <= 30; f++ {
		publish(f)
	}
	next := b.Events(context.Background(), 3, 0, 25)
	var got []event.Event
	for {
		e, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
		if len(got) == 1 {
			publish(31) // after the first read: not played
		}
	}
	if len(got) != 280 {
		t.Fatalf("%d events, want the 280 of messages 3-30", len(got))
	}
	for i, e := range got {
		if e.Seq != uint64(21+i) || e.Stream != uint64(3+i/10) {
			t.Fatalf("event %d: seq %d of message %d, want %d of %d", i, e.Seq, e.Stream, 21+i, 3+i/10)
		}
	}
}

// TestReadRecent: a read of a few agents' recent messages reads those
// agents' subjects only, oldest first, ends at the newest without waiting
// for more, narrows a window that holds too many to its newest part, and
// returns at once for an agent with nothing stored.
func TestReadRecent(t *testing.T) {
	n := livetest.StartNATS(t)
	b, err := Open(context.Background(), Options{URLs: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	store := func(agent string, seq uint64) {
		frame, _ := event.EncodeFrame([]event.Event{{V: event.Version, Agent: agent, Seq: seq, TS: int64(seq), Kind: event.Sample, Sample: &event.SampleData{}}})
		if err := b.Publish(context.Background(), agent, "", frame, seq, seq, int64(seq)); err != nil {
			t.Fatal(err)
		}
	}
	const busy = 1500
	for i := uint64(1); i <= busy; i++ {
		store("busy", i)
		if i%100 == 0 {
			store("quiet", i/100)
		}
	}
	type got struct {
		agents  map[string]int
		first   uint64
		last    uint64
		ordered bool
	}
	read := func(r Recent) (got, uint64) {
		t.Helper()
		g := got{agents: map[string]int{}, ordered: true}
		var prev uint64
		through, err := b.ReadRecent(context.Background(), r, func(data []byte, agent string, seq uint64) {
			events, err := Decode(data, agent, seq)
			if err != nil {
				t.Fatalf("stream message %d: %v", seq, err)
			}
			g.agents[agent] += len(events)
			if seq <= prev {
				g.ordered = false
			}
			prev = seq
			if agent == "busy" {
				if g.first == 0 {
					g.first = events[0].Seq
				}
				g.last = events[len(events)-1].Seq
			}
		})
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		return g, through
	}
	// The quiet agent alone: all 15 of its messages, none of the busy one's.
	g, through := read(Recent{Agents: []string{"quiet"}, Timeout: 5 * time.Second})
	if g.agents["quiet"] != 15 || g.agents["busy"] != 0 || !g.ordered || through == 0 {
		t.Errorf("the quiet agent: %v, in order %v, through %d; want its 15 messages only", g.agents, g.ordered, through)
	}
	// Both, with room for all: every message.
	if g, _ := read(Recent{Agents: []string{"busy", "quiet"}, MaxMessages: 5000, Timeout: 5 * time.Second}); g.agents["busy"] != busy || g.agents["quiet"] != 15 {
		t.Errorf("both with room: %v, want %d and 15", g.agents, busy)
	}
	// The busy one with room for 300: its newest part, ending at its last.
	g, _ = read(Recent{Agents: []string{"busy"}, MaxMessages: 300, Timeout: 5 * time.Second})
	if g.last != busy || g.agents["busy"] >= busy || g.agents["busy"] < 1 || g.first != busy-uint64(g.agents["busy"])+1 {
		t.Errorf("the busy agent in 300: %d messages, %d to %d; want fewer than %d, ending at %d, none missing", g.agents["busy"], g.first, g.last, busy, busy)
	}
	t.Logf("the busy agent in 300: %d messages (%d to %d)", g.agents["busy"], g.first, g.last)
	// An agent with nothing stored, and none: nothing, at once (not the timeout's error).
	for _, agents := range [][]string{{"never"}, nil} {
		if g, through := read(Recent{Agents: agents, Timeout: 5 * time.Second}); len(g.agents) != 0 || through != 0 {
			t.Errorf("agents %v: %v through %d, want nothing", agents, g.agents, through)
		}
	}
}
