package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live"
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
// live.Play plays (frames of at most 50 ms of recorded time, paced as
// recorded), holding one frame and the event after it whatever the file's
// size.
func playRecording(ctx context.Context, name string, speed float64, publish func([]event.Event)) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r := newJSONLEvents(bufio.NewReaderSize(f, 1<<20))
	if err := live.Play(ctx, r.next, speed, publish); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
