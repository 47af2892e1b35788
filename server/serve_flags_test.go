package main

import (
	"flag"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestLimitFlags: kvscope serve's limits are flags, checked: --max-queue
// sets how many heavy requests may wait (0: none), within 0 to 4,096;
// --max-running how many compute at once (default the cores but one);
// --tune-deadline is the search's bound, 40 s by default, above 0 and at
// most 45 s (under the server's 60 s write timeout).
func TestLimitFlags(t *testing.T) {
	cores := max(1, runtime.NumCPU()-1)
	const deadline = 40 * time.Second
	for _, tc := range []struct {
		args           []string
		queue, running int
		tuneDeadline   time.Duration
		err            string
	}{
		{nil, 64, cores, deadline, ""},
		{[]string{"--max-queue", "0"}, 0, cores, deadline, ""},
		{[]string{"--max-queue", "16"}, 16, cores, deadline, ""},
		{[]string{"--max-queue", "4096", "--max-running", "3"}, 4096, 3, deadline, ""},
		{[]string{"--max-queue", "-1"}, 0, 0, 0, "--max-queue -1: must be between 0 and 4096"},
		{[]string{"--max-queue", "100000"}, 0, 0, 0, "--max-queue 100000: must be between 0 and 4096"},
		{[]string{"--max-running", "0"}, 0, 0, 0, "--max-running 0: must be between 1 and 1024"},
		{[]string{"--max-running", "5000"}, 0, 0, 0, "--max-running 5000: must be between 1 and 1024"},
		{[]string{"--queue-wait", "-1s"}, 0, 0, 0, "--queue-wait -1s"},
		{[]string{"--tune-deadline", "5s"}, 64, cores, 5 * time.Second, ""},
		{[]string{"--tune-deadline", "45s"}, 64, cores, 45 * time.Second, ""},
		{[]string{"--tune-deadline", "0s"}, 0, 0, 0, "--tune-deadline 0s: must be above 0 and at most 45s"},
		{[]string{"--tune-deadline", "50s"}, 0, 0, 0, "--tune-deadline 50s: must be above 0 and at most 45s"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			lim := limitFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			l, err := lim()
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case l.MaxQueue != tc.queue || l.MaxRunning != tc.running || l.TuneDeadline != tc.tuneDeadline:
				t.Fatalf("MaxQueue %d, MaxRunning %d, TuneDeadline %v; want %d, %d, %v", l.MaxQueue, l.MaxRunning, l.TuneDeadline, tc.queue, tc.running, tc.tuneDeadline)
			}
		})
	}
}

// TestBudgetFlags: the agents' budget takes rates and sizes, 0 for no
// bound, and names the flag and value it refuses.
func TestBudgetFlags(t *testing.T) {
	for _, c := range []struct {
		args          []string
		events, bytes float64
		err           string
	}{
		{nil, 5000, 4 << 20, ""},
		{[]string{"--agent-events-per-sec", "0", "--agent-bytes-per-sec", "0"}, 0, 0, ""},
		{[]string{"--agent-bytes-per-sec", "1.5MiB"}, 5000, 1.5 * (1 << 20), ""},
		{[]string{"--agent-events-per-sec", "-1"}, 0, 0, "--agent-events-per-sec -1"},
		{[]string{"--agent-bytes-per-sec", "lots"}, 0, 0, `--agent-bytes-per-sec "lots"`},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		read := budgetFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		b, err := read()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: %v, want an error naming %s", c.args, err, c.err)
			}
			continue
		}
		if err != nil || b.EventsPerSec != c.events || b.BytesPerSec != c.bytes {
			t.Errorf("%v: %+v, %v; want %g events/s and %g bytes/s", c.args, b, err, c.events, c.bytes)
		}
	}
}
