package watch

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
)

// ringWriter writes a ring file as NIXL's cyclic_buffer does (the layout
// in the package comment): a test's stand-in for an agent of any version.
type ringWriter struct {
	path    string
	version int32
	cap     uint64
}

func newRingWriter(t *testing.T, dir, name string, version int32, capacity uint64) *ringWriter {
	t.Helper()
	w := &ringWriter{path: filepath.Join(dir, name), version: version, cap: capacity}
	n := eventBytes(version)
	if n == 0 {
		n = 16
	}
	b := make([]byte, HeaderBytes+int(capacity)*n)
	le := binary.NativeEndian
	le.PutUint32(b[16:], uint32(version))
	le.PutUint32(b[20:], uint32(version))
	le.PutUint64(b[24:], capacity)
	le.PutUint64(b[32:], capacity-1)
	if err := os.WriteFile(w.path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// push appends events as the writer does, dropping them when the ring is
// full; it returns how many went in.
func (w *ringWriter) push(t *testing.T, events ...Raw) int {
	t.Helper()
	f, err := os.OpenFile(w.path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, HeaderBytes)
	f.ReadAt(head, 0)
	le := binary.NativeEndian
	wp, rp := le.Uint64(head[0:]), le.Uint64(head[8:])
	n := eventBytes(w.version)
	in := 0
	for _, e := range events {
		next := (wp + 1) & (w.cap - 1)
		if next == rp {
			break // full: the new event is dropped
		}
		slot := make([]byte, n)
		switch w.version {
		case 1:
			le.PutUint64(slot[0:], e.TimestampUS)
			copy(slot[12:44], e.Type)
			le.PutUint64(slot[48:], e.Value)
		case 2:
			le.PutUint32(slot[4:], typeOf(t, e.Type))
			le.PutUint64(slot[8:], e.Value)
		default:
			le.PutUint32(slot[0:], typeOf(t, e.Type))
			le.PutUint64(slot[8:], e.Value)
		}
		f.WriteAt(slot, int64(HeaderBytes+int(wp)*n))
		wp = next
		in++
	}
	le.PutUint64(head[0:], wp)
	f.WriteAt(head[0:8], 0)
	return in
}

func typeOf(t *testing.T, name string) uint32 {
	for i, n := range typeNames {
		if n == name {
			return uint32(i)
		}
	}
	t.Fatalf("no event type %s", name)
	return 0
}

// nixlXfer is one request's four events, in NIXL v1.4's order.
func nixlXfer(dir string, bytes, post, time uint64) []Raw {
	return []Raw{{Type: "agent_xfer_post_time", Value: post}, {Type: "agent_xfer_time", Value: time},
		{Type: "agent_" + dir + "_bytes", Value: bytes}, {Type: "agent_" + dir + "_requests_num", Value: 1}}
}

// collector gathers a Watcher's observations.
type collector struct {
	mu  sync.Mutex
	obs []Observation
}

func (c *collector) emit(o Observation) {
	c.mu.Lock()
	c.obs = append(c.obs, o)
	c.mu.Unlock()
}

func (c *collector) wait(t *testing.T, what string, cond func([]Observation) bool) []Observation {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		obs := append([]Observation(nil), c.obs...)
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

func count(obs []Observation, kind string) int {
	n := 0
	for _, o := range obs {
		if o.Kind == kind {
			n++
		}
	}
	return n
}

func watch(t *testing.T, dir string) *collector {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("rings are read with mmap on Linux")
	}
	c := &collector{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := &Watcher{Dir: dir, Interval: 2 * time.Millisecond, Rescan: 5 * time.Millisecond}
	go func() { done <- w.Run(ctx, c.emit) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return c
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
			events := []Raw{{Type: "agent_memory_registered", Value: 1 << 20}}
			events = append(events, nixlXfer("rx", 4096, 7, 120)...)
			events = append(events, nixlXfer("tx", 8192, 9, 300)...)
			events = append(events, Raw{Type: "agent_err_remote_disconnect", Value: 1})
			if v == 4 {
				events = append(events, Raw{Type: "agent_telemetry_events_dropped", Value: 3})
			}
			for i := range events {
				events[i].TimestampUS = uint64(1_700_000_000_000_000 + i)
			}
			w.push(t, events...)
			c := watch(t, dir)
			obs := c.wait(t, "two transfers and an error", func(o []Observation) bool { return count(o, "transfer") == 2 && count(o, "error") == 1 })
			var got []Transfer
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
			want := []Transfer{{"rx", 4096, 7, 120}, {"tx", 8192, 9, 300}}
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("transfers %+v, want %+v", got, want)
			}
			if v == 4 {
				c.wait(t, "the dropped count", func(o []Observation) bool { return count(o, "dropped") == 1 })
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
	c := watch(t, dir)
	total := 0
	for i := 0; i < 10; i++ { // 40 events through 16 slots
		w.push(t, nixlXfer("rx", uint64(1000+i), 1, 2)...)
		total++
		c.wait(t, "the transfer", func(o []Observation) bool { return count(o, "transfer") == total })
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
	var all []Raw
	for i := 0; i < 8; i++ { // 32 events into 15 usable slots
		all = append(all, nixlXfer("rx", uint64(i), 1, 2)...)
	}
	if in := fw.push(t, all...); in != 15 {
		t.Fatalf("the full ring took %d events, want 15", in)
	}
	fc := watch(t, full)
	// 15 events: three whole transfers and the first three events of a
	// fourth, whose request count NIXL dropped.
	fc.wait(t, "three transfers", func(o []Observation) bool { return count(o, "transfer") == 3 })
	if in := fw.push(t, nixlXfer("rx", 99, 1, 2)...); in != 4 {
		t.Fatalf("after the read, the ring took %d events, want 4", in)
	}
	// The half transfer's orphaned events are replaced by the new one's.
	fc.wait(t, "the transfer after the read", func(o []Observation) bool {
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
	os.Truncate(trunc.path, HeaderBytes+10)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o644)
	gone := newRingWriter(t, dir, "gone", 3, 16)
	c := watch(t, dir)
	obs := c.wait(t, "three refusals and two rings", func(o []Observation) bool { return count(o, "refused") == 3 && count(o, "opened") == 2 })
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
	c.wait(t, "the removed ring closed", func(o []Observation) bool {
		for _, x := range o {
			if x.Kind == "closed" && x.Agent == "gone" {
				return true
			}
		}
		return false
	})
	good.push(t, nixlXfer("rx", 5, 1, 2)...)
	c.wait(t, "the good ring read on", func(o []Observation) bool { return count(o, "transfer") == 1 })
	// A second watcher of the same directory is refused.
	err := (&Watcher{Dir: dir}).Run(context.Background(), func(Observation) {})
	if err == nil || !strings.Contains(err.Error(), "another kvscope watcher") {
		t.Errorf("a second watcher: %v", err)
	}
}

// FuzzDecode: any header and event bytes are refused or decoded to a type
// NIXL defines, never a panic or a guess.
func FuzzDecode(f *testing.F) {
	h := make([]byte, HeaderBytes)
	binary.NativeEndian.PutUint32(h[16:], 4)
	binary.NativeEndian.PutUint32(h[20:], 4)
	binary.NativeEndian.PutUint64(h[24:], 16)
	binary.NativeEndian.PutUint64(h[32:], 15)
	f.Add(h, int64(HeaderBytes+16*16), int32(4), make([]byte, 56))
	f.Fuzz(func(t *testing.T, head []byte, size int64, version int32, ev []byte) {
		if hd, err := ParseHeader("f", head, size); err == nil {
			if hd.Capacity == 0 || hd.WritePos >= hd.Capacity || eventBytes(hd.Version) == 0 {
				t.Fatalf("accepted %+v", hd)
			}
		}
		if r, err := DecodeEvent(version, ev); err == nil {
			known := false
			for _, n := range typeNames {
				known = known || n == r.Type
			}
			if !known && version != 1 {
				t.Fatalf("decoded an unknown type %q", r.Type)
			}
		}
	})
}
