//go:build linux

package watch_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
)

// TestSkippedFiles: a symlink, a FIFO, a directory and a socket in the
// telemetry directory are each reported once, naming the file and what
// it is, however often the directory is listed; a ring beside them is read.
func TestSkippedFiles(t *testing.T) {
	dir := t.TempDir()
	good := newRingWriter(t, dir, "good", 4, 16)
	if err := os.Symlink(good.path, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"link": "a symbolic link", "fifo": "a FIFO", "sub": "a directory"}
	c := watchDir(t, dir)
	c.wait(t, "three skipped files", func(o []watch.Observation) bool { return count(o, "skipped") >= 3 })
	time.Sleep(50 * time.Millisecond) // ten more listings (Rescan 5 ms)
	good.push(t, nixlXfer("rx", 5, 1, 2)...)
	obs := c.wait(t, "the ring read", func(o []watch.Observation) bool { return count(o, "transfer") == 1 })
	seen := map[string]int{}
	for _, o := range obs {
		if o.Kind != "skipped" {
			continue
		}
		seen[o.Agent]++
		if w, ok := want[o.Agent]; !ok || !strings.Contains(o.Err.Error(), w) || !strings.Contains(o.Err.Error(), filepath.Join(dir, o.Agent)) {
			t.Errorf("skipped %s: %v; want it to name the file and say %q", o.Agent, o.Err, want[o.Agent])
		}
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("%s reported %d times, want once", name, seen[name])
		}
	}
}

// TestMaxRings: past MaxRings, ring files are not opened but reported
// once each; a ring that closes makes room for one of them.
func TestMaxRings(t *testing.T) {
	for _, c := range []struct {
		rings, max int
	}{{10, 3}, {5, 5}, {1, 1}} {
		t.Run(fmt.Sprintf("%d rings, at most %d", c.rings, c.max), func(t *testing.T) {
			dir := t.TempDir()
			var writers []*ringWriter
			for i := range c.rings {
				writers = append(writers, newRingWriter(t, dir, fmt.Sprintf("agent-%02d", i), 4, 16))
			}
			col := runWatcher(t, &watch.Watcher{Dir: dir, Interval: 2 * time.Millisecond, Rescan: 5 * time.Millisecond, MaxRings: c.max})
			obs := col.wait(t, "the rings opened and the rest skipped", func(o []watch.Observation) bool {
				return count(o, "opened") == c.max && count(o, "skipped") == c.rings-c.max
			})
			time.Sleep(50 * time.Millisecond)
			if n := count(col.snapshot(), "skipped"); n != c.rings-c.max {
				t.Errorf("%d skipped reports after ten listings, want %d (once each)", n, c.rings-c.max)
			}
			for _, o := range obs {
				if o.Kind == "skipped" && !strings.Contains(o.Err.Error(), fmt.Sprintf("%d rings are open", c.max)) {
					t.Errorf("skipped %s: %v", o.Agent, o.Err)
				}
			}
			if c.rings == c.max {
				return
			}
			var open string
			for _, o := range obs {
				if o.Kind == "opened" {
					open = o.Agent
					break
				}
			}
			os.Remove(filepath.Join(dir, open))
			col.wait(t, "a skipped ring opened in the room", func(o []watch.Observation) bool { return count(o, "opened") == c.max+1 })
		})
	}
}

// TestManyJunkFiles: 2,000 files that are no rings are each refused
// once, and cost no open ring.
func TestManyJunkFiles(t *testing.T) {
	dir := t.TempDir()
	const junk = 2000
	for i := range junk {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("junk-%04d", i)), []byte("not a ring"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := newRingWriter(t, dir, "good", 4, 16)
	c := watchDir(t, dir)
	c.wait(t, "every junk file refused", func(o []watch.Observation) bool { return count(o, "refused") == junk })
	time.Sleep(50 * time.Millisecond)
	good.push(t, nixlXfer("rx", 5, 1, 2)...)
	obs := c.wait(t, "the ring read", func(o []watch.Observation) bool { return count(o, "transfer") == 1 })
	if n := count(obs, "refused"); n != junk {
		t.Errorf("%d refusals of %d junk files after more listings, want one each", n, junk)
	}
	if n := count(obs, "opened"); n != 1 {
		t.Errorf("%d rings opened, want 1", n)
	}
}
