package main

import (
	"flag"
	"runtime"
	"strings"
	"testing"
)

// TestLimitFlags: kvscope serve's limits are flags, checked: --max-queue
// sets how many heavy requests may wait (0: none), within 0 to 4,096;
// --max-running how many compute at once (default the cores but one).
func TestLimitFlags(t *testing.T) {
	cores := max(1, runtime.NumCPU()-1)
	for _, tc := range []struct {
		args           []string
		queue, running int
		err            string
	}{
		{nil, 64, cores, ""},
		{[]string{"--max-queue", "0"}, 0, cores, ""},
		{[]string{"--max-queue", "16"}, 16, cores, ""},
		{[]string{"--max-queue", "4096", "--max-running", "3"}, 4096, 3, ""},
		{[]string{"--max-queue", "-1"}, 0, 0, "--max-queue -1: must be between 0 and 4096"},
		{[]string{"--max-queue", "100000"}, 0, 0, "--max-queue 100000: must be between 0 and 4096"},
		{[]string{"--max-running", "0"}, 0, 0, "--max-running 0: must be between 1 and 1024"},
		{[]string{"--max-running", "5000"}, 0, 0, "--max-running 5000: must be between 1 and 1024"},
		{[]string{"--queue-wait", "-1s"}, 0, 0, "--queue-wait -1s"},
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
			case l.MaxQueue != tc.queue || l.MaxRunning != tc.running:
				t.Fatalf("MaxQueue %d, MaxRunning %d; want %d, %d", l.MaxQueue, l.MaxRunning, tc.queue, tc.running)
			}
		})
	}
}
