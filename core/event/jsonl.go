package event

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// ReadJSONL reads a recording (kvscope serve --record): one event per
// line, each checked as a frame's event is. A bad line is an error naming
// its line number.
func ReadJSONL(r io.Reader) ([]Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxFrameBytes)
	var out []Event
	line := 1
	for ; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if text[0] != '{' {
			return nil, fmt.Errorf("event: line %d: not a JSON object", line)
		}
		evs, err := DecodeFrame(append(append([]byte{'['}, text...), ']'))
		if err != nil {
			return nil, fmt.Errorf("event: line %d: %w", line, err)
		}
		if len(evs) != 1 {
			return nil, fmt.Errorf("event: line %d: %d events, want one per line", line, len(evs))
		}
		out = append(out, evs[0])
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return nil, fmt.Errorf("event: line %d: longer than %d bytes", line, MaxFrameBytes)
		}
		return nil, fmt.Errorf("event: reading the recording at line %d: %w", line, err)
	}
	return out, nil
}
