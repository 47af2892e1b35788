package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

func sample(seq uint64) Event {
	return Event{V: Version, Agent: "a1", Seq: seq, Kind: Sample, TS: 1, Sample: &SampleData{GBps: 1}}
}

func TestFrameRoundTrip(t *testing.T) {
	in := []Event{
		{V: Version, Agent: "a1", Seq: 1, Kind: Hello, Hello: &HelloData{Host: "h", Backend: "host", NoGPU: "no NVIDIA driver"}},
		{V: Version, Agent: "a1", Seq: 2, Kind: DescBatch, Batch: &BatchData{Request: "r1", Layer: "L3", Descs: 12, Bytes: 4096, Timing: Measured}},
		{V: Version, Agent: "a1", Seq: 3, Kind: TransferDone, Done: &DoneData{Request: "r1", Bytes: 4096, Timing: Synthesized, Verified: "exact"}},
		{V: Version, Agent: "a1", Seq: 4, Kind: StuckTransfer, Stuck: &StuckData{Request: "post-3", Source: "ring", SinceNS: 1_700_000_000e9, AgeS: 121, Reason: "posted, not completed"}},
	}
	data, err := EncodeFrame(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeFrame(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 || out[1].Batch.Layer != "L3" || out[2].Done.Timing != Synthesized || out[3].Stuck.SinceNS != 1_700_000_000e9 || out[3].Stuck.Source != "ring" {
		t.Errorf("round trip: %+v", out)
	}
}

func TestMalformedFramesSayWhat(t *testing.T) {
	good, _ := json.Marshal(sample(1))
	tests := []struct {
		name, frame, field string
	}{
		{"not JSON", `{{{`, ""},
		{"an object, not an array", string(good), ""},
		{"a wrong version", `[{"v":9,"agent":"a","seq":1,"kind":"sample","sample":{}}]`, "v"},
		{"no agent", `[{"v":1,"seq":1,"kind":"sample","sample":{}}]`, "agent"},
		{"seq zero", `[{"v":1,"agent":"a","seq":0,"kind":"sample","sample":{}}]`, "seq"},
		{"an unknown kind", `[{"v":1,"agent":"a","seq":1,"kind":"party"}]`, "kind"},
		{"a kind without its payload", `[{"v":1,"agent":"a","seq":1,"kind":"transfer_done"}]`, "kind"},
		{"two payloads", `[{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{},"error":{"status":"x","message":"y"}}]`, "kind"},
		{"an unknown field", `[{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{},"addr":"0xdead"}]`, "event"},
		{"a timing that is neither", `[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","batch":{"timing":"guessed"}}]`, "batch.timing"},
		{"a stuck transfer from nowhere", `[{"v":1,"agent":"a","seq":1,"kind":"stuck_transfer","stuck":{"source":"gut","reason":"","since_ns":1}}]`, "stuck.source"},
		{"a stuck transfer since no time", `[{"v":1,"agent":"a","seq":1,"kind":"stuck_transfer","stuck":{"source":"ring","reason":"","since_ns":0}}]`, "stuck.since_ns"},
		{"too big", "[" + strings.Repeat(" ", MaxFrameBytes) + "]", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeFrame([]byte(tt.frame))
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a FrameError", err)
			}
			if fe.Field != tt.field {
				t.Errorf("field %q, want %q (%v)", fe.Field, tt.field, err)
			}
		})
	}
}

func TestRingKeepsTheNewestAndCountsGaps(t *testing.T) {
	r := NewRing(3)
	for _, seq := range []uint64{1, 2, 3, 5, 4, 6} {
		r.Add(sample(seq))
	}
	got := r.Events()
	if len(got) != 3 || got[0].Seq != 3 || got[2].Seq != 6 {
		t.Errorf("ring %v", got)
	}
	if r.Gaps != 1 || r.Total != 5 {
		t.Errorf("gaps %d total %d, want 1 (seq 4 came late and was ignored) and 5", r.Gaps, r.Total)
	}
}

func TestTraceMarksSynthesizedTimings(t *testing.T) {
	events := []Event{
		{V: 1, Agent: "a", Seq: 1, Kind: TransferStart, TS: 1000, Start: &StartData{Request: "r"}},
		{V: 1, Agent: "a", Seq: 2, Kind: DescBatch, TS: 2000, Batch: &BatchData{Request: "r", Layer: "L0", StartNS: 0, EndNS: 500, Timing: Synthesized}},
		{V: 1, Agent: "a", Seq: 3, Kind: TransferDone, TS: 3000, Done: &DoneData{Request: "r", TransferUS: 2, Timing: Measured}},
	}
	data, err := Trace(events)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Cat string  `json:"cat"`
			TS  float64 `json:"ts"`
			Dur float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	json.Unmarshal(data, &tr)
	if len(tr.TraceEvents) != 2 || tr.TraceEvents[0].Cat != "desc.synthesized" || tr.TraceEvents[0].TS != 1 || tr.TraceEvents[0].Dur != 0.5 {
		t.Errorf("trace %s", data)
	}
}

