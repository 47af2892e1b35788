package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// TestStormResume is issue 24's resume storm against a real kvscope serve
// (make soak): an agent stores 300,000 events in the event log, then 50
// and then 200 browsers resume at once from the first stream message.
// Each must end with every event, coming back as often as it is told to
// (1013, more to catch up, or not served in time); none may be given the
// recent history as if it were all. /api/plan is timed and the server's
// RSS sampled throughout; it prints "soak:" lines.
func TestStormResume(t *testing.T) {
	const token = "storm-resume-token-0123"
	base, cmd := soakServe(t, token, os.Stderr, "--agent", "none", "--agent-events-per-sec", "0", "--agent-bytes-per-sec", "0")
	addr := strings.TrimPrefix(base, "http://")
	report := func(format string, args ...any) { fmt.Printf("soak: "+format+"\n", args...) }

	const total = 300_000
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cred, _ := event.IssueCredential(token, "storm/agent")
	st := &stream.Streamer{Agent: "storm/agent", URL: "ws://" + addr + "/ws/agent", Token: cred, QueueSize: total + 1, MaxBatch: 2048, InFlight: 4}
	go st.Run(ctx)
	start := time.Now()
	st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: "storm", GPUs: []event.GPU{}}})
	for i := 2; i <= total; i++ {
		st.Publish(event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: float64(i), P50US: 1, P99US: 2}})
	}
	if err := st.Flush(ctx); err != nil {
		t.Fatalf("%d events not stored: %v", st.Pending(), err)
	}
	report("resume storm: %d events stored in %.1f s, server RSS %d MiB", total, time.Since(start).Seconds(), procRSS(t, cmd.Process.Pid)>>20)

	for _, browsers := range []int{50, 200} {
		var peak atomic.Int64
		var lat []time.Duration
		var latMu sync.Mutex
		sctx, stopSampling := context.WithCancel(ctx)
		var sampled sync.WaitGroup
		sampled.Add(1)
		go func() { // the server's RSS and /api/plan, throughout
			defer sampled.Done()
			for sctx.Err() == nil {
				peak.Store(max(peak.Load(), procRSS(t, cmd.Process.Pid)))
				req, _ := http.NewRequest("POST", base+"/api/plan", strings.NewReader(`{"model":"Qwen/Qwen3-0.6B"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+token)
				t0 := time.Now()
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
					latMu.Lock()
					lat = append(lat, time.Since(t0))
					latMu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		var complete, told, busy, steps, silent, dialErrors atomic.Int64
		var received atomic.Int64
		var wg sync.WaitGroup
		t0 := time.Now()
		for b := range browsers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				have := make([]bool, total+1)
				n, since := 0, uint64(1)
				for attempt := 0; n < total && ctx.Err() == nil; attempt++ {
					r, err := stormResume(ctx, addr, token, since, have, &n)
					if r.dial {
						if dialErrors.Add(1) > 100 {
							t.Errorf("browser %d: %v", b, err)
							return
						}
						time.Sleep(100 * time.Millisecond)
						continue
					}
					steps.Add(1)
					received.Add(int64(r.bytes))
					if r.gone > 0 {
						told.Add(1)
					}
					switch {
					case err == nil && n < total:
						silent.Add(1) // ended live without everything and without a word
						t.Errorf("browser %d: the catch-up ended with %d of %d events and no gap told", b, n, total)
						return
					case strings.Contains(r.reason, "catch-up unavailable"):
						busy.Add(1)
						time.Sleep(time.Duration(50+attempt*20) * time.Millisecond)
					}
					if r.last > 0 {
						since = r.last
					}
				}
				if n == total {
					complete.Add(1)
				}
			}()
		}
		wg.Wait()
		took := time.Since(t0)
		stopSampling()
		sampled.Wait()
		slices.Sort(lat)
		p99 := time.Duration(0)
		if len(lat) > 0 {
			p99 = lat[len(lat)*99/100]
		}
		report("resume storm: %d browsers from stream message 1: %d with all %d events in %.1f s (%d connections, %d told to come back while busy, %d told of a gap, %d silent losses), %.0f MB sent; server RSS peak %d MiB; /api/plan p99 %.1f ms over %d",
			browsers, complete.Load(), total, took.Seconds(), steps.Load(), busy.Load(), told.Load(), silent.Load(), float64(received.Load())/1e6, peak.Load()>>20, float64(p99.Microseconds())/1000, len(lat))
		if complete.Load() != int64(browsers) {
			t.Errorf("%d of %d browsers ended with every event", complete.Load(), browsers)
		}
		if peak.Load() > 2<<30 {
			t.Errorf("server RSS peaked at %d MiB, over 2 GiB", peak.Load()>>20)
		}
	}
	// Idle again: what the server keeps once every browser has caught up.
	time.Sleep(30 * time.Second)
	report("resume storm: server RSS 30 s after the last browser caught up: %d MiB", procRSS(t, cmd.Process.Pid)>>20)
}

// stormRead is what one resume connection carried.
type stormRead struct {
	bytes  int
	last   uint64 // the last stream message seen
	gone   uint64
	reason string
	dial   bool // the connection was not made
}

// stormResume is one connection to /ws/live?since=N: it marks each event
// received in have (counting new ones in n) until the history is over (nil
// error: the first fleet summary) or the server closes it (its reason).
func stormResume(ctx context.Context, addr, token string, since uint64, have []bool, n *int) (stormRead, error) {
	var r stormRead
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(cctx, "ws://"+addr+"/ws/live?since="+strconv.FormatUint(since, 10),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		r.reason, r.dial = err.Error(), true
		return r, err
	}
	defer conn.CloseNow()
	conn.SetReadLimit(event.MaxFrameBytes + 1024)
	first := true
	for {
		_, data, err := conn.Read(cctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				r.reason = ce.Reason
			} else {
				r.reason = err.Error()
			}
			return r, err
		}
		r.bytes += len(data)
		if first {
			first = false
			h, _ := event.ReadHistory(data)
			r.gone = h.Gone
			continue
		}
		if _, ok := event.ParseFleet(data); ok {
			return r, nil
		}
		// The sequence numbers and stream messages, scanned (the storm's
		// browsers are many in one process: a full decode would make the
		// test, not the server, the bottleneck).
		for rest := data; ; {
			i := bytes.Index(rest, []byte(`"seq":`))
			j := bytes.Index(rest, []byte(`"stream_seq":`))
			if i < 0 && j < 0 {
				break
			}
			if j >= 0 && (i < 0 || j < i) {
				v, k := scanUint(rest[j+len(`"stream_seq":`):])
				r.last = max(r.last, v)
				rest = rest[j+len(`"stream_seq":`)+k:]
				continue
			}
			v, k := scanUint(rest[i+len(`"seq":`):])
			if v < uint64(len(have)) && !have[v] {
				have[v] = true
				*n++
			}
			rest = rest[i+len(`"seq":`)+k:]
		}
	}
}

// scanUint reads the digits b starts with.
func scanUint(b []byte) (uint64, int) {
	var v uint64
	k := 0
	for k < len(b) && '0' <= b[k] && b[k] <= '9' {
		v = v*10 + uint64(b[k]-'0')
		k++
	}
	return v, k
}
