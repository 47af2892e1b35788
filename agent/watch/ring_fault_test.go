//go:build linux

package watch_test

import (
	"os"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/agent/watch"
)

// TestDrainTruncatedUnderTheMapping: a ring file cut short while it is
// mapped (reading a page past its end is SIGBUS) is an error naming the
// file, not a crash, however much of it is left.
func TestDrainTruncatedUnderTheMapping(t *testing.T) {
	const capacity = 4096 // 16-byte slots: the events live on pages 0 to 16
	for _, c := range []struct {
		name string
		size int64 // bytes left of the file
	}{
		{"to nothing", 0},
		{"to its header", watch.HeaderBytes},
		{"to one page", 4096},
		{"to half", (watch.HeaderBytes + capacity*16) / 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := newRingWriter(t, dir, "agent-cut", 4, capacity)
			// Read 1,000 transfers (4,000 slots), so read_pos is on the
			// last page, then put one more in.
			for range 1000 {
				w.push(t, nixlXfer("rx", 4096, 7, 120)...)
			}
			r, err := watch.OpenRing(w.path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if ev, _, err := r.Drain(1 << 20); err != nil || len(ev) != 4000 {
				t.Fatalf("first drain: %d events, %v", len(ev), err)
			}
			for range 10 {
				w.push(t, nixlXfer("rx", 4096, 7, 120)...)
			}
			if err := os.Truncate(w.path, c.size); err != nil {
				t.Fatal(err)
			}
			ev, bad, err := r.Drain(1 << 20)
			if err == nil {
				t.Fatalf("drained %d events (%d bad) of a file truncated to %d bytes", len(ev), bad, c.size)
			}
			if !strings.Contains(err.Error(), w.path) || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("err %q: want it to name %s and say truncated", err, w.path)
			}
			if _, _, err := r.Drain(1 << 20); err == nil {
				t.Errorf("a second drain of the truncated ring read it")
			}
		})
	}
}

// TestWatcherCarriesOnPastATruncatedRing: one ring truncated under the
// mapping is closed with the reason; the other is read on.
func TestWatcherCarriesOnPastATruncatedRing(t *testing.T) {
	dir := t.TempDir()
	cut := newRingWriter(t, dir, "agent-cut", 4, 4096)
	ok := newRingWriter(t, dir, "agent-ok", 4, 4096)
	for range 300 {
		cut.push(t, nixlXfer("rx", 4096, 7, 120)...)
	}
	c := watchDir(t, dir)
	c.wait(t, "both rings and 300 transfers", func(o []watch.Observation) bool { return count(o, "opened") == 2 && count(o, "transfer") == 300 })
	cut.push(t, nixlXfer("rx", 4096, 7, 120)...)
	if err := os.Truncate(cut.path, watch.HeaderBytes); err != nil {
		t.Fatal(err)
	}
	obs := c.wait(t, "the cut ring closed", func(o []watch.Observation) bool { return count(o, "closed")+count(o, "refused") >= 1 })
	for _, o := range obs {
		if (o.Kind == "closed" || o.Kind == "refused") && o.Agent != "agent-cut" {
			t.Errorf("%s %s: %v", o.Kind, o.Agent, o.Err)
		}
	}
	ok.push(t, nixlXfer("tx", 8192, 9, 300)...)
	c.wait(t, "a transfer of the other ring", func(o []watch.Observation) bool {
		for _, x := range o {
			if x.Kind == "transfer" && x.Agent == "agent-ok" {
				return true
			}
		}
		return false
	})
}
