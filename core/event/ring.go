package event

// Ring keeps the most recent events in a fixed-size buffer, so a live view's
// memory stays bounded however long it runs. It also tracks gaps in each
// agent's sequence (events dropped somewhere between the agent and here).
// A Ring is not safe for concurrent use.
type Ring struct {
	buf   []Event
	next  int
	full  bool
	last  map[string]uint64 // agent -> last seq seen
	Gaps  uint64            // events missing from the sequences seen
	Total uint64            // events added
}

// NewRing makes a ring of the given capacity.
func NewRing(capacity int) *Ring {
	return &Ring{buf: make([]Event, max(1, capacity)), last: map[string]uint64{}}
}

// Add appends an event, overwriting the oldest when full. A repeated or
// older sequence number (an agent resending after a reconnect) is ignored
// and reported false.
func (r *Ring) Add(e Event) bool {
	if last, ok := r.last[e.Agent]; ok {
		if e.Seq <= last {
			return false
		}
		r.Gaps += e.Seq - last - 1
	}
	r.last[e.Agent] = e.Seq
	r.buf[r.next] = e
	r.next = (r.next + 1) % len(r.buf)
	r.full = r.full || r.next == 0
	r.Total++
	return true
}

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
