package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
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
	t.Logf("refused in %v: %s", took, out["error"])
	if took > 100*time.Millisecond*time.Duration(slack()) {
		t.Errorf("refusing the hostile body took %v, want under 100 ms", took)
	}
	// The oracle of a request whose pages exceed --max-memory (here 512 MiB).
	code, _, out, _ = post(t, context.Background(), srv.URL+"/api/oracle", `{"model":"Qwen/Qwen3-0.6B","prompt_tokens":8192}`)
	if code != 413 || !strings.Contains(out["error"].(string), "--max-memory") {
		t.Fatalf("an oracle over --max-memory: %d %v", code, out)
	}
}

// TestAdmission: heavy requests queue for memory, then get 429 with
// Retry-After; /api/plan is never queued behind them; a client that hangs
// up frees its memory at once.
func TestAdmission(t *testing.T) {
	s := newServer(catalog(), serveOptions{Agent: "none", Limits: limits{MaxMemory: 1200 << 20, MaxPairs: 20_000_000,
		MaxResponse: 64 << 20, QueueWait: 300 * time.Millisecond, MaxQueue: 2}}, nil)
	srv := httptest.NewServer(s.handler)
	defer srv.Close()
	const n = 6 // one runs at a time (each needs ~0.95 GiB)
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
	if d := time.Since(start); d > 100*time.Millisecond*time.Duration(slack()) {
		t.Errorf("a plan during the storm took %v", d)
	}
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
	t.Logf("the computation stopped %v after the client hung up", stopped)
	if s.api.adm.held() != 0 || stopped > 100*time.Millisecond*time.Duration(slack()) {
		t.Errorf("memory still held %v after the client hung up", stopped)
	}
}
