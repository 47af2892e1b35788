package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

const hubCommit = "4f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"

// hubEnv points every HF_* variable the resolver reads at the test's own
// cache and endpoint, so nothing reads the real ~/.cache or the network.
func hubEnv(t *testing.T, cache, endpoint string) {
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_ENDPOINT", endpoint)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
}

// closedPort is an endpoint nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func bundledFile(t *testing.T, name string) []byte {
	data, err := os.ReadFile(modelPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// planJSON runs plan --json and decodes it.
func planJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, errs := runCLI(t, append([]string{"plan", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPlanAHubIDFromAWarmCache: kvscope plan --model org/name reads a
// cache laid out as huggingface_hub lays it out, with the endpoint a
// closed port, and plans what the bundled copy of the same config plans.
func TestPlanAHubIDFromAWarmCache(t *testing.T) {
	cache := t.TempDir()
	repo := filepath.Join(cache, "models--someorg--Qwen3-0.6B-copy")
	snap := filepath.Join(repo, "snapshots", hubCommit, "config.json")
	for path, data := range map[string][]byte{
		filepath.Join(repo, "refs", "main"): []byte(hubCommit),
		snap:                                bundledFile(t, "Qwen__Qwen3-0.6B"),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hubEnv(t, cache, closedPort(t))
	got := planJSON(t, "--model", "someorg/Qwen3-0.6B-copy")
	want := planJSON(t, "--model", "Qwen/Qwen3-0.6B")
	for _, k := range []string{"num_blocks", "kv_cache_tokens", "groups", "page_size_bytes"} {
		if g, w := mustJSON(t, got[k]), mustJSON(t, want[k]); g != w {
			t.Errorf("%s: %s from the cache, %s bundled", k, g, w)
		}
	}
	src, _ := got["model_source"].(map[string]any)
	if src["path"] != snap || src["commit"] != hubCommit || src["id"] != "someorg/Qwen3-0.6B-copy" || src["url"] != nil {
		t.Errorf("model_source = %v, want the snapshot %s at %s", src, snap, hubCommit)
	}
	if _, ok := want["model_source"]; ok {
		t.Errorf("a bundled name has a model_source: %v", want["model_source"])
	}
	code, out, errs := runCLI(t, "plan", "--model", "someorg/Qwen3-0.6B-copy")
	if code != 0 || !strings.Contains(out, "model someorg/Qwen3-0.6B-copy: ") || !strings.Contains(out, "model config.json: hub cache "+snap+" (commit "+hubCommit+")") {
		t.Errorf("exit %d, text output does not name the cache:\n%s%s", code, out, errs)
	}
	// oracle and tune name it in --json and in their text.
	for _, args := range [][]string{
		{"oracle", "--model", "someorg/Qwen3-0.6B-copy", "--p-tensor-parallel-size", "1", "--d-tensor-parallel-size", "2"},
		{"tune", "--model", "someorg/Qwen3-0.6B-copy"},
	} {
		code, out, errs := runCLI(t, append(args, "--json")...)
		var v map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("%s --json: exit %d: %s", args[0], code, errs)
		}
		if src, _ := v["model_source"].(map[string]any); src["path"] != snap {
			t.Errorf("%s --json: model_source = %v", args[0], v["model_source"])
		}
		if code, out, errs = runCLI(t, args...); code != 0 || !strings.Contains(out, "model config.json: hub cache "+snap) {
			t.Errorf("%s: exit %d, the text does not name the cache:\n%s%s", args[0], code, out, errs)
		}
	}
	// check --model takes the id too, and its --json names the source
	// (whatever the log's verdict: a Llama log planned with this config).
	_, out, errs = runCLI(t, "check", filepath.Join("..", "testdata", "vllm-logs", "llama3-8b-v0.11.2.log"), "--model", "someorg/Qwen3-0.6B-copy", "--json")
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("check --json: %v: %s", err, errs)
	}
	if src, _ := res["model_source"].(map[string]any); src["path"] != snap {
		t.Errorf("check --json model_source = %v", res["model_source"])
	}
}

// TestPlanAHubIDFromTheHub: a cold cache fetches from a loopback server
// laid out as the Hub's resolve API, names the URL, and stores the file;
// its errors reach the command line.
func TestPlanAHubIDFromTheHub(t *testing.T) {
	qwen := bundledFile(t, "Qwen__Qwen3-0.6B")
	dflash := bundledFile(t, "z-lab__Qwen3.6-35B-A3B-DFlash")
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		switch r.URL.Path {
		case "/testorg/small/resolve/main/config.json":
			w.Header().Set("X-Repo-Commit", hubCommit)
			w.Write(qwen)
		case "/testorg/gated/resolve/main/config.json":
			http.Error(w, "gated", http.StatusUnauthorized)
		case "/testorg/absurd/resolve/main/config.json":
			w.Header().Set("X-Repo-Commit", hubCommit)
			w.Write([]byte(`{"model_type": "llama", "num_hidden_layers": -1}`))
		case "/testorg/draft/resolve/main/config.json":
			w.Header().Set("X-Repo-Commit", hubCommit)
			w.Write(dflash)
		default:
			http.Error(w, "Repository Not Found", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	cache := t.TempDir()
	hubEnv(t, cache, srv.URL)
	got := planJSON(t, "--model", "testorg/small")
	src, _ := got["model_source"].(map[string]any)
	wantPath := filepath.Join(cache, "models--testorg--small", "snapshots", hubCommit, "config.json")
	if src["url"] != srv.URL+"/testorg/small/resolve/main/config.json" || src["commit"] != hubCommit || src["path"] != wantPath {
		t.Errorf("model_source = %v", src)
	}
	if _, err := os.Stat(wantPath); err != nil {
		t.Errorf("the fetch was not stored: %v", err)
	}
	code, out, errs := runCLI(t, "pd", "--model", "testorg/small", "--p-tensor-parallel-size", "1", "--d-tensor-parallel-size", "2")
	if code != 0 || !strings.Contains(out, "model config.json: hub cache "+wantPath) {
		t.Errorf("pd from the warm cache: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "pd", "--json", "--model", "testorg/small", "--p-tensor-parallel-size", "1", "--d-tensor-parallel-size", "2")
	var pd map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &pd) != nil {
		t.Fatalf("pd --json: exit %d: %s", code, errs)
	}
	if src, _ := pd["model_source"].(map[string]any); src["path"] != wantPath || pd["transfer"] == nil {
		t.Errorf("pd --json: model_source = %v, transfer present: %v", pd["model_source"], pd["transfer"] != nil)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the Hub saw %d requests, want 1 (the second command reads the cache)", n)
	}
	// A draft by Hub id is named in draft_source.
	code, out, errs = runCLI(t, "plan", "--json", "--model", "Qwen/Qwen3.6-35B-A3B", "--draft", "testorg/draft", "--num-speculative-tokens", "7", "--vllm-version", "pr58207")
	var withDraft map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &withDraft) != nil {
		t.Fatalf("plan with a Hub draft: exit %d: %s", code, errs)
	}
	if d, _ := withDraft["draft_source"].(map[string]any); d["url"] != srv.URL+"/testorg/draft/resolve/main/config.json" || withDraft["model_source"] != nil {
		t.Errorf("draft_source = %v, model_source = %v", withDraft["draft_source"], withDraft["model_source"])
	}
	for _, tc := range []struct{ ref, want string }{
		{"testorg/gated", "set HF_TOKEN"},
		{"testorg/absent@v2", "no such model or revision"},
		{"testorg/absurd", srv.URL + "/testorg/absurd/resolve/main/config.json (commit " + hubCommit + ")"},
	} {
		code, _, errs := runCLI(t, "plan", "--model", tc.ref)
		if code != 1 || !strings.Contains(errs, "--model "+tc.ref+": ") || !strings.Contains(errs, tc.want) {
			t.Errorf("plan --model %s: exit %d, stderr %q, want %q", tc.ref, code, errs, tc.want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
