package event

import "time"

// Ring keeps the most recent events in a fixed-size buffer, so a live view's
// memory stays bounded however long it runs. It also tracks gaps in each
// agent's sequence (events dropped somewhere between the agent and here).
// A Ring is not safe for concurrent use.
type Ring struct {
	buf  []Event
	next int
	full bool
	last map[string]uint64 // agent -> last seq seen
	ts   map[string]int64  // agent -> the timestamp of that event
	Gaps uint64            // events missing from the sequences seen
	// DetailGaps is the detail events (dseq) missing from the detail
	// sequences seen: detail a drawn agent produced that did not arrive
	// (a fault, or a queue that dropped it), told, never silent.
	DetailGaps uint64
	lastDetail map[string]uint64 // agent -> last dseq seen
	// through is, per agent whose detail this ring has seen, the detail
	// its samples said was numbered (SampleData.DetailThrough) and has
	// not arrived yet: DetailDue counts it missed once it is overdue.
	through map[string][]detailThrough
	Total   uint64 // events added
}

// detailThrough is one sample's word that an agent's detail up to dseq
// was numbered, and when DetailDue first saw it (zero: not yet).
type detailThrough struct {
	dseq uint64
	seen time.Time
}

// DetailGrace is how long after a sample said an agent's detail up to
// some dseq was numbered that detail may still arrive: samples and
// detail take different paths (the event log, and NATS's plain subjects
// or the replica's fan-out). Past it, what has not come is counted.
const DetailGrace = 2 * time.Second

// maxThrough bounds the words kept per agent (one a second): a later
// word covers an earlier one's detail.
const maxThrough = 8

// NewRing makes a ring of the given capacity.
func NewRing(capacity int) *Ring {
	return &Ring{buf: make([]Event, max(1, capacity)), last: map[string]uint64{}, ts: map[string]int64{}}
}

// Add appends an event, overwriting the oldest when full. A repeated or
// older sequence number (an agent resending after a reconnect) is ignored
// and reported false.
func (r *Ring) Add(e Event) bool {
	if Restarted(e, r.ts[e.Agent]) {
		delete(r.last, e.Agent)
		delete(r.lastDetail, e.Agent)
		delete(r.through, e.Agent)
	}
	if e.Detail != 0 {
		if r.lastDetail == nil {
			r.lastDetail = map[string]uint64{}
		}
		if last, ok := r.lastDetail[e.Agent]; ok {
			if e.Detail <= last {
				return false
			}
			r.DetailGaps += e.Detail - last - 1
		}
		r.lastDetail[e.Agent] = e.Detail
		r.arrived(e.Agent)
		r.put(e)
		return true
	}
	if last, ok := r.last[e.Agent]; ok {
		if e.Seq <= last {
			return false
		}
		r.Gaps += e.Seq - last - 1
	}
	r.last[e.Agent], r.ts[e.Agent] = e.Seq, e.TS
	if e.Kind == Sample && e.Sample != nil && e.Sample.DetailThrough > 0 {
		r.numbered(e.Agent, e.Sample.DetailThrough)
	}
	r.put(e)
	return true
}

// numbered notes an agent's sample saying its detail up to dseq was
// numbered. Only for an agent whose detail this ring has seen: before its
// first detail event a ring cannot tell detail sent from detail produced
// while nobody drew the agent (never sent, not missed).
func (r *Ring) numbered(agent string, dseq uint64) {
	last, seen := r.lastDetail[agent]
	if !seen || dseq <= last {
		return
	}
	if r.through == nil {
		r.through = map[string][]detailThrough{}
	}
	words := r.through[agent]
	if n := len(words); n > 0 && words[n-1].seen.IsZero() {
		words[n-1].dseq = max(words[n-1].dseq, dseq) // not yet seen by DetailDue: one word
	} else {
		if n == maxThrough {
			words = append(words[:0], words[1:]...)
		}
		words = append(words, detailThrough{dseq: dseq})
	}
	r.through[agent] = words
}

