package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func postJSON(t *testing.T, srv *httptest.Server, path string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func TestAPICheckAndRefusal(t *testing.T) {
	srv := httptest.NewServer(newMux(catalog(), serveOptions{}))
	defer srv.Close()

	log, err := os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", "qwen36-35b-a3b-nvfp4-mtp2-v0.20.2-262k.log"))
	if err != nil {
		t.Fatal(err)
	}
	code, out := postJSON(t, srv, "/api/check", map[string]any{"log": string(log)})
	if code != 200 || out["verdict"] != "match" || out["profile"] != "0.20.2" {
		t.Errorf("check: %d %v %v", code, out["verdict"], out["error"])
	}
	// A fragment with the one-line capacity form and no memory line is
	// partial, naming the missing line; a fragment that prints no
	// max_num_batched_tokens lists it as assumed, with the value used.
	log, err = os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", "qwen38-27b-w4a16-rtx3090-v0.28.0-PARTIAL-FRAGMENT.log"))
	if err != nil {
		t.Fatal(err)
	}
	code, out = postJSON(t, srv, "/api/check", map[string]any{"log": string(log), "model": "Qwen/Qwen3.6-27B"})
	if missing, _ := out["missing"].([]any); code != 200 || out["verdict"] != "partial" || len(missing) != 1 || !strings.Contains(fmt.Sprint(missing[0]), "Available KV cache memory") {
		t.Errorf("partial check: %d %v %v", code, out["verdict"], out["missing"])
	}
	log, err = os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", "gemma4-e2b-l4-v0.21.0-FRAGMENT.log"))
	if err != nil {
		t.Fatal(err)
	}
	code, out = postJSON(t, srv, "/api/check", map[string]any{"log": string(log), "model": "google/gemma-4-E2B", "vllm_version": "0.21.0"})
	assumed, _ := out["assumed"].([]any)
	found := false
	for _, a := range assumed {
		m, _ := a.(map[string]any)
		found = found || m["flag"] == "--max-num-batched-tokens" && m["value"] == "8192" && m["why"] != ""
	}
	if code != 200 || out["verdict"] != "differs" || !found || !strings.Contains(fmt.Sprint(out["explain"]), "matches with --max-num-batched-tokens 2048") {
		t.Errorf("assumed flag: %d %v assumed %v explain %v", code, out["verdict"], out["assumed"], out["explain"])
	}
	code, out = postJSON(t, srv, "/api/check", map[string]any{"log": "nothing here"})
	if code != 400 || out["error_type"] != "bad_data" || !strings.Contains(out["error"].(string), "vLLM prints") {
		t.Errorf("garbage log: %d %v", code, out)
	}

	// vLLM 0.21 refuses gpt-oss-20b at 131,072 tokens in 3 GiB
	// (core/plan's refusal test derives 122,736).
	code, out = postJSON(t, srv, "/api/plan", map[string]any{"model": "openai/gpt-oss-20b", "vllm_version": "0.21.0",
		"engine": map[string]any{"max_model_len": 131072, "kv_cache_memory_bytes": 3 << 30}})
	if code != 400 || out["error_type"] != "refused" || out["estimated_max_model_len"] != float64(122736) || !strings.Contains(out["error"].(string), "To serve at least one request") {
		t.Errorf("refusal: %d %v", code, out)
	}
	code, out = postJSON(t, srv, "/api/plan", map[string]any{"model": "openai/gpt-oss-20b", "vllm_version": "0.7.0"})
	if code != 400 || !strings.Contains(out["error"].(string), "--vllm-version") {
		t.Errorf("old version: %d %v", code, out)
	}
	code, out = postJSON(t, srv, "/api/plan", map[string]any{"model": "openai/gpt-oss-20b", "vllm_version": "0.19.0"})
	if code != 200 || out["vllm_version"] != "0.19.0" {
		t.Errorf("plan at 0.19: %d %v", code, out["vllm_version"])
	}
	// A block size vLLM's CLI refuses is refused before any planning.
	code, out = postJSON(t, srv, "/api/pd", map[string]any{"model": "openai/gpt-oss-20b", "d": map[string]any{"block_size": 1 << 20}})
	if code != 400 || out["error_type"] != "bad_data" || !strings.Contains(out["error"].(string), "--block-size 1048576") {
		t.Errorf("block size: %d %v", code, out)
	}
}