func FuzzDecodeFrame(f *testing.F) {
	good, _ := EncodeFrame([]Event{sample(1), sample(2)})
	f.Add(good)
	f.Add([]byte(`[{"v":1,"agent":"a","seq":1,"kind":"desc_batch","batch":{"timing":"measured"}}]`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := DecodeFrame(data)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a FrameError", err)
			}
			return
		}
		// Whatever decodes re-encodes and decodes to the same events.
		again, err := EncodeFrame(events)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeFrame(again)
		if err != nil || len(back) != len(events) {
			t.Fatalf("re-decoding: %v", err)
		}
		for i := range events {
			if err := events[i].Validate(); err != nil {
				t.Fatalf("event %d decoded but is invalid: %v", i, err)
			}
		}
	})
}

func TestReadJSONL(t *testing.T) {
	good := `{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{"gbps":1.5}}

{"v":1,"agent":"a","seq":2,"kind":"error","error":{"status":"ERR_MISMATCH","message":"m"}}
`
	evs, err := ReadJSONL(strings.NewReader(good))
	if err != nil || len(evs) != 2 || evs[0].Sample.GBps != 1.5 || evs[1].Error.Status != "ERR_MISMATCH" {
		t.Fatalf("ReadJSONL = %+v, %v", evs, err)
	}
	for _, c := range []struct{ in, want string }{
		{"{\"v\":1,\"agent\":\"a\",\"seq\":1,\"kind\":\"sample\",\"sample\":{}}\n[1]\n", "line 2: not a JSON object"},
		{`{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{}},{"v":1,"agent":"a","seq":2,"kind":"sample","sample":{}}`, "line 1: 2 events"},
		{`{"v":1,"agent":"a","seq":0,"kind":"sample","sample":{}}`, "line 1: event: event 0: seq"},
		{`{"v":1,"agent":"a","seq":1,"kind":"sample"`, "line 1"},
		{"{\"v\":1,\"agent\":\"a\",\"seq\":1,\"kind\":\"sample\",\"sample\":{}}\n" + strings.Repeat(" ", MaxFrameBytes+1), "line 2: longer than"},
	} {
		_, err := ReadJSONL(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadJSONL(%q) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte(`{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{}}` + "\n"))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := ReadJSONL(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i := range evs {
			if err := evs[i].Validate(); err != nil {
				t.Fatalf("event %d read but invalid: %v", i, err)
			}
		}
	})
}

func TestRingHistoryAndRestart(t *testing.T) {
	ts := int64(0)
	ev := func(agent string, seq uint64, k Kind) Event {
		ts++
		e := Event{V: Version, Agent: agent, Seq: seq, Kind: k, TS: ts}
		switch k {
		case Hello:
			e.Hello = &HelloData{}
		default:
			e.Sample = &SampleData{}
		}
		return e
	}
	r := NewRing(16)
	// A subscriber joins late: the server sends the agent's hello (seq 1)
	// and its recent events from seq 5000. That history is not a loss.
	r.AddHistory([]Event{ev("a", 1, Hello), ev("a", 5000, Sample), ev("a", 5001, Sample)})
	if r.Gaps != 0 || r.Len() != 3 {
		t.Fatalf("history: gaps %d, len %d; want 0 and 3", r.Gaps, r.Len())
	}
	// Live events after it: a real gap counts.
	r.Add(ev("a", 5002, Sample))
	r.Add(ev("a", 5005, Sample))
	if r.Gaps != 2 {
		t.Fatalf("live gap: %d, want 2", r.Gaps)
	}
	// A reconnect's history for a known agent counts its gaps and skips
	// repeats.
	added := r.AddHistory([]Event{ev("a", 5004, Sample), ev("a", 5005, Sample), ev("a", 5007, Sample)})
	if added[0] || added[1] || !added[2] || r.Gaps != 3 {
		t.Fatalf("reconnect history: added %v, gaps %d; want [false false true], 3", added, r.Gaps)
	}
	// A reconnect replays the agent's old hello first: it is a repeat,
	// not a restart.
	old := Event{V: Version, Agent: "a", Seq: 1, Kind: Hello, TS: 1, Hello: &HelloData{}}
	if added := r.AddHistory([]Event{old, ev("a", 5008, Sample)}); added[0] || !added[1] || r.Gaps != 3 {
		t.Fatalf("replayed hello: added %v, gaps %d; want [false true], 3", added, r.Gaps)
	}
	// The agent restarts under the same name: its hello at seq 1 starts a
	// new sequence instead of being ignored as old.
	if !r.Add(ev("a", 1, Hello)) || !r.Add(ev("a", 2, Sample)) || r.Gaps != 3 {
		t.Fatalf("restart: not accepted, or gaps %d", r.Gaps)
	}
}

