package main

import (
	"flag"
	"maps"
	"runtime"
	"strings"
	"testing"
	"time"

	kvapp "github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/server/internal/hub"
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

// TestAppHubEnv: kvscope serve tells the app the Hub its resolver asks
// (HF_ENDPOINT, default the Hub) and HF_HUB_OFFLINE; without a resolver
// (replay, the tests) it tells nothing.
func TestAppHubEnv(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"the default Hub", map[string]string{}, map[string]string{kvapp.HubEndpointEnv: "https://huggingface.co"}},
		{"HF_ENDPOINT", map[string]string{"HF_ENDPOINT": "http://mirror.example/"}, map[string]string{kvapp.HubEndpointEnv: "http://mirror.example"}},
		{"HF_HUB_OFFLINE", map[string]string{"HF_HUB_OFFLINE": "1"}, map[string]string{kvapp.HubEndpointEnv: "https://huggingface.co", kvapp.HubOfflineEnv: "1"}},
		{"no resolver", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r *hub.Resolver
			if tt.env != nil {
				r = &hub.Resolver{Getenv: func(k string) string { return tt.env[k] }}
			}
			if got := appHubEnv(r); !maps.Equal(got, tt.want) {
				t.Errorf("appHubEnv = %v, want %v", got, tt.want)
			}
		})
	}
}
