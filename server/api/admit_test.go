package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/kvscope/kvscope/server/internal/budget"
	"github.com/kvscope/kvscope/server/internal/hub"
	"github.com/kvscope/kvscope/server/internal/memtest"
)

// hostilePD is a 457-byte /api/pd body inside the config parser's bounds
// (testdata/hostile-pd.json, which make soak sends too): 4,096 layers of
// 1,024 KV heads of 2,048, P at TP 256, D at TP 1,024.
func hostilePD(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/hostile-pd.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newTestServer serves the API with lim over a real loopback listener,
// closed when the test ends.
func newTestServer(t *testing.T, lim Limits) (*Server, *httptest.Server) {
	t.Helper()
	s := New(catalog.Bundled(), lim)
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, srv
}

func post(t *testing.T, ctx context.Context, url, body string) (int, http.Header, map[string]any, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out, nil
}

// TestHostileBodiesAreRefusedFromTheirEstimate: work is estimated from the
// plans before any registration or pair exists, and refused over a limit
// with the limit and the estimate named, fast.
func TestHostileBodiesAreRefusedFromTheirEstimate(t *testing.T) {
	_, srv := newTestServer(t, Limits{MaxMemory: 512 << 20, MaxPairs: 20_000_000, MaxResponse: 64 << 20, QueueWait: time.Second, MaxQueue: 4})
	start := time.Now()
	code, _, out, err := post(t, context.Background(), srv.URL+"/api/pd", hostilePD(t))
	took := time.Since(start)
	if err != nil || code != 413 || out["error_type"] != "too_large" || !strings.Contains(out["error"].(string), "--max-pairs") || out["estimate"].(float64) <= 20e6 {
		t.Fatalf("the hostile body: %d %v (%v)", code, out, err)
	}
	t.Logf("refused: %s", out["error"])
	budget.Within(t, "refusing the hostile /api/pd body", budget.Millis(took), 100, "ms")
	// An oracle whose estimate (its pairs: 1.8 million for D at TP 8)
	// exceeds --max-memory (here 512 MiB).
	code, _, out, _ = post(t, context.Background(), srv.URL+"/api/oracle", `{"model":"Qwen/Qwen3-0.6B","prompt_tokens":8192,"d":{"tensor_parallel_size":8}}`)
	if code != 413 || !strings.Contains(out["error"].(string), "--max-memory") {
		t.Fatalf("an oracle over --max-memory: %d %v", code, out)
	}
}

// TestAdmission: heavy requests queue for memory, then get 429 with
// Retry-After; /api/plan is never queued behind them; a client that hangs
// up frees its memory at once.
func TestAdmission(t *testing.T) {
	// Memory for one default oracle request at a time.
	need := oracleEstimate(t, PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-0.6B"}})
	s, srv := newTestServer(t, Limits{MaxMemory: need * 3 / 2, MaxPairs: 20_000_000, MaxResponse: 64 << 20, QueueWait: 300 * time.Millisecond, MaxQueue: 2})
	const n = 6 // one runs at a time
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, hdr, _, err := post(t, context.Background(), srv.URL+"/api/oracle", `{"model":"Qwen/Qwen3-0.6B"}`)
			if err != nil {
				t.Error(err)
			}
			if code == 429 && hdr.Get("Retry-After") == "" {
				t.Error("a 429 without Retry-After")
			}
			codes[i] = code
		}()
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if code, _, _, _ := post(t, context.Background(), srv.URL+"/api/plan", `{"model":"Qwen/Qwen3-0.6B"}`); code != 200 {
		t.Errorf("a plan during the storm: %d", code)
	}
	budget.Within(t, "a plan while oracles queue for memory", budget.Millis(time.Since(start)), 100, "ms")
	wg.Wait()
	ok, busy := 0, 0
	for _, c := range codes {
		switch c {
		case 200:
			ok++
		case 429:
			busy++
		default:
			t.Errorf("status %d", c)
		}
	}
	if ok == 0 || busy == 0 {
		t.Errorf("%d answered, %d told to come back: want both", ok, busy)
	}

	// A client that hangs up mid-oracle: the computation stops, its
	// memory is given back.
	ctx, cancel := context.WithCancel(context.Background())
	go post(t, ctx, srv.URL+"/api/oracle", `{"model":"Qwen/Qwen3-0.6B"}`)
	deadline := time.Now().Add(5 * time.Second)
	for s.adm.held() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.adm.held() == 0 {
		t.Fatal("the oracle request never started")
	}
	cancel()
	hung := time.Now()
	for s.adm.held() != 0 && time.Since(hung) < 5*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	stopped := time.Since(hung)
	if s.adm.held() != 0 {
		t.Errorf("memory still held %v after the client hung up", stopped)
	}
	budget.Within(t, "an oracle's memory given back after its client hung up", budget.Millis(stopped), 100, "ms")
}

// oracleEstimate is the memory admission reserves for an oracle request.
func oracleEstimate(t *testing.T, req PDRequest) int64 {
	t.Helper()
	s, err := req.Setup(context.Background(), hub.Models{Catalog: catalog.Bundled()}, true)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := xfer.Prepare(s)
	if err != nil {
		t.Fatal(err)
	}
	pp, dp := pd.UsedPlans()
	return OracleMemory(xfer.EstimateCost(s.Model, pp, dp, s.Request))
}

// oracleUse runs one /api/oracle request in this process with the
// collector off and returns every byte it allocated: more than it can
// hold at any moment. It also returns the largest heap sampled while the
// same request runs with the collector on (the live bytes and garbage not
// yet collected), for the log.
func oracleUse(t *testing.T, a *Server, req PDRequest) (allocated, sampled int64) {
	t.Helper()
	run := func() {
		res, err := a.oracle(context.Background(), &req)
		if err != nil {
			t.Fatalf("the oracle: %v", err)
		}
		if r := res.(*oracle.Result); r.Verdict != oracle.Exact {
			t.Fatalf("the oracle: %s %s", r.Verdict, r.Reason)
		}
	}
	// Two collections empty the pools (the check's scratch) first.
	runtime.GC()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	old := debug.SetGCPercent(-1)
	run()
	runtime.ReadMemStats(&m1)
	debug.SetGCPercent(old)
	allocated = int64(m1.TotalAlloc - m0.TotalAlloc)
	return allocated, memtest.PeakGrowth(100*time.Microsecond, run)
}

// TestOracleMemoryEstimate: the memory admission reserves for an oracle
// request is never below what the request allocates (collector off), and
// where the descriptor pair estimate is close to the real pairs, within
// four times it. The oracle builds and reads back one D page at a time, so
// a default request takes a few MiB, not the 0.9 GiB of its pages.
func TestOracleMemoryEstimate(t *testing.T) {
	a := New(catalog.Bundled(), Limits{MaxMemory: 64 << 30, MaxPairs: 1 << 40, MaxResponse: 1 << 40, QueueWait: time.Second, MaxQueue: 1})
	tp := func(n int) plan.Engine { return plan.Engine{TensorParallelSize: n} }
	cases := []struct {
		name string
		req  PDRequest
		// tight: the pair estimate is within 2x of the real pairs, so
		// the memory estimate must be within 4x of the measured use.
		tight bool
	}{
		{"default Qwen3-0.6B request", PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-0.6B"}}, true},
		{"8,192 tokens", PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-0.6B"}, Prompt: 8192}, true},
		{"8,192 tokens, half a prefix hit", PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-0.6B"}, Prompt: 8192, Hit: 4096}, false},
		{"Qwen3-8B, 6,000 tokens, TP2 to TP4", PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-8B"}, Prompt: 6000, P: tp(2), D: tp(4)}, true},
		{"push TP4 to TP2", PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-0.6B"}, Connector: "nixl-push", P: tp(4), D: tp(2)}, true},
		// The pair estimate is 8x the pairs here (each D rank is counted
		// against P's fan-out), and 4x for the sliding window.
		{"8,192 tokens, TP1 to TP8", PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-0.6B"}, Prompt: 8192, P: tp(1), D: tp(8)}, false},
		{"sliding window, 8,192 tokens", PDRequest{ModelRequest: ModelRequest{Model: "openai/gpt-oss-20b"}, Prompt: 8192, P: tp(2), D: tp(4)}, false},
		{"MLA TP2 to TP1", PDRequest{ModelRequest: ModelRequest{Model: "deepseek-ai/DeepSeek-V2-Lite"}, P: tp(2), D: tp(1)}, false},
		{"gated delta net TP1 to TP2", PDRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3.5-0.8B"}, P: tp(1), D: tp(2)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			est := oracleEstimate(t, tc.req)
			used, sampled := oracleUse(t, a, tc.req)
			t.Logf("estimate %.1f MiB; allocated %.1f MiB (%.1fx under the estimate); heap sampled %.1f MiB",
				float64(est)/(1<<20), float64(used)/(1<<20), float64(est)/float64(used), float64(sampled)/(1<<20))
			if est < used {
				t.Errorf("the estimate %d is below the %d bytes the request allocated", est, used)
			}
			if tc.tight && est > 4*used {
				t.Errorf("the estimate %d is over 4x the %d bytes the request allocated", est, used)
			}
		})
	}
}

// TestAdmissionQueueLength: with the memory taken, up to MaxQueue
// requests wait and the next is told to come back at once; with
// MaxQueue 0 none waits.
func TestAdmissionQueueLength(t *testing.T) {
	for _, queue := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(queue), func(t *testing.T) {
			a := newAdmission(Limits{MaxMemory: 100, QueueWait: time.Minute, MaxQueue: queue})
			if err := a.acquire(context.Background(), 100); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var waiting sync.WaitGroup
			for range queue {
				waiting.Add(1)
				go func() {
					defer waiting.Done()
					a.acquire(ctx, 10)
				}()
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				a.mu.Lock()
				n := len(a.waiters)
				a.mu.Unlock()
				if n == queue {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d waiting, want %d", n, queue)
				}
			}
			start := time.Now()
			if err := a.acquire(context.Background(), 10); !errors.Is(err, ErrBusy) || time.Since(start) > time.Second {
				t.Errorf("one more than the queue: %v after %v, want ErrBusy at once", err, time.Since(start))
			}
			cancel()
			waiting.Wait()
		})
	}
}

// heavyPD is a /api/pd body inside the default limits that computes for
// seconds: a 2^20-token prompt of Qwen3-0.6B (3.7 million pairs).
const heavyPD = `{"model":"Qwen/Qwen3-0.6B","prompt_tokens":1048576,` +
	`"p":{"max_model_len":1048576,"kv_cache_memory_bytes":274877906944},"d":{"max_model_len":1048576,"kv_cache_memory_bytes":274877906944}}`

// TestPDHangUp: a client that hangs up on a heavy /api/pd (a 2^20-token
// prompt: about 1.5 s of pairs on this machine) stops the computation
// within 100 ms (a budget: package budget), and its memory is given back.
func TestPDHangUp(t *testing.T) {
	s, srv := newTestServer(t, Limits{MaxMemory: 4 << 30, MaxPairs: 20_000_000, MaxResponse: 64 << 20, QueueWait: time.Second, MaxQueue: 2})
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		post(t, ctx, srv.URL+"/api/pd", heavyPD)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.adm.held() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s.adm.held() == 0 {
		t.Fatal("the request was never admitted")
	}
	time.Sleep(150 * time.Millisecond) // well into its pairs
	if s.adm.held() == 0 {
		t.Fatal("the request finished before the client hung up: make it heavier")
	}
	cancel()
	hung := time.Now()
	for s.adm.held() != 0 && time.Since(hung) < 5*time.Second {
		time.Sleep(time.Millisecond)
	}
	stopped := time.Since(hung)
	<-answered
	if s.adm.held() != 0 {
		t.Errorf("the computation went on %v after the client hung up", stopped)
	}
	budget.Within(t, "a heavy /api/pd stopped after its client hung up", budget.Millis(stopped), 100, "ms")
}

// TestAdmissionRunsAtMostMaxRunning: with memory to spare, at most
// MaxRunning heavy requests compute at once; the next waits for one to
// finish, in order, and a request given up while waiting frees its place
// in line.
func TestAdmissionRunsAtMostMaxRunning(t *testing.T) {
	for _, running := range []int{1, 2} {
		t.Run(fmt.Sprint(running), func(t *testing.T) {
			a := newAdmission(Limits{MaxMemory: 1 << 30, QueueWait: time.Minute, MaxQueue: 8, MaxRunning: running})
			for range running {
				if err := a.acquire(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
			}
			gone, cancel := context.WithCancel(context.Background())
			left := make(chan error, 1)
			go func() { left <- a.acquire(gone, 1) }() // first in line, gives up
			waitFor := func(n int) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					a.mu.Lock()
					w := len(a.waiters)
					a.mu.Unlock()
					if w == n {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d waiting, want %d", w, n)
					}
				}
			}
			waitFor(1)
			admitted := make(chan error, 1)
			go func() { admitted <- a.acquire(context.Background(), 1) }()
			waitFor(2)
			select {
			case err := <-admitted:
				t.Fatalf("admitted (%v) with %d running", err, running)
			case <-time.After(20 * time.Millisecond):
			}
			cancel()
			if err := <-left; !errors.Is(err, context.Canceled) {
				t.Fatalf("a request given up: %v", err)
			}
			waitFor(1)
			a.release(1)
			select {
			case err := <-admitted:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("not admitted when a place came free")
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.running != running || a.used != int64(running) || len(a.waiters) != 0 {
				t.Fatalf("%d running, %d bytes held, %d waiting; want %d, %d, 0", a.running, a.used, len(a.waiters), running, running)
			}
		})
	}
}
