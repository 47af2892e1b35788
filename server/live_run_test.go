package main

import (
	"context"
	kvapp "github.com/kvscope/kvscope/app"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/server/api"
)

// liveLimits are the default limits with maxPairs descriptor pairs.
func liveLimits(maxPairs int64) api.Limits {
	l := api.DefaultLimits()
	l.MaxPairs = maxPairs
	return l
}

// TestLiveScenario: the app's settings become the embedded agent's
// scenario: the same model, engines, connector and layout, every request
// the view's prompt and hit; the KV pools fitted to the host memory; what
// the agent cannot run is refused with the field named.
func TestLiveScenario(t *testing.T) {
	q := "model=Qwen%2FQwen3-0.6B&view=flow&p-tensor-parallel-size=1&d-tensor-parallel-size=2&prompt-tokens=512&prefix-hit-tokens=128&connector=nixl-push&layout=blocks-first&vllm-version=0.24.0"
	s, adjusted, err := liveScenario(context.Background(), q, catalog(), embeddedHostLimit, api.New(catalog(), liveLimits(1<<24)))
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != "Qwen/Qwen3-0.6B" || s.P.TensorParallelSize != 1 || s.D.TensorParallelSize != 2 || s.Connector != "nixl-push" || s.Layout != "blocks-first" ||
		s.PromptMin != 512 || s.PromptMax != 512 || s.HitTokens != 128 || s.HitFraction != 0 || s.P.VLLMVersion != "0.24.0" || s.D.VLLMVersion != "0.24.0" {
		t.Errorf("scenario %+v", s)
	}
	// vLLM's default 40 GiB per rank does not fit 512 MiB: both sides fitted.
	if len(adjusted) != 2 || !strings.HasPrefix(adjusted[0], "P: ") || !strings.HasPrefix(adjusted[1], "D: ") ||
		!strings.Contains(adjusted[0], "--num-gpu-blocks-override ") || !strings.Contains(adjusted[1], "--num-gpu-blocks-override ") {
		t.Errorf("adjusted %q", adjusted)
	}
	for _, c := range []struct{ query, want string }{
		{"model=Qwen%2FQwen3-0.6B&p-tensor-parallel-size=three", "p-tensor-parallel-size"},
		{"model=nope%2Fnope", "nope/nope"},
		{"model=Qwen%2FQwen3-0.6B&draft=custom&draft-config=x", "draft"},
		{"model=Qwen%2FQwen3-0.6B&prompt-tokens=512&prefix-hit-tokens=512", "prefix_hit_tokens = 512"},
		{"model=Qwen%2FQwen3-0.6B&prompt-tokens=2048", "over this server's --max-pairs 1000"},
		{"model=Qwen%2FQwen3-0.6B&prompt-tokens=30000", "one 30000-token request needs"},
		{"%zz", "query"},
	} {
		if _, _, err := liveScenario(context.Background(), c.query, catalog(), embeddedHostLimit, api.New(catalog(), liveLimits(1000))); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.query, err, c.want)
		}
	}
}

