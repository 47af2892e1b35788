package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// hostilePD is a 458-byte /api/pd body inside the config parser's bounds:
// 4,096 layers of 1,024 KV heads of 2,048, P at TP 256, D at TP 1,024.
const hostilePD = `{"config":{"architectures":["LlamaForCausalLM"],"model_type":"llama","num_hidden_layers":4096,"num_attention_heads":1024,` +
	`"num_key_value_heads":1024,"head_dim":2048,"hidden_size":4096,"intermediate_size":8192,"vocab_size":32000,"max_position_embeddings":1048576,` +
	`"torch_dtype":"bfloat16"},"p":{"tensor_parallel_size":256,"kv_cache_memory_bytes":1125899906842624},` +
	`"d":{"tensor_parallel_size":1024,"kv_cache_memory_bytes":1125899906842624},"prompt_tokens":4096}`

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
	srv := httptest.NewServer(newMux(catalog(), serveOptions{Agent: "none", Limits: limits{MaxMemory: 512 << 20, MaxPairs: 20_000_000,
		MaxResponse: 64 << 20, QueueWait: time.Second, MaxQueue: 4}}))
	defer srv.Close()
	start := time.Now()
	code, _, out, err := post(t, context.Background(), srv.URL+"/api/pd", hostilePD)
	took := time.Since(start)
	if err != nil || code != 413 || out["error_type"] != "too_large" || !strings.Contains(out["error"].(string), "--max-pairs") || out["estimate"].(float64) <= 20e6 {
		t.Fatalf("the hostile body: %d %v (%v)", code, out, err)
	}
	t.Logf("refused: %s", out["error"])
	withinBudget(t, "refusing the hostile /api/pd body", millis(took), 100, "ms")
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
	need := oracleEstimate(t, apiRequest{Model: "Qwen/Qwen3-0.6B"})
	s := newServer(catalog(), serveOptions{Agent: "none", Limits: limits{MaxMemory: need * 3 / 2, MaxPairs: 20_000_000,
		MaxResponse: 64 << 20, QueueWait: 300 * time.Millisecond, MaxQueue: 2}}, nil)
	srv := httptest.NewServer(s.handler)
	defer srv.Close()
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
	withinBudget(t, "a plan while oracles queue for memory", millis(time.Since(start)), 100, "ms")
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
	for s.api.adm.held() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.api.adm.held() == 0 {
		t.Fatal("the oracle request never started")
	}
	cancel()
	hung := time.Now()
	for s.api.adm.held() != 0 && time.Since(hung) < 5*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	stopped := time.Since(hung)
	if s.api.adm.held() != 0 {
		t.Errorf("memory still held %v after the client hung up", stopped)
	}
	withinBudget(t, "an oracle's memory given back after its client hung up", millis(stopped), 100, "ms")
}

// oracleEstimate is the memory admission reserves for an oracle request.
func oracleEstimate(t *testing.T, req apiRequest) int64 {
	t.Helper()
	s, err := req.setup(context.Background(), catalog(), true)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := xfer.Prepare(s)
	if err != nil {
		t.Fatal(err)
	}
	pp, dp := pd.UsedPlans()
	return oracleMemory(xfer.EstimateCost(s.Model, pp, dp, s.Request))
}

// oracleUse runs one /api/oracle request in this process with the
// collector off and returns every byte it allocated: more than it can
// hold at any moment. It also returns the largest heap sampled while the
// same request runs with the collector on (the live bytes and garbage not
// yet collected), for the log.
func oracleUse(t *testing.T, a *apiServer, req apiRequest) (allocated, sampled int64) {
	t.Helper()
	run := func() {
		res, err := apiOracle(context.Background(), a, req)
		if err != nil {
			t.Fatalf("the oracle: %v", err)
		}
		if r := res.(*oracle.Result); r.Verdict != oracle.Exact {
			t.Fatalf("the oracle: %s %s", r.Verdict, r.Reason)
		}
	}
	heap := func() int64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(s)
		return int64(s[0].Value.Uint64())
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

	runtime.GC()
	runtime.GC()
	base := heap()
	done := make(chan struct{})
	var peak atomic.Int64
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
				peak.Store(max(peak.Load(), heap()-base))
			}
		}
	}()
	run()
	close(done)
	return allocated, peak.Load()
}

