package live

import (
	"context"
	"sort"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

// A browser that picks a few agents (/ws/live?agents=a,b) is sent their
// recent summaries from the event log, not from this replica's memory:
// in a fleet of hundreds of agents the replica's recent buffer (2,048
// events hub-wide) holds the fleet's last moments only, perhaps nothing
// of the agents picked. Their state events (hello, handshakes,
// registrations) come from the replica, which keeps every agent's.

const (
	// maxPickedFromLog is the most agents a browser's history is read
	// from the log for; one that picks more is sent the replica's.
	maxPickedFromLog = 16
	// maxPickedRecent is the most recent events of each picked agent
	// its history holds (the replica's whole buffer holds 2,048).
	maxPickedRecent = 1024
)

// pickedHistory is the history of a browser that picked agents: each
// one's state events (the replica's) and its recent events from the log,
// at most maxPickedRecent of them, packed as a new browser's history is;
// through is the last stream message read (the live frames queued
// meanwhile that it carried are not sent again). It takes a turn with the
// browsers catching up.
func (h *Hub) pickedHistory(ctx context.Context, agents map[string]bool) (frames [][]byte, through uint64, err error) {
	release, done, err := h.catchUpTurn(ctx)
	defer release() // the frames are packed copies: nothing is held
	if err != nil {
		return nil, 0, err
	}
	defer func() { done(err) }()
	names := make([]string, 0, len(agents))
	for a := range agents {
		names = append(names, a)
	}
	sort.Strings(names)
	recent := map[string][]event.Encoded{}
	skipped := 0
	through, err = h.log.ReadRecent(ctx, eventlog.Recent{Agents: names, MaxMessages: maxPickedRecent * len(names), Timeout: catchUpTimeout},
		func(data []byte, agent string, seq uint64) {
			if !agents[agent] {
				return
			}
			kept, _, left := routeBack(data, agent, seq)
			skipped += left
			list := append(recent[agent], kept...)
			if len(list) > 2*maxPickedRecent { // keep the newest; copy seldom
				list = append([]event.Encoded(nil), list[len(list)-maxPickedRecent:]...)
			}
			recent[agent] = list
		})
	if skipped > 0 {
		h.metrics.Add(metricCatchUpSkipped, helpCatchUpSkipped, float64(skipped))
	}
	if err != nil {
		return nil, 0, err
	}
	var flat []event.Encoded
	for _, a := range names {
		list := recent[a]
		flat = append(flat, list[max(0, len(list)-maxPickedRecent):]...)
	}
	state := map[string][]event.Encoded{}
	h.mu.Lock()
	for _, a := range names {
		if ag := h.agents[a]; ag != nil && ag.state.Len() > 0 {
			state[a] = ag.state.List()
		}
	}
	h.mu.Unlock()
	frames = historyFrames(history(state, flat))
	if frames == nil {
		frames = [][]byte{}
	}
	return frames, through, nil
}
