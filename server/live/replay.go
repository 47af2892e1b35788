package live

import (
	"context"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// Replay plays recorded events (a --record file, or a range of the event
// log) into a hub as they happened: in frames of at most 50 ms of recorded
// time, waiting between frames as recorded, divided by speed (at most 2 s;
// speed 0 plays without pauses), until the events or ctx end.
func Replay(ctx context.Context, h *Hub, events []event.Event, speed float64) {
	const window = int64(50 * time.Millisecond)
	for i := 0; i < len(events); {
		j := i + 1
		for j < len(events) && j-i < event.MaxFrameEvents && events[j].TS-events[i].TS < window && events[j].TS >= events[i].TS {
			j++
		}
		h.Publish(events[i:j])
		if j < len(events) && speed > 0 {
			gap := time.Duration(float64(events[j].TS-events[i].TS) / speed)
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(max(gap, 0), 2*time.Second)):
			}
		}
		i = j
	}
}
