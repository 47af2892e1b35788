package event

import (
	"reflect"
	"strings"
	"testing"
)

// unpaired is e as Head.Decode reads it: a transfer_done without its pairs.
func unpaired(e Event) Event {
	if e.Done != nil {
		d := *e.Done
		d.Pairs = nil
		e.Done = &d
	}
	return e
}

// doneWithPairs is a transfer_done as the default scenario's agent sends
// it: 4 rank pairs by 2 group pairs.
func doneWithPairs(seq uint64) Event {
	d := &DoneData{Request: "req-1234", Bytes: 402_653_184, Descs: 3072, Merged: 192, PrepUS: 12.5, PostUS: 40, TransferUS: 2100.25, GBps: 191.7,
		Timing: Measured, Source: "host", Verified: "exact", Mode: "pull", Prompt: 4096, Hit: 512}
	for p := 0; p < 4; p++ {
		for g := 0; g < 2; g++ {
			d.Pairs = append(d.Pairs, PairStat{PRank: p, DRank: p / 2, PGroup: g, DGroup: g, Layers: 24, Descs: 384, Bytes: 50_331_648})
		}
	}
	return Event{V: Version, Agent: "host-17/agent", Seq: seq, Kind: TransferDone, TS: 1_700_000_000_000_000_000, Done: d}
}

func TestHeadDecodeReadsWhatDecodeEventReads(t *testing.T) {
	events, _ := mixedFrame(t)
	events = append(events, doneWithPairs(11),
		Event{V: Version, Agent: "host-1/agent", Seq: 12, Kind: Sample, Sample: &SampleData{}},
		Event{V: Version, Agent: "host-1/agent", Seq: 13, Kind: StuckTransfer, Stuck: &StuckData{Source: "ring", SinceNS: 5}})
	frame, err := EncodeFrame(events)
	if err != nil {
		t.Fatal(err)
	}
	heads, err := Peek(frame)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range heads {
		whole, err := DecodeEvent(h.Raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.Decode()
		if err != nil {
			t.Fatalf("event %d (%s): %v", i, h.Kind, err)
		}
		if !reflect.DeepEqual(got, unpaired(whole)) {
			t.Errorf("event %d (%s): Head.Decode %+v, DecodeEvent without pairs %+v", i, h.Kind, got, unpaired(whole))
		}
	}
}

func TestHeadDecodeRefusesWithAReason(t *testing.T) {
	for _, c := range []struct{ name, done, field, reason string }{
		{"unknown field", `{"request":"r","bytes":1,"timing":"measured","verified":"exact","bogus":2}`, "done", "bogus"},
		{"wrong type", `{"request":"r","bytes":"many","timing":"measured","verified":"exact"}`, "done.bytes", "want a number"},
		{"not an integer", `{"request":"r","descs":1.5,"timing":"measured","verified":"exact"}`, "done.descs", "not an integer"},
		{"a string of a number", `{"request":7,"timing":"measured","verified":"exact"}`, "done.request", "want a string"},
		{"pairs not a list", `{"request":"r","timing":"measured","verified":"exact","pairs":"x"}`, "done.pairs", "want a list"},
		{"a key in another case", `{"Request":"r","timing":"measured","verified":"exact"}`, "done", "Request"},
		{"timing", `{"request":"r","bytes":1,"timing":"guessed","verified":"exact"}`, "done.timing", "guessed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			heads, err := Peek([]byte(`[{"v":1,"agent":"a","seq":1,"kind":"transfer_done","done":` + c.done + `}]`))
			if err != nil {
				t.Fatal(err)
			}
			_, err = heads[0].Decode()
			fe, ok := err.(*FrameError)
			if !ok || fe.Field != c.field || !strings.Contains(fe.Error(), c.reason) {
				t.Errorf("Head.Decode: %v, want a FrameError on %s naming %q", err, c.field, c.reason)
			}
		})
	}
	// The pairs are not read: a list of another shape is not looked at
	// (DecodeEvent, which the storing server runs, refuses it).
	heads, _ := Peek([]byte(`[{"v":1,"agent":"a","seq":1,"kind":"transfer_done","done":{"request":"r\u00e9","timing":"measured","verified":"exact","pairs":[1,"x"]}}]`))
	if e, err := heads[0].Decode(); err != nil || e.Done.Request != "r\u00e9" {
		t.Errorf("pairs of another shape: %+v, %v, want them left unread (and the request unescaped)", e.Done, err)
	}
	if _, err := DecodeEvent(heads[0].Raw); err == nil {
		t.Error("DecodeEvent took pairs that are not pair objects")
	}
}

