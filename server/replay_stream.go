package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// jsonlEvents reads a recording (kvscope serve --record) one event at a
// time, as event.ReadJSONL reads it whole: one event a line, each checked
// as a frame's event is, a bad line an error naming its number. It holds
// one line, never the file.
type jsonlEvents struct {
	sc   *bufio.Scanner
	line int
}

func newJSONLEvents(r io.Reader) *jsonlEvents {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), event.MaxFrameBytes)
	return &jsonlEvents{sc: sc}
}

// next is the next event; io.EOF after the last.
func (j *jsonlEvents) next() (event.Event, error) {
	for j.sc.Scan() {
		j.line++
		text := bytes.TrimSpace(j.sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if text[0] != '{' {
			return event.Event{}, fmt.Errorf("event: line %d: not a JSON object", j.line)
		}
		evs, err := event.DecodeFrame(append(append([]byte{'['}, text...), ']'))
		if err != nil {
			return event.Event{}, fmt.Errorf("event: line %d: %w", j.line, err)
		}
		if len(evs) != 1 {
			return event.Event{}, fmt.Errorf("event: line %d: %d events, want one per line", j.line, len(evs))
		}
		return evs[0], nil
	}
	if err := j.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return event.Event{}, fmt.Errorf("event: line %d: longer than %d bytes", j.line+1, event.MaxFrameBytes)
		}
		return event.Event{}, fmt.Errorf("event: reading the recording at line %d: %w", j.line+1, err)
	}
	return event.Event{}, io.EOF
}

// checkRecording reads a whole recording once, keeping nothing, and
// returns how many events it holds or its first bad line.
func checkRecording(name string) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := newJSONLEvents(bufio.NewReaderSize(f, 1<<20))
	n := 0
	for {
		if _, err := r.next(); err == io.EOF {
			return n, nil
		} else if err != nil {
			return n, fmt.Errorf("%s: %w", name, err)
		}
		n++
	}
}

// playRecording plays a recording from its file, in file order, as
// live.Replay plays events held in memory: frames of at most 50 ms of
// recorded time (and event.MaxFrameEvents events), waiting between frames
// as recorded, divided by speed (at most 2 s; speed 0 plays without
// pauses), until the file or ctx ends. It holds one frame and the event
// after it, whatever the file's size; publish may keep the frame it is
// given (each is a new slice).
func playRecording(ctx context.Context, name string, speed float64, publish func([]event.Event)) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r := newJSONLEvents(bufio.NewReaderSize(f, 1<<20))
	const window = int64(50 * time.Millisecond)
	look, err := r.next()
	for err == nil {
		frame := []event.Event{look}
		for {
			look, err = r.next()
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
	return fmt.Errorf("%s: %w", name, err)
}
