package live

import (
	"context"
	"io"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// Play plays recorded events, as next returns them until io.EOF (a
// --record file read line by line, or a range of the event log read a
// chunk at a time), as they happened: in frames of at most 50 ms of
// recorded time (and event.MaxFrameEvents events), waiting between frames
// as recorded, divided by speed (at most 2 s; speed 0 plays without
// pauses), until next or ctx ends. It holds one frame and the event after
// it; publish may keep the frame it is given (each is a new slice).
// next's error other than io.EOF is returned.
func Play(ctx context.Context, next func() (event.Event, error), speed float64, publish func([]event.Event)) error {
	const window = int64(50 * time.Millisecond)
	look, err := next()
	for err == nil {
		frame := []event.Event{look}
		for {
			look, err = next()
			if err != nil || len(frame) >= event.MaxFrameEvents || look.TS-frame[0].TS >= window || look.TS < frame[0].TS {
				break
			}
			frame = append(frame, look)
		}
		publish(frame)
		if err == nil && speed > 0 {
			gap := time.Duration(float64(look.TS-frame[0].TS) / speed)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(max(gap, 0), 2*time.Second)):
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err == io.EOF {
		return nil
	}
	return err
}

// Replay plays events held in memory into a hub, as Play plays them.
func Replay(ctx context.Context, h *Hub, events []event.Event, speed float64) {
	i := 0
	Play(ctx, func() (event.Event, error) {
		if i == len(events) {
			return event.Event{}, io.EOF
		}
		i++
		return events[i-1], nil
	}, speed, func(f []event.Event) { h.Publish(f) })
}
