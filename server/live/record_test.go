package live

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/core/event"
)

// stuckWriter is a recording's file that hangs (a full disk, a stalled
// network file system) until released. Its first Write checks whether
// the hub's lock is free meanwhile, and waits for release.
type stuckWriter struct {
	h        *Hub
	entered  chan struct{}
	release  chan struct{}
	mu       sync.Mutex
	calls    int
	lockFree bool
	buf      bytes.Buffer
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.calls++
	first := w.calls == 1
	w.mu.Unlock()
	if first {
		free := false
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if w.h.mu.TryLock() { // a Write under the hub's lock never gets it
				w.h.mu.Unlock()
				free = true
				break
			}
		}
		w.mu.Lock()
		w.lockFree = free
		w.mu.Unlock()
		w.entered <- struct{}{}
		<-w.release
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func sample(seq uint64) []event.Event {
	return []event.Event{{V: 1, Agent: "a", Seq: seq, TS: int64(seq), Kind: event.Sample, Sample: &event.SampleData{Requests: int(seq)}}}
}

// within runs f and fails the test if it does not return within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// TestRecorderNeverBlocksTheHub: the recording's file hangs. The file is
// written with the hub's lock released; publishing does not wait for it
// and a browser still gets its frames; the recorder's queue (16 events
// here) fills and every event past it is dropped and counted on
// /metrics; once the file takes writes again, it holds exactly the events
// queued, in order, one line each.
func TestRecorderNeverBlocksTheHub(t *testing.T) {
	const depth = 16
	reg := metrics.New()
	w := &stuckWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := New(Options{Metrics: reg, Record: w, RecordQueue: depth})
	w.h = h
	within(t, 5*time.Second, "a publish with the recording's file hanging", func() { h.Publish(sample(1)) })
	select {
	case <-w.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the recording never wrote the first event")
	}
	w.mu.Lock()
	free := w.lockFree
	w.mu.Unlock()
	if !free {
		t.Fatal("the recording's file was written while the hub's lock was held")
	}
	// The file hangs on event 1: 2..17 wait in the queue, 18..40 are dropped.
	within(t, 5*time.Second, "40 publishes with the recording's file hanging", func() {
		for seq := uint64(2); seq <= 40; seq++ {
			h.Publish(sample(seq))
		}
	})
	s, _ := h.subscribe()
	h.Publish(sample(41)) // dropped by the recording too
	select {
	case f := <-s.frames:
		if evs, err := event.DecodeFrame(f.data); err != nil || len(evs) != 1 || evs[0].Seq != 41 {
			t.Fatalf("the browser got %s (%v), want event 41", f.data, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a browser got nothing while the recording's file hung")
	}
	var sb strings.Builder
	reg.Write(&sb)
	if want := fmt.Sprintf("%s %d\n", metricRecordDropped, 41-1-depth); !strings.Contains(sb.String(), want) {
		t.Errorf("metrics: want %q:\n%s", want, sb.String())
	}
	close(w.release)
	h.Close()
	var got []uint64
	sc := bufio.NewScanner(&w.buf)
	for sc.Scan() {
		var e event.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("recording line %q: %v", sc.Text(), err)
		}
		got = append(got, e.Seq)
	}
	want := make([]uint64, 1+depth)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the recording holds %v, want %v", got, want)
	}
	// Events after Close are dropped and counted, never written.
	h.Publish(sample(42))
	sb.Reset()
	reg.Write(&sb)
	if want := fmt.Sprintf("%s %d\n", metricRecordDropped, 41-depth); !strings.Contains(sb.String(), want) {
		t.Errorf("metrics after close: want %q:\n%s", want, sb.String())
	}
}

// failingWriter refuses every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestRecorderCountsFailedWrites: a file that refuses writes is logged
// once until writes work again, and every event it refused is counted.
func TestRecorderCountsFailedWrites(t *testing.T) {
	reg := metrics.New()
	var mu sync.Mutex
	var logged []string
	h := New(Options{Metrics: reg, Record: failingWriter{}, Logf: func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		mu.Unlock()
	}})
	for seq := uint64(1); seq <= 5; seq++ {
		h.Publish(sample(seq))
	}
	h.Close()
	var sb strings.Builder
	reg.Write(&sb)
	if want := metricRecordErrors + " 5\n"; !strings.Contains(sb.String(), want) {
		t.Errorf("metrics: want %q:\n%s", want, sb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || !strings.Contains(logged[0], "disk full") {
		t.Errorf("logged %q, want the failure once", logged)
	}
}

// TestDropsReachMetrics: every counter of what the hub drops is on
// /metrics from the start; a browser that stops reading loses its oldest
// frames, and the events they carried are on /metrics exactly as the gap
// the browser counts in the events it still gets (event.Ring, as the app
// counts them).
func TestDropsReachMetrics(t *testing.T) {
	l := startLive(t, "127.0.0.1:0", "tok", nil)
	defer l.stop()
	text := metricsText(t, l.addr)
	for _, name := range []string{metricSubscriberDroppedFrames, metricSubscriberDroppedEvents, metricRecordDropped, metricRecordErrors, metricCatchUpSkipped} {
		if !strings.Contains(text, name+" 0\n") {
			t.Errorf("/metrics lacks %s at 0 before any drop", name)
		}
	}
	h := l.hub
	slow, _ := h.subscribe()
	h.Publish(sample(1))
	ring := event.NewRing(4096)
	take := func() {
		evs, err := event.DecodeFrame(slow.take(<-slow.frames).data)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			ring.Add(e)
		}
	}
	take() // it read the first, then stopped reading
	const frames = 3000
	for seq := uint64(2); seq <= frames; seq++ {
		h.Publish(sample(seq))
	}
	for len(slow.frames) > 0 {
		take()
	}
	h.mu.Lock()
	dropped := slow.dropped
	h.mu.Unlock()
	want := uint64(frames - 1 - h.subQueue)
	if dropped != want || ring.Gaps != want {
		t.Fatalf("dropped %d frames, the browser counts a gap of %d; want both %d", dropped, ring.Gaps, want)
	}
	text = metricsText(t, l.addr)
	for _, line := range []string{fmt.Sprintf("%s %d\n", metricSubscriberDroppedFrames, want), fmt.Sprintf("%s %d\n", metricSubscriberDroppedEvents, want)} {
		if !strings.Contains(text, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
