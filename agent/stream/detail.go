package stream

import (
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// An agent that splits its events (Streamer.SplitDetail) keeps two
// sequences. Summaries (every kind but event.IsDetail's) are numbered by
// seq, queued until the server stores them, and resent after a reconnect,
// as before. Detail (a request's start and descriptor batches) is
// numbered by dseq, counting every detail event the agent produces, and is
// sent, never stored or resent, only while some browser draws this agent:
// a replica says so on the agent's websocket ({"detail":true} and
// {"detail":false}), or, for an agent on NATS, on its watch subject at
// least every event.WatchEvery (a lease of event.WatchLease). Unwatched,
// detail costs a counter. Each sample carries the detail sequence so far
// (SampleData.DetailThrough), so that a browser drawing the agent learns
// of detail lost on the way even when no later detail shows the jump.

// DefaultDetailQueue is the detail events waiting for their frame, at
// most: past it the oldest go (the browser sees the jump in dseq).
const DefaultDetailQueue = 4096

// forever is how long a replica's {"detail":true} lasts: until it says
// otherwise, or the connection ends.
const forever = 100 * 365 * 24 * time.Hour

// publishDetail numbers a detail event and queues it while detail is
// wanted; s.mu is held.
func (s *Streamer) publishDetail(e event.Event) {
	s.dseq++
	e.V, e.Agent, e.Seq, e.Detail = event.Version, s.Agent, 0, s.dseq
	if !time.Now().Before(s.detailUntil) {
		s.detailUnsent++
		return
	}
	if len(s.detail) >= DefaultDetailQueue {
		s.detail = s.detail[1:]
	}
	s.detail = append(s.detail, e)
}

// DetailOn reports whether some browser draws this agent's detail now: a
// producer may skip building detail nobody draws (SkipDetail counts it).
func (s *Streamer) DetailOn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Before(s.detailUntil)
}

// SkipDetail counts n detail events the producer did not build (nobody
// draws them): they take their numbers in the detail sequence all the
// same, so a browser that starts drawing mid-way sees no false gap and one
// that was drawing sees what it missed.
func (s *Streamer) SkipDetail(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dseq += uint64(n)
	s.detailUnsent += uint64(n)
}

// DetailUnsent is how many detail events went unsent (nobody drew them).
func (s *Streamer) DetailUnsent() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detailUnsent
}

// DetailSent is how many detail frames this agent sent.
func (s *Streamer) DetailSent() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.detailFrames
}

// watchedFor extends (or, with 0, ends) the time this agent sends detail.
func (s *Streamer) watchedFor(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		s.detailUntil = time.Time{}
		s.detail = nil
		return
	}
	s.detailUntil = time.Now().Add(d)
}

// detailFrames takes the queued detail events as frames within a
// browser's limits.
func (s *Streamer) takeDetailFrames() [][]byte {
	s.mu.Lock()
	queued := s.detail
	s.detail = nil
	s.mu.Unlock()
	if len(queued) == 0 {
		return nil
	}
	raws := make([][]byte, 0, len(queued))
	for _, e := range queued {
		if raw, err := event.Encode(e); err == nil && len(raw) <= event.MaxEventBytes {
			raws = append(raws, raw)
		}
	}
	frames, _ := event.Pack(raws)
	s.mu.Lock()
	s.detailFrames += uint64(len(frames))
	s.mu.Unlock()
	return frames
}
