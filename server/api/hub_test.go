package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/server/internal/hub"
)

// TestModelByHubID: "model": "org/name" in /api/plan and /api/pd is
// fetched from a loopback server laid out as the Hub's resolve API and
// named in model_source; the Hub's refusals are the request's errors;
// a server that resolves no Hub ids never asks.
func TestModelByHubID(t *testing.T) {
	const commit = "4f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"
	qwen, err := os.ReadFile(filepath.Join(modeltest.Dir(), "Qwen__Qwen3-0.6B.json"))
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		switch r.URL.Path {
		case "/testorg/small/resolve/main/config.json":
			w.Header().Set("X-Repo-Commit", commit)
			w.Write(qwen)
		case "/testorg/gated/resolve/main/config.json":
			http.Error(w, "gated", http.StatusForbidden)
		default:
			http.Error(w, "Repository Not Found", http.StatusNotFound)
		}
	}))
	defer fake.Close()
	vars := map[string]string{"HF_ENDPOINT": fake.URL, "HF_HUB_CACHE": t.TempDir()}
	resolver := &hub.Resolver{Getenv: func(k string) string { return vars[k] }, Timeout: 2 * time.Second, Home: t.TempDir()}
	lim := Limits{MaxMemory: 1 << 30, MaxPairs: 1 << 22, MaxResponse: 1 << 24, QueueWait: time.Second, MaxQueue: 4}
	post := func(s *Server, path, body string) (int, map[string]any) {
		mux := http.NewServeMux()
		s.Register(mux)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, rec.Body)
		}
		return rec.Code, v
	}
	withHub := New(catalog.Bundled(), lim)
	withHub.ResolveHubIDs(resolver)
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string // in the error, or the model_source's url
	}{
		{name: "a plan of a Hub id names its URL and commit", path: "/api/plan", body: `{"model": "testorg/small"}`,
			code: 200, want: fake.URL + "/testorg/small/resolve/main/config.json"},
		{name: "a P/D of the same id reads it from the cache the plan filled", path: "/api/pd", body: `{"model": "testorg/small", "p": {"tensor_parallel_size": 1}, "d": {"tensor_parallel_size": 2}}`,
			code: 200, want: filepath.Join(vars["HF_HUB_CACHE"], "models--testorg--small", "snapshots", commit, "config.json")},
		{name: "a gated model says to set HF_TOKEN", path: "/api/plan", body: `{"model": "testorg/gated"}`, code: 400, want: "set HF_TOKEN"},
		{name: "a missing model says so", path: "/api/plan", body: `{"model": "testorg/absent"}`, code: 400, want: "no such model or revision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, v := post(withHub, tc.path, tc.body)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %v", code, tc.code, v)
			}
			if code != 200 {
				if msg, _ := json.Marshal(v); !strings.Contains(string(msg), tc.want) || !strings.Contains(string(msg), "model: ") {
					t.Errorf("error %s does not say %q", msg, tc.want)
				}
				return
			}
			src, _ := v["model_source"].(map[string]any)
			if (src["url"] != tc.want && src["path"] != tc.want) || src["commit"] != commit {
				t.Errorf("model_source = %v", src)
			}
		})
	}
	// The cache now holds testorg/small: later requests do not ask again.
	before := requests.Load()
	if code, v := post(withHub, "/api/plan", `{"model": "testorg/small"}`); code != 200 || v["model_source"].(map[string]any)["url"] != nil {
		t.Errorf("warm cache: %d %v", code, v["model_source"])
	}
	if requests.Load() != before {
		t.Errorf("a warm cache asked the Hub")
	}
	// A bundled name has no model_source; a server without a resolver
	// does not ask the Hub.
	if code, v := post(withHub, "/api/plan", `{"model": "Qwen/Qwen3-0.6B"}`); code != 200 || v["model_source"] != nil {
		t.Errorf("bundled: %d %v", code, v["model_source"])
	}
	if code, _ := post(New(catalog.Bundled(), lim), "/api/plan", `{"model": "testorg/other"}`); code != 400 {
		t.Errorf("without a resolver: status %d, want 400", code)
	}
	if requests.Load() != before {
		t.Errorf("a bundled name or a server without a resolver asked the Hub")
	}
}
