package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/kvscope/kvscope/agent/runner"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// TestDeploymentPanel: kvscope-agent watch streams a watched decode
// worker (a NIXL ring written from the layout, mapped to D rank 0 by the
// scenario) and a vLLM engine's /metrics whose block size differs from
// kvscope's prediction; in Chromium the live view's Deployment panel lists
// the worker by its engine rank, the engine and the engine pair, the
// NIXL-measured transfers counted, the mismatch in red, and the requests
// drawn as the pair's band.
func TestDeploymentPanel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	ctx, _, _ := browser(t)
	const tok = "watch-test-token"
	srv := newServer(catalog(), serveOptions{Addr: "127.0.0.1:0", Token: tok, Agent: "none", Logf: t.Logf}, nil)
	ts := httptest.NewServer(srv.handler)
	defer ts.Close()

	dir := t.TempDir()
	ring, err := watchtest.NewWriter(dir, "decode-rank0", 4, 256)
	if err != nil {
		t.Fatal(err)
	}
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"544\",engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\",num_gpu_blocks=\"2048\"} 1\n")
	}))
	defer metrics.Close()

	openLivePanel(t, ctx, ts.URL+"/?view=flow")
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runner.Watch(wctx, runner.WatchConfig{Name: "gpu7", Dir: dir, ServerURL: "ws" + strings.TrimPrefix(ts.URL, "http") + "/ws/agent",
			Token: credential(t, tok, "gpu7"), Interval: 20 * time.Millisecond, VLLMMetrics: []string{metrics.URL + "/metrics"}, ScrapeEvery: 200 * time.Millisecond,
			Sides: map[string]string{metrics.URL + "/metrics": "D"}, Model: modeltest.Load(t, "Qwen__Qwen3-0.6B"),
			D: plan.Engine{KVCacheMemoryBytes: 2048 * 16 * 28 * 8 * 128 * 2 * 2, MaxModelLen: 4096}, Agents: map[string]string{"decode-rank0": "d0"}, Logf: t.Logf})
	}()
	defer func() { stop(); <-done }()
	for i := 0; i < 5; i++ {
		ring.Push(watchtest.Transfer("rx", 3<<20, 20, 900)...)
	}
	waitFor(t, ctx, "the watched worker and engine in the Deployment panel",
		`document.querySelectorAll('[data-testid="live-deployment"] [data-testid="deployment-engine"]').length == 3`, 20*time.Second)
	waitFor(t, ctx, "the worker's five NIXL transfers counted",
		`[...document.querySelectorAll('[data-testid="deployment-engine"]')].some(r => r.dataset.agent == 'gpu7/decode-rank0' && r.children[7].textContent == '5' && r.children[0].textContent == 'D rank 0 of TP 1 · mapped in the scenario')`, 20*time.Second)
	// The ring mapped to D rank 0 draws its requests as the deployment's
	// band from P rank 0 (both at TP 1): 5 × 3 MiB, timing measured by NIXL.
	waitFor(t, ctx, "the engine pair's row: the linked ring's five requests",
		`[...document.querySelectorAll('[data-testid="deployment-engine"]')].some(r => r.dataset.agent == 'gpu7/deployment' && r.children[7].textContent == '5' && r.children[0].textContent == 'P TP 1 → D TP 1 · every linked rank')`, 20*time.Second)
	waitFor(t, ctx, "the watched requests in the live bands",
		`[...document.querySelectorAll('[data-agent="gpu7/deployment"] [data-testid="live-band"]')].some(b => b.dataset.p == '0' && b.dataset.d == '0' && b.dataset.timing == 'measured' && b.dataset.bytes == String(5*3*1048576))`, 20*time.Second)
	waitFor(t, ctx, "the block size mismatch", `!!document.querySelector('[data-testid="plan-mismatch"][data-field="block_size"]')`, 20*time.Second)
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="plan-mismatch"]').textContent`))
	color, err2 := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('[data-testid="plan-mismatch"]')).color`))
	if err != nil || err2 != nil || text != "block_size: observed 544, predicted 16" || !isRed(color) {
		t.Errorf("the mismatch reads %q in %s (%v %v), want the fields in red", text, color, err, err2)
	}
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "deployment", shot)
}

// isRed reports whether a CSS rgb() color is mostly red.
func isRed(c string) bool {
	var r, g, b int
	if _, err := fmt.Sscanf(strings.ReplaceAll(c, " ", ""), "rgb(%d,%d,%d)", &r, &g, &b); err != nil {
		return false
	}
	return r > 150 && g < 110 && b < 110
}
