package main

import (
	"context"
	kvapp "github.com/kvscope/kvscope/app"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/kvscope/kvscope/agent/scenario"
)

// TestRunLive: with the server's embedded agent streaming its default
// scenario (gpt-oss-20b, P TP 2 → D TP 4), the descriptor flow view of
// another configuration (Qwen3-0.6B, P TP 1 → D TP 2, a 512-token prompt
// with a 128-token hit) has "Run live" restart the agent on it: the panel
// says what runs and how its pools were fitted, and the agent's live bands
// become the flow view's bands (the same rank and group pairs, each having
// moved a whole number of the computed transfer's bytes).
func TestRunLive(t *testing.T) {
	ctx, _, _ := browser(t)
	ts := embeddedAgentServer(t, "run-live-test-token")

	q := "/?model=Qwen%2FQwen3-0.6B&view=flow&p-tensor-parallel-size=1&d-tensor-parallel-size=2&prompt-tokens=512&prefix-hit-tokens=128"
	openLivePanel(t, ctx, ts.URL+q)
	waitFor(t, ctx, "the default scenario's bands (D TP 4)",
		`[...document.querySelectorAll('[data-agent="embedded"] [data-testid="live-band"]')].some(b => b.dataset.d == '3')`, 30*time.Second)
	waitFor(t, ctx, "the computed flow", `document.querySelectorAll('#flow-svg path.band').length > 0`, 30*time.Second)
	if err := chromedp.Do(ctx, chromedp.Click(`[data-testid="live-run"]`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the restart's answer", `document.querySelector('[data-testid="live-run-status"]').dataset.state == 'ok'`, 30*time.Second)
	status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-run-status"]').textContent`))
	if !strings.Contains(status, "Qwen/Qwen3-0.6B, P TP1 -> D TP2") || !strings.Contains(status, "128-token prefix hits") || !strings.Contains(status, "--num-gpu-blocks-override") {
		t.Errorf("status %q: want the run and its fitted pools", status)
	}
	same := `(() => {
		const key = b => [b.dataset.p, b.dataset.d, b.dataset.pg, b.dataset.dg].join('/');
		const flow = new Map([...document.querySelectorAll('#flow-svg path.band')].map(b => [key(b), Number(b.dataset.bytes)]));
		const live = [...document.querySelectorAll('[data-agent="embedded"] [data-testid="live-band"]')];
		if (live.length != flow.size || flow.size == 0) return false;
		return live.every(b => flow.has(key(b)) && Number(b.dataset.bytes) > 0 && Number(b.dataset.bytes) % flow.get(key(b)) == 0);
	})()`
	waitFor(t, ctx, "the live bands are the computed flow's", same, 30*time.Second)
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "run-live", shot)
}

// TestRunLiveDefaultView: Run live on the default view (Qwen3.6-35B-A3B +
// DFlash, P TP 2 -> D TP 4, 262,144 tokens, the group-pair branch) runs
// in the embedded agent's default memory: each side keeps its plan as
// shown at a shorter max_model_len, its g held with --kv-cache-group-size
// (3 on P, 11 on D, the view's), and the live bands are the flow's rank
// and group pairs.
func TestRunLiveDefaultView(t *testing.T) {
	ctx, _, _ := browser(t)
	ts := embeddedAgentServer(t, "run-live-default-token")

	q := "/?" + kvapp.DefaultSettings().Query().Encode() + "&view=flow"
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+q), chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #live`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the computed flow", `document.querySelectorAll('#flow-svg path.band').length > 0`, 60*time.Second)
	if err := chromedp.Do(ctx, chromedp.Click(`[data-testid="live-run"]`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the restart's answer", `['ok', 'error'].includes(document.querySelector('[data-testid="live-run-status"]').dataset.state)`, 60*time.Second)
	status, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-run-status"]').textContent`))
	if state := attr(t, ctx, `[data-testid="live-run-status"]`, "data-state"); state != "ok" {
		t.Fatalf("Run live on the default view: %s", status)
	}
	for _, want := range []string{"--kv-cache-group-size 3", "--kv-cache-group-size 11", "--max-model-len"} {
		if !strings.Contains(status, want) {
			t.Errorf("status %q lacks %q", status, want)
		}
	}
	same := `(() => {
		const key = b => [b.dataset.p, b.dataset.d, b.dataset.pg, b.dataset.dg].join('/');
		const flow = new Set([...document.querySelectorAll('#flow-svg path.band')].map(key));
		const live = [...document.querySelectorAll('[data-agent="embedded"] [data-testid="live-band"]')];
		if (live.length != flow.size || flow.size == 0) return false;
		return live.every(b => flow.has(key(b)) && Number(b.dataset.bytes) > 0);
	})()`
	waitFor(t, ctx, "the live bands are the computed flow's rank and group pairs", same, 90*time.Second)
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(80))
	artifact(t, "run-live-default", shot)
}

// embeddedAgentServer serves kvscope with its embedded agent running
// (token tok) until the test ends.
func embeddedAgentServer(t *testing.T, tok string) *httptest.Server {
	t.Helper()
	srv := newServer(catalog(), serveOptions{Addr: "127.0.0.1:0", Token: tok, Agent: "embedded", Logf: t.Logf}, nil)
	ts := httptest.NewServer(srv.handler)
	t.Cleanup(ts.Close)
	agentCtx, stopAgent := context.WithCancel(context.Background())
	t.Cleanup(stopAgent)
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + "/ws/agent"
	srv.embedded.begin(agentCtx, func(ctx context.Context, s scenario.Scenario) {
		runEmbeddedAgent(ctx, catalog(), url, tok, s, srv.embedded.memory, t.Logf)
	}, embeddedScenario())
	return ts
}
