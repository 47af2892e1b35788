package event

import (
	"strings"
	"testing"
	"time"
)

// TestDetailEvents: a detail event carries dseq instead of seq; Peek and
// DecodeFrame agree on what is one, and a ring counts jumps in the
// detail sequence apart from the stored one.
func TestDetailEvents(t *testing.T) {
	batch := `"batch":{"request":"r","p_rank":0,"d_rank":0,"p_group":0,"d_group":0,"layer":"l","layer_kind":"full","descs":1,"bytes":1,"start_ns":0,"end_ns":1,"timing":"measured"}`
	for _, c := range []struct {
		name, frame, err string
	}{
		{"a batch numbered in the detail sequence is one", `[{"v":1,"agent":"a","seq":0,"dseq":3,"kind":"desc_batch","ts_ns":1,` + batch + `}]`, ""},
		{"a batch with both numbers is refused", `[{"v":1,"agent":"a","seq":2,"dseq":3,"kind":"desc_batch","ts_ns":1,` + batch + `}]`, "dseq"},
		{"a summary in the detail sequence is refused", `[{"v":1,"agent":"a","dseq":3,"kind":"sample","ts_ns":1,"sample":{"gbps":0,"p50_us":0,"p99_us":0,"requests":0,"descs":0,"dropped_events":0}}]`, "not detail"},
		{"an event with neither number is refused", `[{"v":1,"agent":"a","kind":"desc_batch","ts_ns":1,` + batch + `}]`, "seq"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, perr := Peek([]byte(c.frame))
			_, derr := DecodeFrame([]byte(c.frame))
			for what, err := range map[string]error{"Peek": perr, "DecodeFrame": derr} {
				switch {
				case c.err == "" && err != nil:
					t.Errorf("%s: %v", what, err)
				case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
					t.Errorf("%s: %v, want an error naming %q", what, err, c.err)
				}
			}
		})
	}
	r := NewRing(16)
	for _, e := range []Event{{Agent: "a", Seq: 1, Kind: Hello}, {Agent: "a", Detail: 5, Kind: DescBatch}, {Agent: "a", Seq: 2, Kind: Sample},
		{Agent: "a", Detail: 6, Kind: DescBatch}, {Agent: "a", Detail: 9, Kind: DescBatch}, {Agent: "a", Seq: 3, Kind: TransferDone}} {
		r.Add(e)
	}
	if r.Gaps != 0 || r.DetailGaps != 2 {
		t.Errorf("gaps %d, detail gaps %d; want 0 and 2 (dseq 7 and 8)", r.Gaps, r.DetailGaps)
	}
	if DetailSubject("gpu1.x/agent") != "kvscope.detail.gpu1~2Ex/agent" || WatchSubject("a") != "kvscope.watch.a" {
		t.Errorf("subjects: %s %s", DetailSubject("gpu1.x/agent"), WatchSubject("a"))
	}
	if a, err := AgentOfDetail(DetailSubject("gpu1.x/agent")); err != nil || a != "gpu1.x/agent" {
		t.Errorf("AgentOfDetail: %q %v", a, err)
	}
}

// TestDetailAt: a browser coming back is told where each drawn agent's
// detail stood; a ring counts what it had not seen by then, even with no
// later detail to show the jump, nothing for an agent it has seen past
// that point, and for an agent whose detail never reached it takes the
// position as where that agent's detail starts.
func TestDetailAt(t *testing.T) {
	header := HistoryHeader(History{Frames: 2, Gone: 7, DetailAt: map[string]uint64{"a": 40, "b": 3, "c": 9}})
	h, ok := ReadHistory(header)
	if n, nok := HistoryCount(header); !ok || !nok || n != 2 || h.Frames != 2 || h.Gone != 7 {
		t.Fatalf("%s: history %d %v (count %d %v), gone %d", header, h.Frames, ok, n, nok, h.Gone)
	}
	at := h.DetailAt
	if len(at) != 3 || at["a"] != 40 {
		t.Fatalf("ReadHistory(%s).DetailAt = %v", header, at)
	}
	for _, c := range []struct{ msg, want string }{
		{string(HistoryHeader(History{Frames: 3})), `{"history":3}`},
		{`{"history":3,"gone":-1,"detail_at":{"a":"x"}}`, ""}, // a header whose extras do not read: left out
	} {
		if h, ok := ReadHistory([]byte(c.msg)); !ok || h.Frames != 3 || h.Gone != 0 || h.DetailAt != nil || c.want != "" && c.msg != c.want {
			t.Errorf("a header without detail positions: %s read as %+v, %v", c.msg, h, ok)
		}
	}
	if _, ok := ReadHistory([]byte(`{"fleet":[]}`)); ok {
		t.Error("the fleet summary read as a history header")
	}
	r := NewRing(16)
	for _, e := range []Event{{Agent: "a", Detail: 30, Kind: DescBatch}, {Agent: "b", Detail: 5, Kind: DescBatch}} {
		r.Add(e)
	}
	for agent, dseq := range at { // a: 31..40 lost; b: seen past 3; c: never seen
		r.DetailAt(agent, dseq)
	}
	if r.DetailGaps != 10 {
		t.Fatalf("detail gaps %d, want 10 (a's 31-40)", r.DetailGaps)
	}
	// What follows continues from the position: no second count; c's
	// detail starts at 9 for this ring, so 12 is a jump of two.
	r.Add(Event{Agent: "a", Detail: 41, Kind: DescBatch})
	r.Add(Event{Agent: "b", Detail: 6, Kind: DescBatch})
	r.Add(Event{Agent: "c", Detail: 12, Kind: DescBatch})
	if r.DetailGaps != 12 {
		t.Errorf("detail gaps %d after a's 41, b's 6 and c's 12, want 12 (a's 31-40, c's 10-11)", r.DetailGaps)
	}
	r.DetailAt("a", 41) // told again where it already is
	if r.DetailGaps != 12 {
		t.Errorf("detail gaps %d after a position it has seen, want 12", r.DetailGaps)
	}
	// A position starts an agent for the samples too: c's sample saying
	// 20 counts 13-20 once the grace is over.
	r.Add(Event{Agent: "c", Seq: 1, Kind: Sample, Sample: &SampleData{DetailThrough: 20}})
	t0 := time.Unix(1000, 0)
	r.DetailDue(t0, DetailGrace)
	if r.DetailDue(t0.Add(DetailGrace), DetailGrace); r.DetailGaps != 20 {
		t.Errorf("detail gaps %d after c's sample, want 20 (and c's 13-20)", r.DetailGaps)
	}
}

