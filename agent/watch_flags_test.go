package main

import (
	"context"
	"strings"
	"testing"
)

// TestWatchLimitFlags: the watcher's bounds on its inputs refuse values
// outside their ranges, naming the flag and the value, before it starts.
func TestWatchLimitFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-agents", "0"}, "--max-agents 0: must be between 1 and 65536"},
		{[]string{"--max-agents", "70000"}, "--max-agents 70000"},
		{[]string{"--max-series", "0"}, "--max-series 0: must be between 1 and 10000000"},
		{[]string{"--max-series", "20000000"}, "--max-series 20000000"},
		{[]string{"--side-channel-max-bytes", "10"}, "--side-channel-max-bytes 10: must be between 1024 and 1073741824"},
		{[]string{"--side-channel-max-bytes", "4294967296"}, "--side-channel-max-bytes 4294967296"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			err := runWatch(context.Background(), append([]string{"--vllm-metrics", "http://127.0.0.1:1/metrics"}, c.args...), t.Logf)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v, want an error saying %q", err, c.want)
			}
		})
	}
}