// TestRecordedTrace reads a real recording (kvscope serve --record of
// kvscope-agent --requests 3 on gpt-oss-20b, P TP2 -> D TP4) and checks
// what any correct agent's stream must satisfy, then its trace export.
func TestRecordedTrace(t *testing.T) {
	data, err := os.ReadFile("../../testdata/events/gpt-oss-20b-p2-d4.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	evs, err := ReadJSONL(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Kind != Hello || evs[0].Seq != 1 {
		t.Fatalf("the stream starts with %s seq %d, want the hello at 1", evs[0].Kind, evs[0].Seq)
	}
	started := map[string]int64{}
	batched := map[string]int64{}
	dones, batches := 0, 0
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: the recording is not contiguous", i, e.Seq)
		}
		switch e.Kind {
		case TransferStart:
			started[e.Start.Request] = e.Start.Bytes
		case DescBatch:
			batched[e.Batch.Request] += e.Batch.Bytes
			batches++
		case TransferDone:
			d := e.Done
			if d.Verified != "exact" || d.Bytes != started[d.Request] || d.Bytes != batched[d.Request] || d.Timing != Measured {
				t.Fatalf("%s: verified %s, %d bytes done, %d started, %d in batches", d.Request, d.Verified, d.Bytes, started[d.Request], batched[d.Request])
			}
			dones++
		}
	}
	if dones != 3 {
		t.Fatalf("%d transfers, want 3", dones)
	}
	out, err := Trace(evs)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Ph  string  `json:"ph"`
			Cat string  `json:"cat"`
			Dur float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(out, &tr); err != nil {
		t.Fatal(err)
	}
	spans := 0
	for _, te := range tr.TraceEvents {
		if te.Ph == "X" {
			spans++
			if te.Dur <= 0 || strings.Contains(te.Cat, "synthesized") {
				t.Fatalf("span %+v: want a positive, measured duration", te)
			}
		}
	}
	if spans != batches+dones {
		t.Fatalf("%d trace spans, want one per batch and transfer: %d", spans, batches+dones)
	}
}

func TestClip(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 10, "abcdefg…"},
		{"ääääää", 8, "ää…"}, // never half a rune
	} {
		got := Clip(c.in, c.n)
		if got != c.want || len(got) > c.n || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q, want %q (at most %d valid bytes)", c.in, c.n, got, c.want, c.n)
		}
	}
}

func TestSubject(t *testing.T) {
	for _, c := range []struct{ agent, want string }{
		{"gpu7/decode-rank0", "kvscope.ev.gpu7/decode-rank0"},
		{"host.example/agent", "kvscope.ev.host~2Eexample/agent"},
		{"a*b>c~d e", "kvscope.ev.a~2Ab~3Ec~7Ed~20e"},
		{"a~2Eb", "kvscope.ev.a~7E2Eb"}, // not the same as "a.b"
	} {
		if got := Subject(c.agent); got != c.want {
			t.Errorf("Subject(%q) = %q, want %q", c.agent, got, c.want)
		}
	}
}

func TestParseFleet(t *testing.T) {
	f, ok := ParseFleet([]byte(`{"fleet":[{"agent":"a","events_per_s":5,"p99_us":120}],"slowest":[{"agent":"a","request":"r","transfer_us":900}]}`))
	if !ok || len(f.Fleet) != 1 || f.Fleet[0].EventsPS != 5 || f.Slowest[0].TransferUS != 900 {
		t.Fatalf("%+v %v", f, ok)
	}
	for _, bad := range []string{`{"history":3}`, `[{"v":1}]`, `{"fleet":null}`, `{"fleet":`, ``} {
		if _, ok := ParseFleet([]byte(bad)); ok {
			t.Errorf("%q read as a fleet summary", bad)
		}
	}
}
