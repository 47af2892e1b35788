package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stormToken is the storm's server token (at least api.MinTokenLen).
const stormToken = "storm-login-test-token-0123"

// TestStormLogin is issue 24's guess storm against a real `kvscope serve`
// process (make soak builds it and sets KVSCOPE_SOAK=1 and KVSCOPE_BIN):
// 16 clients on 127.0.0.1 send wrong tokens, to POST /login and as
// bearers, as fast as the server answers, for 10 s, while a user on
// 127.0.0.2 plans every 50 ms with the right bearer and logs in, and the
// embedded agent streams. Before the throttle the probe measured ~15,000
// guesses/s checked. It prints the guesses checked per second, the
// /api/plan p99 before and during the storm, and how soon the storming
// address logs in once the storm stops.
func TestStormLogin(t *testing.T) {
	base, _ := soakServe(t, stormToken, os.Stderr, "--agent", "embedded")
	report := func(format string, args ...any) { fmt.Printf("soak: "+format+"\n", args...) }

	storm := stormClient(t, "127.0.0.1", 16)
	user := stormClient(t, "127.0.0.2", 2) // another address on the loopback network
	waitStorm(t, user, base)
	plan := func() (int, time.Duration) {
		req, _ := http.NewRequest("POST", base+"/api/plan", strings.NewReader(`{"model":"Qwen/Qwen3-0.6B"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+stormToken)
		t0 := time.Now()
		code := stormDo(user, req)
		return code, time.Since(t0)
	}
	var quiet []time.Duration
	for range 100 {
		code, took := plan()
		if code != 200 {
			t.Fatalf("a plan before the storm: %d", code)
		}
		quiet = append(quiet, took)
		time.Sleep(10 * time.Millisecond)
	}
	eventsBefore := hubEvents(t, user, base)

	// The storm: each client alternates a wrong login and a wrong bearer.
	const stormFor = 10 * time.Second
	var checked, refused, other atomic.Int64
	var lastRetry atomic.Int64
	ctx, stop := context.WithTimeout(context.Background(), stormFor)
	defer stop()
	var wg sync.WaitGroup
	start := time.Now()
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				guess := fmt.Sprintf("guess-%d-%d-xxxxxxxx", c, i)
				var req *http.Request
				if i%2 == 0 {
					req, _ = http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"token": {guess}}.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				} else {
					req, _ = http.NewRequest("GET", base+"/metrics", nil)
					req.Header.Set("Authorization", "Bearer "+guess)
				}
				req = req.WithContext(ctx)
				resp, err := storm.Do(req)
				if err != nil {
					continue // the storm's end cancels requests in flight
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 401:
					checked.Add(1)
				case 429:
					refused.Add(1)
					if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
						lastRetry.Store(int64(s))
					}
				default:
					other.Add(1)
				}
			}
		}()
	}
	var during []time.Duration
	loginCodes := map[int]int{}
	for ctx.Err() == nil {
		code, took := plan()
		if code != 200 {
			t.Errorf("a plan from another address during the storm: %d", code)
		}
		during = append(during, took)
		if len(during)%20 == 0 { // a right login from the user's address, now and then
			req, _ := http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"token": {stormToken}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			loginCodes[stormDo(user, req)]++
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	took := time.Since(start)
	eventsAfter := hubEvents(t, user, base)
	slices.Sort(quiet)
	slices.Sort(during)
	p99 := func(d []time.Duration) time.Duration { return d[len(d)*99/100].Round(time.Microsecond) }
	total := checked.Load() + refused.Load() + other.Load()
	report("login storm: %d guesses in %v from 127.0.0.1 (%.0f/s answered): %d checked (%.1f/s), %d refused with 429, %d other; last Retry-After %d s",
		total, took.Round(time.Millisecond), float64(total)/took.Seconds(), checked.Load(), float64(checked.Load())/took.Seconds(), refused.Load(), other.Load(), lastRetry.Load())
	report("login storm: /api/plan from 127.0.0.2: before p50 %v p99 %v (%d); during p50 %v p99 %v (%d); right logins during it %v; embedded agent events %d -> %d",
		quiet[len(quiet)/2].Round(time.Microsecond), p99(quiet), len(quiet), during[len(during)/2].Round(time.Microsecond), p99(during), len(during), loginCodes, eventsBefore, eventsAfter)
	if float64(checked.Load())/took.Seconds() > 2 || other.Load() != 0 || refused.Load() == 0 {
		t.Errorf("the throttle let %d guesses be checked in %v (%d refused, %d other)", checked.Load(), took, refused.Load(), other.Load())
	}
	if p99(during) > 100*time.Millisecond || loginCodes[303] != len(during)/20 || eventsAfter <= eventsBefore {
		t.Errorf("the storm held back others: plan p99 %v, logins %v, agent events %d -> %d", p99(during), loginCodes, eventsBefore, eventsAfter)
	}

	// The storming address logs in once its wait is over.
	wait := time.Duration(lastRetry.Load()) * time.Second
	time.Sleep(wait)
	t0 := time.Now()
	req, _ := http.NewRequest("POST", base+"/login", strings.NewReader(url.Values{"token": {stormToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	code := stormDo(storm, req)
	report("login storm: the right login from 127.0.0.1 after its %v wait: %d in %v", wait, code, time.Since(t0).Round(time.Microsecond))
	if code != 303 {
		t.Errorf("the right login after the wait: %d, want 303", code)
	}
}

// stormClient is an HTTP client whose connections come from localIP, with
// conns of them kept alive, and which follows no redirect.
func stormClient(t *testing.T, localIP string, conns int) *http.Client {
	t.Helper()
	ip := net.ParseIP(localIP)
	probe, err := net.Listen("tcp", localIP+":0")
	if err != nil {
		t.Skipf("no loopback address %s to test from: %v", localIP, err)
	}
	probe.Close()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       30 * time.Second,
	}
}

// stormDo sends req and returns its status (0 when it failed).
func stormDo(c *http.Client, req *http.Request) int {
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// waitStorm waits for the server to answer with the storm's token.
func waitStorm(t *testing.T, c *http.Client, base string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", base+"/api/models", nil)
		req.Header.Set("Authorization", "Bearer "+stormToken)
		if stormDo(c, req) == 200 {
			return
		}
	}
	t.Fatal("the server did not come up in 30 s")
}

// hubEvents is the hub's kvscope_hub_events_total, summed over kinds.
func hubEvents(t *testing.T, c *http.Client, base string) int64 {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+stormToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "kvscope_hub_events_total{"); ok {
			if _, v, ok := strings.Cut(rest, "} "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				n += f
			}
		}
	}
	return int64(n)
}