// TestDetailDue: an agent's samples say how far its detail sequence has
// got; detail a ring has not had DetailGrace after it first saw that word
// is counted missed (a lost tail no later detail shows), once, and what
// arrives in time, or was told before, is not. An agent whose detail the
// ring has never had is not counted: its detail may never have been sent.
func TestDetailDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	sample := func(agent string, seq, through uint64) Event {
		return Event{Agent: agent, Seq: seq, Kind: Sample, Sample: &SampleData{DetailThrough: through}}
	}
	batch := func(agent string, dseq uint64) Event { return Event{Agent: agent, Detail: dseq, Kind: DescBatch} }
	type step struct {
		add  []Event
		due  time.Duration // DetailDue at t0+due, when add is empty
		gaps uint64        // DetailGaps after the step
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a lost tail is counted after the grace, once", []step{
			{add: []Event{batch("a", 10), sample("a", 1, 15)}},
			{due: 0, gaps: 0},                       // first seen: the grace starts
			{due: DetailGrace - time.Millisecond},   // still on its way
			{due: DetailGrace, gaps: 5},             // 11-15 lost
			{due: 3 * DetailGrace, gaps: 5},         // not again
			{add: []Event{batch("a", 13)}, gaps: 5}, // late: a repeat
			{add: []Event{batch("a", 16)}, gaps: 5}, // continues from 15
		}},
		{"detail arriving within the grace is not missed", []step{
			{add: []Event{batch("a", 10), sample("a", 1, 15)}},
			{due: 0},
			{add: []Event{batch("a", 11), batch("a", 12), batch("a", 13), batch("a", 14), batch("a", 15)}},
			{due: 5 * DetailGrace, gaps: 0},
		}},
		{"part arrives: the rest is counted", []step{
			{add: []Event{batch("a", 10), sample("a", 1, 15)}},
			{due: 0},
			{add: []Event{batch("a", 12)}, gaps: 1}, // 11 by the jump
			{due: DetailGrace, gaps: 4},             // and 13-15 by the word
		}},
		{"a later word waits for its own grace", []step{
			{add: []Event{batch("a", 10), sample("a", 1, 12)}},
			{due: 0},
			{add: []Event{sample("a", 2, 20)}},
			{due: time.Second},
			{due: DetailGrace, gaps: 2},                // 11-12
			{due: time.Second + DetailGrace, gaps: 10}, // 13-20
		}},
		{"an agent whose detail never came is not counted", []step{
			{add: []Event{sample("b", 1, 500)}},
			{due: 0},
			{due: 2 * DetailGrace},
			{add: []Event{batch("b", 600), sample("b", 2, 600)}},
			{due: 4 * DetailGrace, gaps: 0},
		}},
		{"a repeated sample is no word", []step{
			{add: []Event{batch("a", 10), sample("a", 2, 10)}},
			{add: []Event{sample("a", 2, 30)}}, // seq 2 again: refused
			{due: 0},
			{due: 2 * DetailGrace, gaps: 0},
		}},
		{"an agent that restarted starts again", []step{
			{add: []Event{{Agent: "a", Seq: 1, TS: 1, Kind: Hello}, batch("a", 10), sample("a", 2, 15)}},
			{due: 0},
			{add: []Event{{Agent: "a", Seq: 1, TS: 2, Kind: Hello}}},
			{due: 2 * DetailGrace, gaps: 0},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := NewRing(64)
			for i, s := range c.steps {
				before := r.DetailGaps
				if len(s.add) > 0 {
					for _, e := range s.add {
						r.Add(e)
					}
				} else if told := r.DetailDue(t0.Add(s.due), DetailGrace); told != (r.DetailGaps != before) {
					t.Errorf("step %d: DetailDue reported %v, gaps %d to %d", i, told, before, r.DetailGaps)
				}
				if r.DetailGaps != s.gaps {
					t.Fatalf("step %d: detail gaps %d, want %d", i, r.DetailGaps, s.gaps)
				}
			}
		})
	}
}
