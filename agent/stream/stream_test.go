package stream

import (
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/event"
)

// TestFrameFitsTheServerLimit: a batch too large for one frame is cut to
// what fits, and an event too large for any frame is dropped and counted
// instead of being resent forever.
func TestFrameFitsTheServerLimit(t *testing.T) {
	s := &Streamer{Agent: "a"}
	big := strings.Repeat("x", 300<<10)
	for range 8 {
		s.Publish(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_BACKEND", Message: big}})
	}
	s.Publish(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_BACKEND", Message: strings.Repeat("y", 2<<20)}})
	batch := s.pending(0)
	frame, err := s.frame(&batch)
	if err != nil || frame == nil || len(frame) > event.MaxFrameBytes || len(batch) != 2 {
		t.Fatalf("frame of %d bytes with %d events (%v); want at most %d bytes, 2 events", len(frame), len(batch), err, event.MaxFrameBytes)
	}
	huge := s.pending(8)
	if frame, err := s.frame(&huge); frame != nil || err != nil || s.Dropped() != 1 {
		t.Fatalf("an oversized event: frame %d bytes, err %v, dropped %d; want nil and 1 dropped", len(frame), err, s.Dropped())
	}
	if n := len(s.pending(0)); n != 8 {
		t.Fatalf("%d events queued after the drop, want 8", n)
	}
}

// TestQueueDropsOldest: publishing never blocks; a full queue drops its
// oldest events and counts them.
func TestQueueDropsOldest(t *testing.T) {
	s := &Streamer{Agent: "a", QueueSize: 10}
	for range 25 {
		s.Publish(event.Event{Kind: event.Sample, Sample: &event.SampleData{}})
	}
	q := s.pending(0)
	if s.Dropped() != 15 || len(q) != 10 || q[0].Seq != 16 || q[9].Seq != 25 {
		t.Fatalf("dropped %d, queue %d from seq %d; want 15 dropped and seqs 16..25", s.Dropped(), len(q), q[0].Seq)
	}
}
