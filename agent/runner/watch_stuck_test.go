package runner

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
	"github.com/kvscope/kvscope/core/event"
)

// TestStuckAfterFromEnv: the default --stuck-after follows
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT where it is a number of seconds.
func TestStuckAfterFromEnv(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{
		{"", DefaultStuckAfter},
		{"480", 480 * time.Second},
		{"2.5", 2500 * time.Millisecond},
		{"-3", DefaultStuckAfter},
		{"soon", DefaultStuckAfter},
	} {
		got := StuckAfterFromEnv(func(string) string { return c.env })
		if got != c.want {
			t.Errorf("VLLM_NIXL_ABORT_REQUEST_TIMEOUT=%q: %s, want %s", c.env, got, c.want)
		}
	}
}

// TestWatchStuckTransfer: a version 1 ring (NIXL writes the post before
// the completion) holds a request posted and not completed: past
// --stuck-after it is one stuck_transfer event with when it was posted;
// when it completes, a cleared one.
func TestWatchStuckTransfer(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	dir := t.TempDir()
	d, err := watchtest.NewWriter(dir, "d-rank0", 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	posted := time.Now()
	d.Push(watch.Raw{Type: "agent_xfer_post_time", Value: 12})
	got := &events{got: map[string][]event.Event{}}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Name: "gpu7", Dir: dir, Interval: 5 * time.Millisecond, StuckAfter: 200 * time.Millisecond,
			sink: func(agent string) Sink { return agentSink{got, agent} }})
	}()
	stuck := func() []*event.StuckData {
		got.mu.Lock()
		defer got.mu.Unlock()
		var out []*event.StuckData
		for _, e := range got.got["gpu7/d-rank0"] {
			if e.Kind == event.StuckTransfer {
				out = append(out, e.Stuck)
			}
		}
		return out
	}
	wait := func(n int) []*event.StuckData {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if s := stuck(); len(s) >= n {
				return s
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%d stuck_transfer events, want %d", len(stuck()), n)
		return nil
	}
	s := wait(1)
	if s[0].Source != "ring" || s[0].Request != "post-1" || s[0].Cleared || s[0].AgeS < 0.2 || s[0].SinceNS < posted.Add(-time.Second).UnixNano() {
		t.Errorf("stuck: %+v", s[0])
	}
	d.Push(watchtest.Transfer("rx", 1<<20, 12, 900)[1:]...) // the completion: transfer time, bytes, request
	s = wait(2)
	if !s[1].Cleared || s[1].Request != "post-1" || s[1].SinceNS != s[0].SinceNS {
		t.Errorf("cleared: %+v", s[1])
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := len(stuck()); n != 2 {
		t.Errorf("%d stuck_transfer events, want 2 (once stuck, once cleared)", n)
	}
}
