package watch_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
)

// ringWriter is a watchtest.Writer failing the test on an error.
type ringWriter struct {
	*watchtest.Writer
	path string
}

func newRingWriter(t *testing.T, dir, name string, version int32, capacity uint64) *ringWriter {
	t.Helper()
	w, err := watchtest.NewWriter(dir, name, version, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return &ringWriter{w, w.Path}
}

func (w *ringWriter) push(t *testing.T, events ...watch.Raw) int {
	t.Helper()
	n, err := w.Push(events...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var nixlXfer = watchtest.Transfer

// collector gathers a Watcher's observations.
type collector struct {
	mu  sync.Mutex
	obs []watch.Observation
}

func (c *collector) emit(o watch.Observation) {
	c.mu.Lock()
	c.obs = append(c.obs, o)
	c.mu.Unlock()
}

func (c *collector) wait(t *testing.T, what string, cond func([]watch.Observation) bool) []watch.Observation {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		obs := append([]watch.Observation(nil), c.obs...)
		c.mu.Unlock()
		if cond(obs) {
			return obs
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Fatalf("no %s in %d observations: %+v", what, len(c.obs), c.obs)
	return nil
}

func count(obs []watch.Observation, kind string) int {
	n := 0
	for _, o := range obs {
		if o.Kind == kind {
			n++
		}
	}
	return n
}

func watchDir(t *testing.T, dir string) *collector {
	t.Helper()
	return runWatcher(t, &watch.Watcher{Dir: dir, Interval: 2 * time.Millisecond, Rescan: 5 * time.Millisecond})
}

// runWatcher runs w until the test ends, collecting its observations.
func runWatcher(t *testing.T, w *watch.Watcher) *collector {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("rings are read with mmap on Linux")
	}
	c := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, c.emit) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return c
}

// snapshot is the observations so far.
func (c *collector) snapshot() []watch.Observation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]watch.Observation(nil), c.obs...)
}

// TestEveryVersion: rings of telemetry versions 1 to 4, written from the
// layout, give the same observations: transfers from their four events,
// registrations, errors with NIXL's status names, and (version 4) events
// NIXL dropped.
func TestEveryVersion(t *testing.T) {
	for _, v := range []int32{1, 2, 3, 4} {
		t.Run(string(rune('0'+v)), func(t *testing.T) {
			dir := t.TempDir()
			w := newRingWriter(t, dir, "agent-v"+string(rune('0'+v)), v, 64)
			events := []watch.Raw{{Type: "agent_memory_registered", Value: 1 << 20}}
			events = append(events, nixlXfer("rx", 4096, 7, 120)...)
			events = append(events, nixlXfer("tx", 8192, 9, 300)...)
			events = append(events, watch.Raw{Type: "agent_err_remote_disconnect", Value: 1})
			if v == 4 {
				events = append(events, watch.Raw{Type: "agent_telemetry_events_dropped", Value: 3})
			}
			for i := range events {
				events[i].TimestampUS = uint64(1_700_000_000_000_000 + i)
			}
			w.push(t, events...)
			c := watchDir(t, dir)
			obs := c.wait(t, "two transfers and an error", func(o []watch.Observation) bool { return count(o, "transfer") == 2 && count(o, "error") == 1 })
			var got []watch.Transfer
			for _, o := range obs {
				switch o.Kind {
				case "opened":
					if o.Version != v {
						t.Errorf("opened as version %d", o.Version)
					}
				case "transfer":
					got = append(got, *o.Transfer)
				case "error":
					if o.Status != "ERR_REMOTE_DISCONNECT" {
						t.Errorf("error status %q", o.Status)
					}
				case "registered":
					if o.Bytes != 1<<20 {
						t.Errorf("registered %d bytes", o.Bytes)
					}
				}
			}
			want := []watch.Transfer{{"rx", 4096, 7, 120}, {"tx", 8192, 9, 300}}
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("transfers %+v, want %+v", got, want)
			}
			if v == 4 {
				c.wait(t, "the dropped count", func(o []watch.Observation) bool { return count(o, "dropped") == 1 })
			}
		})
	}
}