// TestLiveScenarioSeed: the default view's deployment (Qwen3.6-35B-A3B +
// DFlash, P TP 2 -> D TP 4, 262,144 tokens, the group-pair branch) runs
// live at reduced scale. In the default memory the plans stay as shown:
// at 1,024 tokens the padding-bytes selector would group differently (it
// weighs bytes per request at max_model_len), so each side holds its g
// (3 and 11, the view's) with --kv-cache-group-size. In 1.5 GiB that does
// not fit, and both sides run at the largest length that does, with the
// plans' change said; in 512 MiB nothing fits and the refusal names the
// flag that gives the agent more.
func TestLiveScenarioSeed(t *testing.T) {
	q := kvapp.DefaultSettings().Query().Encode()
	a := api.New(catalog(), liveLimits(1<<26))
	s, adjusted, err := liveScenario(context.Background(), q, catalog(), embeddedHostLimit, a)
	if err != nil {
		t.Fatal(err)
	}
	if s.P.GroupSize != 3 || s.D.GroupSize != 11 || s.P.MaxModelLen != 1024 || len(adjusted) != 2 || !strings.Contains(adjusted[0], "--kv-cache-group-size 3 (the plan's g") || strings.Contains(strings.Join(adjusted, " "), "the plan changes") {
		t.Errorf("in %d MiB: P %+v, adjusted %q", embeddedHostLimit>>20, s.P, adjusted)
	}
	s, adjusted, err = liveScenario(context.Background(), q, catalog(), 1536<<20, a)
	if err != nil {
		t.Fatal(err)
	}
	if s.P.MaxModelLen <= 1024 || s.P.MaxModelLen >= 262144 || !strings.Contains(adjusted[0], "the plan changes there") {
		t.Errorf("in 1536 MiB: max-model-len %d, adjusted %q", s.P.MaxModelLen, adjusted)
	}
	if _, _, err = liveScenario(context.Background(), q, catalog(), 512<<20, a); err == nil || !strings.Contains(err.Error(), "kvscope serve --agent-memory-mib") {
		t.Errorf("in 512 MiB: %v", err)
	}
}

// TestLiveRunGuards: /api/live/run changes what the server runs, so it is
// behind every API POST's rules (a token, JSON, this server's origin), and
// a server without an embedded agent says so.
func TestLiveRunGuards(t *testing.T) {
	const tok = "run-live-test-token"
	for _, c := range []struct {
		name    string
		agent   string
		header  map[string]string
		want    int
		inError string
	}{
		{"no token", "embedded", map[string]string{"Content-Type": "application/json"}, http.StatusUnauthorized, "token"},
		{"foreign origin", "embedded", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tok, "Origin": "http://evil.example"}, http.StatusForbidden, "own pages"},
		{"a form", "embedded", map[string]string{"Content-Type": "text/plain", "Authorization": "Bearer " + tok}, http.StatusUnsupportedMediaType, "application/json"},
		{"no embedded agent", "none", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tok}, http.StatusConflict, "no embedded agent"},
	} {
		srv := newServer(catalog(), serveOptions{Addr: "127.0.0.1:0", Token: tok, RequireToken: true, Agent: c.agent, Logf: t.Logf}, nil)
		ts := httptest.NewServer(srv.handler)
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/live/run", strings.NewReader(`{"query":"model=Qwen%2FQwen3-0.6B"}`))
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := new(strings.Builder)
		_, _ = io.Copy(body, resp.Body)
		resp.Body.Close()
		ts.Close()
		if resp.StatusCode != c.want || !strings.Contains(body.String(), c.inError) {
			t.Errorf("%s: %d %s, want %d with %q", c.name, resp.StatusCode, body, c.want, c.inError)
		}
	}
}

// TestEmbeddedRestart: a restart stops the running agent before the next
// starts (never two at once) and reports the run it started.
func TestEmbeddedRestart(t *testing.T) {
	var mu sync.Mutex
	running, most := 0, 0
	var names []string
	e := &embeddedAgent{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.begin(ctx, func(ctx context.Context, s scenario.Scenario) {
		mu.Lock()
		running++
		most = max(most, running)
		names = append(names, s.Name)
		mu.Unlock()
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // an agent takes a moment to stop
		mu.Lock()
		running--
		mu.Unlock()
	}, embeddedScenario())
	for i := 0; i < 3; i++ {
		s := embeddedScenario()
		s.Name = "run live"
		run, err := e.restart(s, []string{"fitted"})
		if err != nil || run.Runs != i+2 || run.Scenario.Name != "run live" || len(run.Adjusted) != 1 {
			t.Fatalf("restart %d: %+v, %v", i, run, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if most != 1 || len(names) != 4 || names[0] != "embedded" {
		t.Errorf("at most %d running at once (want 1), runs %v", most, names)
	}
}
