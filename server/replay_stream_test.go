package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/internal/memtest"
)

// sampleLine is one recorded sample event of agent a at ts nanoseconds.
func sampleLine(seq uint64, ts int64) string {
	return fmt.Sprintf(`{"v":1,"agent":"replay-agent","seq":%d,"kind":"sample","ts_ns":%d,"sample":{"gbps":12.5,"p50_us":40.25,"p99_us":310.5,"requests":%d,"descs":%d,"dropped_events":0}}`+"\n",
		seq, ts, seq, 7*seq)
}

// TestPlayRecording: a recording plays in file order, in frames of at most
// 50 ms of recorded time (a step back before the frame's first event
// starts a new frame), pausing
// between frames as recorded divided by the speed; a bad line stops it
// with its number.
func TestPlayRecording(t *testing.T) {
	const ms = int64(time.Millisecond)
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []struct {
		name   string
		ts     []int64 // each event's offset from t0
		speed  float64
		frames string // the frames' sequence numbers
		pause  time.Duration
		err    string
	}{
		{"events within 50 ms share a frame", []int64{0, 10 * ms, 49 * ms, 50 * ms, 60 * ms}, 0, "[1 2 3] [4 5]", 0, ""},
		{"a step back before the frame's first event starts a frame", []int64{20 * ms, 30 * ms, 10 * ms, 15 * ms}, 0, "[1 2] [3 4]", 0, ""},
		{"a pause of 1 s at 10x waits 100 ms", []int64{0, 1000 * ms}, 10, "[1] [2]", 100 * time.Millisecond, ""},
		{"a bad line stops the replay with its number", nil, 0, "", 0, "line 2: not a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "rec.jsonl")
			var b strings.Builder
			for i, off := range c.ts {
				b.WriteString(sampleLine(uint64(i+1), t0+off))
			}
			if c.ts == nil {
				b.WriteString(sampleLine(1, t0) + "[]\n")
			}
			os.WriteFile(name, []byte(b.String()), 0o644)
			var frames []string
			start := time.Now()
			err := playRecording(context.Background(), name, c.speed, func(f []event.Event) {
				seqs := make([]uint64, len(f))
				for i, e := range f {
					seqs[i] = e.Seq
				}
				frames = append(frames, fmt.Sprint(seqs))
			})
			took := time.Since(start)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("%v, want %q", err, c.err)
				}
				if _, err := checkRecording(name); err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("checking the recording: %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(frames, " "); got != c.frames {
				t.Errorf("frames %s, want %s", got, c.frames)
			}
			if took < c.pause || took > c.pause+time.Second {
				t.Errorf("played in %v, want the recorded pause of %v", took, c.pause)
			}
		})
	}
}

// TestReplayStreamsALargeRecording: kvscope replay checks and plays a
// recording far larger than what it may hold (a generated 400,000-event,
// 77 MB file, whose events held whole would take several times 16 MiB)
// with the heap growing by at most 16 MiB, every event played once, in
// order, 50 a frame (one a millisecond). It runs in a process of its own:
// the heap is the process's, and goroutines other tests leave behind (a
// browser's subscriber draining, a hub's lease loop) would count.
func TestReplayStreamsALargeRecording(t *testing.T) {
	if os.Getenv("KVSCOPE_REPLAY_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestReplayStreamsALargeRecording$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "KVSCOPE_REPLAY_CHILD=1")
		out, err := cmd.CombinedOutput()
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(l, "replay_stream_test.go") {
				t.Log(strings.TrimSpace(l))
			}
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestReplayStreamsALargeRecording") {
			t.Fatalf("the replay in its own process: %v\n%s", err, out)
		}
		return
	}
	const n = 400_000
	name := filepath.Join(t.TempDir(), "large.jsonl")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	t0 := time.Now().UnixNano()
	for i := range n {
		w.WriteString(sampleLine(uint64(i+1), t0+int64(i)*int64(time.Millisecond)))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fi, _ := os.Stat(name)
	start := time.Now()
	var played, frames, count int
	peak := memtest.PeakGrowth(time.Millisecond, func() {
		if count, err = checkRecording(name); err != nil || count != n {
			return
		}
		next := uint64(1)
		err = playRecording(context.Background(), name, 0, func(fr []event.Event) {
			frames++
			for _, e := range fr {
				if e.Seq != next {
					t.Fatalf("event %d played where %d was due", e.Seq, next)
				}
				next++
			}
			played += len(fr)
		})
	})
	if count != n {
		t.Fatalf("checking: %d events, %v", count, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events (%.0f MB) checked and played in %d frames in %v; heap grew by at most %.1f MiB", played, float64(fi.Size())/1e6, frames,
		time.Since(start).Round(time.Millisecond), float64(peak)/(1<<20))
	if played != n || frames != n/50 {
		t.Errorf("%d events in %d frames, want %d in %d", played, frames, n, n/50)
	}
	if peak > 16<<20 {
		t.Errorf("the heap grew by %d MiB replaying the file, want at most 16", peak>>20)
	}
}