// TestWrappedAndFullRings: a ring read while it wraps gives every event
// once, in order; a ring nobody read until it filled keeps its oldest
// capacity-1 events (NIXL drops the new ones, uncounted), and the reader
// then frees it so new events arrive again.
func TestWrappedAndFullRings(t *testing.T) {
	dir := t.TempDir()
	w := newRingWriter(t, dir, "wrapping", 4, 16)
	c := watchDir(t, dir)
	total := 0
	for i := 0; i < 10; i++ { // 40 events through 16 slots
		w.push(t, nixlXfer("rx", uint64(1000+i), 1, 2)...)
		total++
		c.wait(t, "the transfer", func(o []watch.Observation) bool { return count(o, "transfer") == total })
	}
	c.mu.Lock()
	n := 0
	for _, o := range c.obs {
		if o.Kind == "transfer" {
			if o.Transfer.Bytes != uint64(1000+n) {
				t.Errorf("transfer %d has %d bytes", n, o.Transfer.Bytes)
			}
			n++
		}
	}
	c.mu.Unlock()

	full := t.TempDir()
	fw := newRingWriter(t, full, "full", 4, 16)
	var all []watch.Raw
	for i := 0; i < 8; i++ { // 32 events into 15 usable slots
		all = append(all, nixlXfer("rx", uint64(i), 1, 2)...)
	}
	if in := fw.push(t, all...); in != 15 {
		t.Fatalf("the full ring took %d events, want 15", in)
	}
	fc := watchDir(t, full)
	// 15 events: three whole transfers and the first three events of a
	// fourth, whose request count NIXL dropped.
	fc.wait(t, "three transfers", func(o []watch.Observation) bool { return count(o, "transfer") == 3 })
	if in := fw.push(t, nixlXfer("rx", 99, 1, 2)...); in != 4 {
		t.Fatalf("after the read, the ring took %d events, want 4", in)
	}
	// The half transfer's orphaned events are replaced by the new one's.
	fc.wait(t, "the transfer after the read", func(o []watch.Observation) bool {
		return count(o, "transfer") == 4 && o[len(o)-1].Transfer != nil && o[len(o)-1].Transfer.Bytes == 99
	})
}

// TestRefusedRings: a truncated file, an unknown version, a file that is
// not a ring and one removed while read: each refused or closed with the
// reason named, the file left in place, and the other rings read on.
func TestRefusedRings(t *testing.T) {
	dir := t.TempDir()
	good := newRingWriter(t, dir, "good", 4, 16)
	newRingWriter(t, dir, "future", 9, 16)
	trunc := newRingWriter(t, dir, "truncated", 4, 16)
	os.Truncate(trunc.path, watch.HeaderBytes+10)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644)
	gone := newRingWriter(t, dir, "gone", 3, 16)
	c := watchDir(t, dir)
	obs := c.wait(t, "three refusals and two rings", func(o []watch.Observation) bool { return count(o, "refused") == 3 && count(o, "opened") == 2 })
	reasons := map[string]string{}
	for _, o := range obs {
		if o.Kind == "refused" {
			reasons[o.Agent] = o.Err.Error()
		}
	}
	for name, want := range map[string]string{"future": "telemetry version 9, which this reader does not know", "truncated": "truncated",
		"notes.txt": "shorter than the 40-byte header"} {
		if !strings.Contains(reasons[name], want) {
			t.Errorf("%s refused as %q, want %q", name, reasons[name], want)
		}
	}
	for _, name := range []string{"future", "truncated", "notes.txt"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s was touched: %v", name, err)
		}
	}
	os.Remove(gone.path)
	c.wait(t, "the removed ring closed", func(o []watch.Observation) bool {
		for _, x := range o {
			if x.Kind == "closed" && x.Agent == "gone" {
				return true
			}
		}
		return false
	})
	good.push(t, nixlXfer("rx", 5, 1, 2)...)
	c.wait(t, "the good ring read on", func(o []watch.Observation) bool { return count(o, "transfer") == 1 })
	// A second watcher of the same directory is refused.
	err := (&watch.Watcher{Dir: dir}).Run(context.Background(), func(watch.Observation) {})
	if err == nil || !strings.Contains(err.Error(), "another kvscope watcher") {
		t.Errorf("a second watcher: %v", err)
	}
}

// FuzzDecode: any header and event bytes are refused or decoded to a type
// NIXL defines, never a panic or a guess.
func FuzzDecode(f *testing.F) {
	h := make([]byte, watch.HeaderBytes)
	binary.NativeEndian.PutUint32(h[16:], 4)
	binary.NativeEndian.PutUint32(h[20:], 4)
	binary.NativeEndian.PutUint64(h[24:], 16)
	binary.NativeEndian.PutUint64(h[32:], 15)
	f.Add(h, int64(watch.HeaderBytes+16*16), int32(4), make([]byte, 56))
	f.Fuzz(func(t *testing.T, head []byte, size int64, version int32, ev []byte) {
		if hd, err := watch.ParseHeader("f", head, size); err == nil {
			if hd.Capacity == 0 || hd.WritePos >= hd.Capacity || watch.EventBytes(hd.Version) == 0 {
				t.Fatalf("accepted %+v", hd)
			}
		}
		if r, err := watch.DecodeEvent(version, ev); err == nil {
			if _, known := watch.TypeCode(r.Type); !known && version != 1 {
				t.Fatalf("decoded an unknown type %q", r.Type)
			}
		}
	})
}