// TestOracleMemoryEstimate: the memory admission reserves for an oracle
// request is never below what the request allocates (collector off), and
// where the descriptor pair estimate is close to the real pairs, within
// four times it. The oracle builds and reads back one D page at a time, so
// a default request takes a few MiB, not the 0.9 GiB of its pages.
func TestOracleMemoryEstimate(t *testing.T) {
	a := newAPIServer(catalog(), limits{MaxMemory: 64 << 30, MaxPairs: 1 << 40, MaxResponse: 1 << 40, QueueWait: time.Second, MaxQueue: 1})
	tp := func(n int) plan.Engine { return plan.Engine{TensorParallelSize: n} }
	cases := []struct {
		name string
		req  apiRequest
		// tight: the pair estimate is within 2x of the real pairs, so
		// the memory estimate must be within 4x of the measured use.
		tight bool
	}{
		{"default Qwen3-0.6B request", apiRequest{Model: "Qwen/Qwen3-0.6B"}, true},
		{"8,192 tokens", apiRequest{Model: "Qwen/Qwen3-0.6B", Prompt: 8192}, true},
		{"8,192 tokens, half a prefix hit", apiRequest{Model: "Qwen/Qwen3-0.6B", Prompt: 8192, Hit: 4096}, false},
		{"Qwen3-8B, 6,000 tokens, TP2 to TP4", apiRequest{Model: "Qwen/Qwen3-8B", Prompt: 6000, P: tp(2), D: tp(4)}, true},
		{"push TP4 to TP2", apiRequest{Model: "Qwen/Qwen3-0.6B", Connector: "nixl-push", P: tp(4), D: tp(2)}, true},
		// The pair estimate is 8x the pairs here (each D rank is counted
		// against P's fan-out), and 4x for the sliding window.
		{"8,192 tokens, TP1 to TP8", apiRequest{Model: "Qwen/Qwen3-0.6B", Prompt: 8192, P: tp(1), D: tp(8)}, false},
		{"sliding window, 8,192 tokens", apiRequest{Model: "openai/gpt-oss-20b", Prompt: 8192, P: tp(2), D: tp(4)}, false},
		{"MLA TP2 to TP1", apiRequest{Model: "deepseek-ai/DeepSeek-V2-Lite", P: tp(2), D: tp(1)}, false},
		{"gated delta net TP1 to TP2", apiRequest{Model: "Qwen/Qwen3.5-0.8B", P: tp(1), D: tp(2)}, false},
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

// TestAdmissionQueueLength: with the memory taken, up to MaxQueue
// requests wait and the next is told to come back at once; with
// MaxQueue 0 none waits.
func TestAdmissionQueueLength(t *testing.T) {
	for _, queue := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(queue), func(t *testing.T) {
			a := newAdmission(limits{MaxMemory: 100, QueueWait: time.Minute, MaxQueue: queue})
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
			if err := a.acquire(context.Background(), 10); !errors.Is(err, errBusy) || time.Since(start) > time.Second {
				t.Errorf("one more than the queue: %v after %v, want errBusy at once", err, time.Since(start))
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
// within 100 ms (a budget: budget_test.go), and its memory is given back.
func TestPDHangUp(t *testing.T) {
	s := newServer(catalog(), serveOptions{Agent: "none", Limits: limits{MaxMemory: 4 << 30, MaxPairs: 20_000_000,
		MaxResponse: 64 << 20, QueueWait: time.Second, MaxQueue: 2}}, nil)
	srv := httptest.NewServer(s.handler)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		post(t, ctx, srv.URL+"/api/pd", heavyPD)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.api.adm.held() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s.api.adm.held() == 0 {
		t.Fatal("the request was never admitted")
	}
	time.Sleep(150 * time.Millisecond) // well into its pairs
	if s.api.adm.held() == 0 {
		t.Fatal("the request finished before the client hung up: make it heavier")
	}
	cancel()
	hung := time.Now()
	for s.api.adm.held() != 0 && time.Since(hung) < 5*time.Second {
		time.Sleep(time.Millisecond)
	}
	stopped := time.Since(hung)
	<-answered
	if s.api.adm.held() != 0 {
		t.Errorf("the computation went on %v after the client hung up", stopped)
	}
	withinBudget(t, "a heavy /api/pd stopped after its client hung up", millis(stopped), 100, "ms")
}

// TestAdmissionRunsAtMostMaxRunning: with memory to spare, at most
// MaxRunning heavy requests compute at once; the next waits for one to
// finish, in order, and a request given up while waiting frees its place
// in line.
func TestAdmissionRunsAtMostMaxRunning(t *testing.T) {
	for _, running := range []int{1, 2} {
		t.Run(fmt.Sprint(running), func(t *testing.T) {
			a := newAdmission(limits{MaxMemory: 1 << 30, QueueWait: time.Minute, MaxQueue: 8, MaxRunning: running})
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
