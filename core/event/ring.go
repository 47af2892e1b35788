package event

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
	Total      uint64            // events added
}

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
	r.put(e)
	return true
}

// DetailAt takes a hub's word of where agent's detail stood when this
// ring's browser (re)joined (History.DetailAt): detail up to dseq can no
// longer come. What this ring had not seen of it by then is counted in
// DetailGaps; for an agent whose detail it has not seen, dseq is where its
// detail starts for this ring (nothing missed, and a jump after it counts).
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
