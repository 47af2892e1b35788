package xfer

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRunWorkers: every worker runs the work once, the caller as worker
// 0; a worker's panic or error comes back from runWorkers.
func TestRunWorkers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
	}{
		{"the caller alone", 1},
		{"no worker asked: the caller", 0},
		{"four", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := make([]atomic.Int32, max(1, tc.workers))
			if err := runWorkers(tc.workers, func(w int) error { ran[w].Add(1); return nil }); err != nil {
				t.Fatal(err)
			}
			for w := range ran {
				if n := ran[w].Load(); n != 1 {
					t.Errorf("worker %d ran %d times, want once", w, n)
				}
			}
		})
	}
	t.Run("faults", func(t *testing.T) {
		err := runWorkers(2, func(w int) error {
			if w == 1 {
				var s []int
				_ = s[5]
			}
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "index out of range") {
			t.Errorf("a worker's panic came back as %v", err)
		}
		bad := errors.New("stopped")
		if err := runWorkers(3, func(w int) error {
			if w == 2 {
				return bad
			}
			return nil
		}); !errors.Is(err, bad) {
			t.Errorf("a worker's error came back as %v", err)
		}
	})
}