// TestAdmitChecksPairs: a server taking an agent's frame refuses pairs
// that DecodeEvent refuses, naming the pair and the field, and the event
// at fault; pairs of the right shape are taken and not kept.
func TestAdmitChecksPairs(t *testing.T) {
	frame := func(pairs string) []byte {
		return []byte(`[{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{}},` +
			`{"v":1,"agent":"a","seq":2,"kind":"transfer_done","done":{"request":"r","timing":"measured","verified":"exact","pairs":` + pairs + `}}]`)
	}
	for _, c := range []struct {
		name, pairs, field, reason string
		stricter                   bool // DecodeEvent takes it: keys match exactly here
	}{
		{"a pair not an object", `[1]`, "done.pairs[0]", "want an object", false},
		{"an unknown field", `[{"p_rank":0},{"p_rank":1,"rank":2}]`, "done.pairs[1]", `unknown field "rank"`, false},
		{"a key in another case", `[{"P_rank":0}]`, "done.pairs[0]", `unknown field "P_rank"`, true},
		{"not an integer", `[{"descs":1.5}]`, "done.pairs[0].descs", "not an integer", false},
		{"a string", `[{"bytes":"1"}]`, "done.pairs[0].bytes", "want a number", false},
		{"past an int", `[{"layers":9223372036854775808}]`, "done.pairs[0].layers", "out of range", false},
		{"not a list of pairs", `[{"p_rank":0} {"p_rank":1}]`, "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			heads, err := Peek(frame(c.pairs))
			if c.field == "" { // not even JSON: Peek refuses it first
				if err == nil {
					t.Fatalf("Peek took pairs %s", c.pairs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeEvent(heads[1].Raw); (err == nil) != c.stricter {
				t.Fatalf("DecodeEvent on %s: %v, want it to refuse: %v", c.pairs, err, !c.stricter)
			}
			_, err = Admit(heads)
			fe, ok := err.(*FrameError)
			if !ok || fe.Index != 1 || fe.Field != c.field || !strings.Contains(fe.Error(), c.reason) {
				t.Errorf("Admit: %v, want event 1's FrameError on %s naming %q", err, c.field, c.reason)
			}
		})
	}
	heads, err := Peek(frame(`[null,{},{"p_rank":1,"d_rank":3,"p_group":0,"d_group":1,"layers":12,"descs":96,"bytes":-0}]`))
	if err != nil {
		t.Fatal(err)
	}
	events, err := Admit(heads)
	if err != nil || len(events) != 2 || events[1].Done.Pairs != nil || events[1].Done.Request != "r" {
		t.Fatalf("Admit: %+v, %v, want both events, the pairs not kept", events, err)
	}
}

func BenchmarkSummaryRead(b *testing.B) {
	// A transfer_done of the default scenario (8 pairs): read as a replica
	// aggregates it (Peek, then Head.Decode) against decoding it whole
	// (the baseline, in the same run).
	frame, err := EncodeFrame([]Event{doneWithPairs(1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("head-decode", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for range b.N {
			heads, err := Peek(frame)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := heads[0].Decode(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-event-baseline", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for range b.N {
			heads, err := Peek(frame)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeEvent(heads[0].Raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAdmit(b *testing.B) {
	// A frame of one default-scenario transfer_done taken from an agent
	// (Peek, then Admit: the pairs checked, not kept) against DecodeFrame,
	// which the agent handler ran before (the baseline, in the same run).
	frame, err := EncodeFrame([]Event{doneWithPairs(1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("peek-admit", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for range b.N {
			heads, err := Peek(frame)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Admit(heads); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-frame-baseline", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for range b.N {
			if _, err := DecodeFrame(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
}
