package event

import (
	"fmt"
	"strings"
	"testing"
)

func stateEvent(kind Kind, seq uint64, rawBytes int) (Event, []byte) {
	e := Event{V: Version, Agent: "a", Seq: seq, Kind: kind}
	switch kind {
	case Hello:
		e.Hello = &HelloData{}
	case Registration:
		e.Registration = &RegistrationData{Rank: int(seq)}
	case Handshake:
		e.Handshake = &HandshakeData{}
	case DescBatch:
		e.Batch = &BatchData{Timing: Measured}
	}
	return e, []byte(strings.Repeat("x", rawBytes))
}

// seqsOf is the sequence numbers a state keeps, in order.
func seqsOf(list []Encoded) string {
	var out []string
	for _, x := range list {
		out = append(out, fmt.Sprint(x.Event.Seq))
	}
	return strings.Join(out, " ")
}

// TestStateKeepsWhoAnAgentIs: a hello starts the list; handshakes and
// registrations follow it; other kinds are not kept; past 64 events or
// 256 KiB the oldest after the hello goes, the hello and the newest stay;
// a list returned before stays as it was.
func TestStateKeepsWhoAnAgentIs(t *testing.T) {
	type keep struct {
		kind  Kind
		seq   uint64
		bytes int
	}
	many := []keep{{Hello, 1, 10}}
	for i := uint64(2); i <= 70; i++ {
		many = append(many, keep{Registration, i, 10})
	}
	for _, tc := range []struct {
		name  string
		keeps []keep
		want  string // the sequence numbers kept
	}{
		{"a hello and what describes the agent", []keep{{Hello, 1, 10}, {Registration, 2, 10}, {DescBatch, 3, 10}, {Handshake, 4, 10}}, "1 2 4"},
		{"a hello starts again", []keep{{Hello, 1, 10}, {Registration, 2, 10}, {Hello, 3, 10}, {Registration, 4, 10}}, "3 4"},
		// 70 events offered: the hello, then registrations 8 to 70 (63 of them).
		{"at most 64 events", many, "1 " + seqRange(8, 70)},
		// 100 KiB each: hello + 2 = 200 KiB + 10 bytes fits 256 KiB, a
		// third registration does not: the oldest after the hello goes.
		{"at most 256 KiB", []keep{{Hello, 1, 10}, {Registration, 2, 100 << 10}, {Registration, 3, 100 << 10}, {Registration, 4, 100 << 10}}, "1 3 4"},
		// Two events always stay, however large.
		{"the hello and the newest stay", []keep{{Hello, 1, 300 << 10}, {Registration, 2, 300 << 10}, {Registration, 3, 300 << 10}}, "1 3"},
		{"no hello: the first stays first", []keep{{Registration, 1, 200 << 10}, {Registration, 2, 100 << 10}, {Registration, 3, 100 << 10}}, "1 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s State
			for _, k := range tc.keeps {
				e, raw := stateEvent(k.kind, k.seq, k.bytes)
				if kept := s.Keep(e, raw); kept != IsState(k.kind) {
					t.Fatalf("Keep(%s) = %v", k.kind, kept)
				}
			}
			if got := seqsOf(s.List()); got != tc.want || s.Len() != len(s.List()) {
				t.Fatalf("kept %q (%d), want %q", got, s.Len(), tc.want)
			}
		})
	}
	t.Run("a list returned before stays as it was", func(t *testing.T) {
		var s State
		for _, k := range many[:64] {
			e, raw := stateEvent(k.kind, k.seq, k.bytes)
			s.Keep(e, raw)
		}
		before := s.List()
		was := seqsOf(before)
		e, raw := stateEvent(Registration, 99, 10)
		s.Keep(e, raw) // drops one: a new list
		e, raw = stateEvent(Hello, 100, 10)
		s.Keep(e, raw)
		if seqsOf(before) != was {
			t.Fatalf("a returned list changed to %q", seqsOf(before))
		}
		_ = append(s.List(), Encoded{}) // appending to a returned list does not reach the state
		if s.Len() != 1 {
			t.Fatalf("%d events after a hello, want 1", s.Len())
		}
	})
}

func seqRange(from, to int) string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return strings.Join(out, " ")
}
