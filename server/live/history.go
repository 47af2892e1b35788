package live

import (
	"sort"

	"github.com/kvscope/kvscope/core/event"
)

// What a new browser is sent before the live frames: each agent's state
// events and the hub's most recent events, packed into frames outside the
// hub's lock.

// recentEvents is the hub's replay buffer, bounded in events and bytes:
// the oldest go first when either bound is passed. Entries are never
// written in place, so a snapshot (a slice of it) stays valid; dropped
// entries are let go by copying the rest to a new array once they are
// half the buffer or a quarter of the byte bound.
type recentEvents struct {
	buf                 []event.Encoded // buf[start:] is the buffer
	start               int
	bytes, dropped      int // bytes of buf[start:], and of buf[:start]
	maxEvents, maxBytes int
}

func (r *recentEvents) add(s event.Encoded) {
	r.buf = append(r.buf, s)
	r.bytes += len(s.Raw)
	for len(r.buf)-r.start > r.maxEvents || r.bytes > r.maxBytes && len(r.buf)-r.start > 1 {
		n := len(r.buf[r.start].Raw)
		r.bytes, r.dropped = r.bytes-n, r.dropped+n
		r.start++
	}
	if r.start > len(r.buf)/2 || r.dropped > r.maxBytes/4 {
		r.buf = append(make([]event.Encoded, 0, r.maxEvents+1), r.buf[r.start:]...)
		r.start, r.dropped = 0, 0
	}
}

// events is the buffer, oldest first (a snapshot: do not modify).
func (r *recentEvents) events() []event.Encoded {
	return r.buf[r.start:len(r.buf):len(r.buf)]
}

// snapshot is what a new subscriber's history is made of: each agent's
// state and the replay buffer. It copies slice headers under h.mu and
// nothing more: the slices are never written in place (event.State and
// recentEvents.add replace or append), so they stay as they were.
func (h *Hub) snapshot() (map[string][]event.Encoded, []event.Encoded) {
	state := make(map[string][]event.Encoded, len(h.agents))
	for name, a := range h.agents {
		if a.state.Len() > 0 {
			state[name] = a.state.List()
		}
	}
	return state, h.recent.events()
}

// history groups a snapshot per agent: its state events older than its
// recent ones, then its recent ones.
func history(state map[string][]event.Encoded, recent []event.Encoded) map[string][]event.Encoded {
	out := map[string][]event.Encoded{}
	oldest := map[string]uint64{}
	for _, st := range recent {
		if _, ok := oldest[st.Event.Agent]; !ok {
			oldest[st.Event.Agent] = st.Event.Seq
		}
	}
	for agent, list := range state {
		for _, st := range list {
			if first, ok := oldest[agent]; !ok || st.Event.Seq < first {
				out[agent] = append(out[agent], st)
			}
		}
	}
	for _, st := range recent {
		out[st.Event.Agent] = append(out[st.Event.Agent], st)
	}
	return out
}

// historyFrames packs a history into frames within a browser's limits,
// each agent wholly in one frame (its state events, then as many of its
// most recent events as fit), agents in name order. It runs without h.mu.
func historyFrames(hist map[string][]event.Encoded) [][]byte {
	agents := make([]string, 0, len(hist))
	for a := range hist {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	var frames [][]byte
	var p event.Packer
	flush := func() {
		if f, _ := p.Frame(); f != nil {
			frames = append(frames, f)
		}
	}
	for _, a := range agents {
		list := hist[a]
		n, bytes := 0, 2 // the agent's events and bytes as a frame of their own
		for _, st := range list {
			n, bytes = n+1, bytes+len(st.Raw)+1
		}
		// Too much for one frame: drop its oldest recent events (the
		// state events, first in the list, stay).
		states := 0
		for states < len(list) && event.IsState(list[states].Event.Kind) {
			states++
		}
		rest := list[states:]
		for len(rest) > 0 && (bytes > event.MaxFrameBytes || n > event.MaxFrameEvents) {
			n, bytes = n-1, bytes-len(rest[0].Raw)-1
			rest = rest[1:]
		}
		list = append(list[:states:states], rest...)
		if p.Events()+n > event.MaxFrameEvents || p.Size()+bytes > event.MaxFrameBytes {
			flush()
		}
		for _, st := range list {
			p.Add(st.Raw, 1)
		}
	}
	flush()
	return frames
}
