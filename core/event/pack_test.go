package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
)

// rawEvent is an encoded-looking event of exactly n bytes (a JSON string:
// a frame of them is valid JSON).
func rawEvent(i, n int) []byte {
	tag := strconv.Itoa(i) + ":"
	return []byte(`"` + tag + string(bytes.Repeat([]byte("x"), n-2-len(tag))) + `"`)
}

// TestPackFillsFramesWithinTheLimits: events are packed in order into as
// few frames as MaxFrameBytes and MaxFrameEvents allow, each frame the
// JSON array of its events; the counts are hand-derived from the limits.
func TestPackFillsFramesWithinTheLimits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sizes  []int // bytes of each event, in order
		counts []int // events per frame
	}{
		{"no events, no frames", nil, nil},
		{"one small event", []int{10}, []int{1}},
		// 3 × (300,000 + a comma) + brackets = 900,004 bytes; a fourth
		// would make 1,200,005 > 1,048,576.
		{"three of 300 KB to a frame", []int{300_000, 300_000, 300_000, 300_000, 300_000}, []int{3, 2}},
		// 524,286 + 524,286 + a comma + brackets = 1,048,575: the limit
		// less one, which the packer's accounting (a separator after each
		// event) still takes.
		{"two halves of a frame", []int{524_286, 524_286}, []int{2}},
		{"one byte more does not fit", []int{524_287, 524_287}, []int{1, 1}},
		{"an event larger than a frame gets one of its own", []int{10, MaxFrameBytes + 5, 10}, []int{1, 1, 1}},
		{"at most MaxFrameEvents events", repeat(10, MaxFrameEvents+1), []int{MaxFrameEvents, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events [][]byte
			for i, n := range tc.sizes {
				events = append(events, rawEvent(i, n))
			}
			frames, counts := Pack(events)
			if fmt.Sprint(counts) != fmt.Sprint(tc.counts) || len(frames) != len(counts) {
				t.Fatalf("%d frames of %v events, want %v", len(frames), counts, tc.counts)
			}
			next := 0
			for i, f := range frames {
				var got []json.RawMessage
				if err := json.Unmarshal(f, &got); err != nil || len(got) != counts[i] {
					t.Fatalf("frame %d: %d events (%v), want %d", i, len(got), err, counts[i])
				}
				for _, g := range got {
					if !bytes.Equal(g, events[next]) {
						t.Fatalf("frame %d: event %d out of order", i, next)
					}
					next++
				}
				if len(f) > MaxFrameBytes && counts[i] > 1 {
					t.Fatalf("frame %d of %d events: %d bytes", i, counts[i], len(f))
				}
			}
			if n := Fit(events); len(tc.counts) > 0 && len(events[0]) <= MaxEventBytes && n != tc.counts[0] {
				t.Fatalf("Fit: %d, want the first frame's %d", n, tc.counts[0])
			}
		})
	}
	if n := Fit([][]byte{rawEvent(0, MaxFrameBytes), rawEvent(1, 10)}); n != 0 {
		t.Errorf("Fit with a first event larger than a frame: %d, want 0", n)
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

// TestPackerTakesRuns: a part may be a run of events (a frame's inside);
// its events count against MaxFrameEvents, its bytes against
// MaxFrameBytes, and the frame is the runs joined.
func TestPackerTakesRuns(t *testing.T) {
	var p Packer
	if p.Size() != 2 || p.Events() != 0 || !p.Fits(MaxFrameBytes*2, MaxFrameEvents*2) {
		t.Fatalf("an empty packer: size %d, %d events; it must take any part", p.Size(), p.Events())
	}
	p.Add([]byte(`1,2`), 2)
	if p.Fits(1, MaxFrameEvents-1) || !p.Fits(1, MaxFrameEvents-2) {
		t.Errorf("a run of %d events after 2: want refused, and one fewer taken", MaxFrameEvents-1)
	}
	if p.Fits(MaxFrameBytes-6, 1) || !p.Fits(MaxFrameBytes-7, 1) {
		t.Errorf("the byte bound: size %d, want a part of MaxFrameBytes-7 to be the largest taken", p.Size())
	}
	p.Add([]byte(`3`), 1)
	frame, n := p.Frame()
	if string(frame) != "[1,2,3]" || n != 3 {
		t.Fatalf("frame %s of %d events, want [1,2,3] of 3", frame, n)
	}
	if f, n := p.Frame(); f != nil || n != 0 || p.Size() != 2 {
		t.Fatalf("after Frame: %s, %d events, size %d; want empty", f, n, p.Size())
	}
}
