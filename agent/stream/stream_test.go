package stream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// TestFrameFitsTheServerLimit: a batch too large for one frame is cut to
// what fits (three events of 300 KiB in a 1 MiB frame, a fourth would
// pass it), and an event too large for any frame is dropped and counted
// instead of being resent forever.
func TestFrameFitsTheServerLimit(t *testing.T) {
	s := &Streamer{Agent: "a"}
	big := strings.Repeat("x", 300<<10)
	for range 8 {
		s.Publish(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_BACKEND", Message: big}})
	}
	s.Publish(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_BACKEND", Message: strings.Repeat("y", 2<<20)}})
	batch := s.pending(0)
	frame, err := s.frame(&batch)
	if err != nil || frame == nil || len(frame) > event.MaxFrameBytes || len(batch) != 3 {
		t.Fatalf("frame of %d bytes with %d events (%v); want at most %d bytes, 3 events", len(frame), len(batch), err, event.MaxFrameBytes)
	}
	if next, _ := event.Encode(s.pending(3)[0]); len(frame)+1+len(next) <= event.MaxFrameBytes {
		t.Fatalf("a frame of %d bytes left out an event of %d that fits", len(frame), len(next))
	}
	huge := s.pending(8)
	if frame, err := s.frame(&huge); frame != nil || err != nil || s.Dropped() != 1 {
		t.Fatalf("an oversized event: frame %d bytes, err %v, dropped %d; want nil and 1 dropped", len(frame), err, s.Dropped())
	}
	if n := len(s.pending(0)); n != 8 {
		t.Fatalf("%d events queued after the drop, want 8", n)
	}
}

// TestQueueDropsOldest: publishing never blocks; a full queue drops its
// oldest events and counts them.
func TestQueueDropsOldest(t *testing.T) {
	s := &Streamer{Agent: "a", QueueSize: 10}
	for range 25 {
		s.Publish(event.Event{Kind: event.Sample, Sample: &event.SampleData{}})
	}
	q := s.pending(0)
	if s.Dropped() != 15 || len(q) != 10 || q[0].Seq != 16 || q[9].Seq != 25 {
		t.Fatalf("dropped %d, queue %d from seq %d; want 15 dropped and seqs 16..25", s.Dropped(), len(q), q[0].Seq)
	}
}

// TestRunStopsOnARefusal: a server that refuses the agent for good (a bad
// name: 400, a wrong token: 401, 403, 404) stops Run at once with the
// server's reason (its response body); one that may let it in later (408,
// 429, 503) is tried again.
func TestRunStopsOnARefusal(t *testing.T) {
	for _, tc := range []struct {
		status    int
		reason    string
		permanent bool
		want      string
	}{
		{400, "/ws/agent?agent=NAME: agent name \"a\\nb\": character '\\n' at byte 1", true, `400 Bad Request: /ws/agent?agent=NAME: agent name "a\nb": character '\n' at byte 1 (check --name)`},
		{401, "a valid bearer token is required", true, "401 Unauthorized: a valid bearer token is required (check --token"},
		{403, "forbidden\nkvscope: forged line", true, "403 Forbidden: forbidden kvscope: forged line"},
		{404, "", true, "404 Not Found"},
		{408, "slow", false, ""},
		{429, "busy", false, ""},
		{503, "restarting", false, ""},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			var tries atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tries.Add(1)
				http.Error(w, tc.reason, tc.status)
			}))
			defer srv.Close()
			var refused atomic.Pointer[RefusedError]
			s := &Streamer{Agent: "gpu1/agent", URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws/agent", Token: "t",
				OnRefused: func(re *RefusedError) { refused.Store(re) }}
			// A refusal that may let it in later is tried until the
			// context ends; a permanent one stops Run long before (its
			// context is a hang's ceiling).
			limit := 500 * time.Millisecond
			if tc.permanent {
				limit = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			start := time.Now()
			err := s.Run(ctx)
			if !tc.permanent {
				if err != nil || tries.Load() < 2 {
					t.Fatalf("Run: %v after %d tries, want tries until the context ends", err, tries.Load())
				}
				return
			}
			var re *RefusedError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) || refused.Load() != re {
				t.Fatalf("Run: %v, want a refusal containing %q, passed to OnRefused", err, tc.want)
			}
			if tries.Load() != 1 || time.Since(start) > 3*time.Second {
				t.Fatalf("%d tries in %v, want one", tries.Load(), time.Since(start))
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("the reason spans lines: %q", err)
			}
			if errors.Is(err, ErrUnauthorized) != (tc.status == 401) {
				t.Fatalf("errors.Is(%v, ErrUnauthorized) = %v", err, !(tc.status == 401))
			}
		})
	}
}
