package xfer

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestCrew: every worker runs the work once, whether a helper finds it
// while polling or after it has gone to sleep on the channel; a dismissed
// crew's helpers leave without it; a helper's panic or error comes back
// from run.
func TestCrew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		helpers int
		wait    time.Duration // before the work is given
	}{
		{"none", 0, 0},
		{"polling", 3, 0},
		{"asleep", 3, 4 * crewWait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCrew(tc.helpers)
			time.Sleep(tc.wait)
			ran := make([]atomic.Int32, tc.helpers+1)
			if err := c.run(func(w int) error { ran[w].Add(1); return nil }); err != nil {
				t.Fatal(err)
			}
			for w := range ran {
				if n := ran[w].Load(); n != 1 {
					t.Errorf("worker %d ran %d times, want once", w, n)
				}
			}
		})
	}
	t.Run("dismissed", func(t *testing.T) {
		c := startCrew(2)
		c.dismiss()
		c.wg.Wait() // every helper has left
		var ran atomic.Int32
		if err := c.run(func(int) error { ran.Add(1); return nil }); err != nil || ran.Load() != 1 {
			t.Errorf("run after dismiss: %v, %d workers ran, want the caller alone", err, ran.Load())
		}
	})
	t.Run("faults", func(t *testing.T) {
		c := startCrew(1)
		err := c.run(func(w int) error {
			if w == 1 {
				var s []int
				_ = s[5]
			}
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "index out of range") {
			t.Errorf("a helper's panic came back as %v", err)
		}
		c = startCrew(2)
		bad := errors.New("stopped")
		if err := c.run(func(w int) error {
			if w == 2 {
				return bad
			}
			return nil
		}); !errors.Is(err, bad) {
			t.Errorf("a helper's error came back as %v", err)
		}
	})
}