// arrived drops the words about an agent's detail that its last detail
// event covers.
func (r *Ring) arrived(agent string) {
	words, ok := r.through[agent]
	if !ok {
		return
	}
	last, i := r.lastDetail[agent], 0
	for i < len(words) && words[i].dseq <= last {
		i++
	}
	if i == len(words) {
		delete(r.through, agent)
		return
	}
	r.through[agent] = words[i:]
}

// DetailDue counts, in DetailGaps, the detail that agents' samples said
// was numbered at least grace before now (DetailGrace, as DetailDue first
// saw the word: call it every second or so) and that has not arrived: a
// lost tail with no later detail to show the jump. What it counts can no
// longer arrive (a late event is a repeat, refused). It reports whether it
// counted any.
func (r *Ring) DetailDue(now time.Time, grace time.Duration) bool {
	before := r.DetailGaps
	for agent, words := range r.through {
		var due uint64
		for i := range words {
			if words[i].seen.IsZero() {
				words[i].seen = now
			}
			if !now.Before(words[i].seen.Add(grace)) {
				due = max(due, words[i].dseq)
			}
		}
		if last := r.lastDetail[agent]; due > last {
			r.DetailGaps += due - last
			r.lastDetail[agent] = due
			r.arrived(agent)
		}
	}
	return r.DetailGaps != before
}

// DetailAt takes a hub's word of where agent's detail stood when this
// ring's browser came back (History.DetailAt): detail up to dseq can no
// longer come. What this ring had not seen of it by then is counted in
// DetailGaps. For an agent whose detail it has not seen (all of it was
// lost on the way to this browser), dseq is where that agent's detail
// starts for this ring: nothing is counted, and what it misses after that
// is. Hubs tell only browsers coming back, which drew those agents
// before: a position told to a new browser may be from before it drew the
// agent, with detail since then that nobody drew and was never sent.
func (r *Ring) DetailAt(agent string, dseq uint64) {
	if r.lastDetail == nil {
		r.lastDetail = map[string]uint64{}
	}
	last, seen := r.lastDetail[agent]
	if seen && dseq <= last {
		return
	}
	if seen {
		r.DetailGaps += dseq - last
	}
	r.lastDetail[agent] = dseq
	r.arrived(agent)
}

// put appends an accepted event.
func (r *Ring) put(e Event) {
	r.buf[r.next] = e
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
	r.Total++
}

// AddHistory adds a subscriber's first frame: the events that happened
// before it joined. For an agent this ring has not seen yet, the gaps in
// that history are not counted (they are what the server no longer keeps,
// not what was lost on the way); for an agent already seen they are.
func (r *Ring) AddHistory(events []Event) []bool {
	known := make(map[string]bool, len(r.last))
	for a := range r.last {
		known[a] = true
	}
	out := make([]bool, len(events))
	for i, e := range events {
		if !known[e.Agent] {
			if last, ok := r.last[e.Agent]; ok && e.Seq > last && !Restarted(e, r.ts[e.Agent]) {
				r.last[e.Agent] = e.Seq - 1 // no gap
			}
		}
		out[i] = r.Add(e)
	}
	return out
}

// Restarted reports whether an event starts an agent's sequence again: a
// hello with sequence number 1 (an agent's first event) stamped after the
// last event seen from that agent (lastTS). The agent restarted under the
// same name. A replay of its old hello is stamped earlier and is not a
// restart.
func Restarted(e Event, lastTS int64) bool { return e.Kind == Hello && e.Seq == 1 && e.TS > lastTS }

// Events returns the buffered events, oldest first.
func (r *Ring) Events() []Event {
	if !r.full {
		return append([]Event(nil), r.buf[:r.next]...)
	}
	return append(append([]Event(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// Len is the number of buffered events.
func (r *Ring) Len() int {
	if r.full {
		return len(r.buf)
	}
	return r.next
}
