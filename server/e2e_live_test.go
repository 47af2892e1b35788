package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/kvscope/kvscope/agent/gpu"
)

// liveBytes is the bytes the live bands have moved so far, summed over
// every band the page draws, and how many bands it draws.
const liveBytesJS = `(() => { let n = 0, bytes = 0;
	document.querySelectorAll('[data-testid="live-band"]').forEach(b => { n++; bytes += Number(b.dataset.bytes); });
	return [n, bytes]; })()`

func liveBytes(t *testing.T, ctx context.Context) (bands int, bytes float64) {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](liveBytesJS))
	if err != nil {
		t.Fatalf("reading the live bands: %v", err)
	}
	return int(v[0]), v[1]
}

// waitFor polls a JavaScript condition until it holds or the time is up.
func waitFor(t *testing.T, ctx context.Context, what, cond string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			artifact(t, "live-failed", shot)
			counters, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('.live-counters')?.textContent || ''`))
			t.Fatalf("%s: not within %v (%v); the panel says: %s", what, limit, err, counters)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// openLivePanel loads url in the page and waits for the app's live panel.
func openLivePanel(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #live`))); err != nil {
		t.Fatalf("the live panel never showed: %v", err)
	}
}

// TestLiveView runs the server with its embedded agent and watches the
// descriptor flow view's live panel: bands move as the agent transfers,
// transfers are verified, the GPU panel shows the agent's hello, pause
// freezes the drawing and resume catches up, and the events export as a
// trace.
func TestLiveView(t *testing.T) {
	ctx, _, urls := browser(t)
	const tok = "live-view-test-token"
	srv := newServer(catalog(), serveOptions{Addr: "127.0.0.1:0", Token: tok, Agent: "embedded", Logf: t.Logf}, nil)
	ts := httptest.NewServer(srv.handler)
	defer ts.Close()

	// The page subscribes before the agent starts, so it sees the agent's
	// hello live: the hub replays only its most recent events, and a busy
	// agent's hello leaves that window within seconds.
	// Keep the page's websockets reachable, to close one from the test.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: `window.__sockets = []; const WS = window.WebSocket;
			window.WebSocket = function(url, protocols) { const s = new WS(url, protocols); window.__sockets.push(s); return s; };
			window.WebSocket.prototype = WS.prototype;`}); err != nil {
		t.Fatal(err)
	}
	openLivePanel(t, ctx, ts.URL+"/?view=flow")
	waitFor(t, ctx, "the live websocket opens", `!!document.querySelector('[data-testid="live-status"][data-state="open"]')`, 15*time.Second)

	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		runEmbeddedAgent(agentCtx, catalog(), "ws"+strings.TrimPrefix(ts.URL, "http")+"/ws/agent", tok, embeddedScenario(), embeddedHostLimit, t.Logf)
	}()
	defer func() { stopAgent(); <-agentDone }()

	waitFor(t, ctx, "live bands appear", `document.querySelectorAll('[data-testid="live-band"]').length > 0`, 30*time.Second)

	// Live bands move: their counters grow, a band that just moved pulses,
	// and they are updated in place (a band's tooltip survives a redraw).
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(window.__band = document.querySelector('[data-testid="live-band"]'), true)`)); err != nil {
		t.Fatal(err)
	}
	n1, b1 := liveBytes(t, ctx)
	time.Sleep(2 * time.Second)
	n2, b2 := liveBytes(t, ctx)
	t.Logf("live bands: %d bands, %.0f bytes; 2 s later %d bands, %.0f bytes", n1, b1, n2, b2)
	if b2 <= b1 {
		t.Errorf("the live bands did not move in 2 s: %.0f bytes, then %.0f", b1, b2)
	}
	if same, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="live-band"]') === window.__band`)); !same {
		t.Errorf("a redraw replaced the live bands instead of updating them in place")
	}
	waitFor(t, ctx, "a band pulses as a batch moves", `document.querySelectorAll('[data-testid="live-band"].live').length > 0`, 5*time.Second)
	// The agent's deployment (gpt-oss-20b, P TP 2 → D TP 4) comes from its
	// events, whatever the form says.
	ranks, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`(() => { const p = new Set(), d = new Set();
		document.querySelectorAll('[data-testid="live-band"]').forEach(b => { p.add(b.dataset.p); d.add(b.dataset.d); });
		return [p.size, d.size]; })()`))
	if err != nil || len(ranks) != 2 || ranks[0] != 2 || ranks[1] != 4 {
		t.Errorf("bands leave %v P ranks for D ranks, want 2 → 4 (the embedded agent's scenario): %v", ranks, err)
	}
	// Host copies are measured: no band may be drawn dashed.
	if dashed, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="live-band"][stroke-dasharray], [data-testid="live-band"][data-timing="synthesized"]').length`)); dashed != 0 {
		t.Errorf("%d bands of the host backend's measured copies are drawn as synthesized", dashed)
	}

	// Transfers are verified exact, and listed.
	waitFor(t, ctx, "a verified transfer", `Number(document.querySelector('[data-testid="live-verified"]')?.dataset.count || 0) > 0`, 15*time.Second)
	if rows, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="live-transfers"] [data-testid="live-transfer"][data-verified="exact"]').length`)); rows == 0 {
		t.Errorf("the recent transfers list no exact transfer")
	}
	// The hub's {"history": N} header and history frames were read as such:
	// nothing was dropped as malformed.
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="live-malformed"]').length`)); n != 0 {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-malformed"]').parentElement.innerText`))
		t.Errorf("the live view dropped malformed frames: %s", text)
	}
	// Their totals say whose clock measured them: the host backend's.
	if timing, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-transfer"][data-source="host"] .timing')?.innerText || ""`)); timing != "measured by host" {
		t.Errorf("a transfer's timing cell says %q, want %q", timing, "measured by host")
	}

	// The GPU panel shows the agent's hello.
	want := ""
	if r := gpu.Discover(); r.Reason != "" {
		want = "No GPUs: " + r.Reason
	} else if len(r.GPUs) > 0 {
		want = r.GPUs[0].UUID
	}
	gpus, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-gpus"]').innerText`))
	if err != nil || !strings.Contains(gpus, want) || !strings.Contains(gpus, "embedded on ") || !strings.Contains(gpus, "DRAM") {
		t.Errorf("the GPU panel shows %q, want the embedded agent's hello with %q (%v)", gpus, want, err)
	}

	// The timeline draws the 1 Hz samples.
	waitFor(t, ctx, "the timeline draws", `!!document.querySelector('[data-testid="live-timeline"] canvas')`, 10*time.Second)

	// Pause freezes the drawing while events keep arriving; resume catches up.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid="live-pause"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the pause button turns into resume", `document.querySelector('[data-testid="live-pause"]').textContent === 'Resume'`, 5*time.Second)
	_, p1 := liveBytes(t, ctx)
	time.Sleep(1500 * time.Millisecond)
	_, p2 := liveBytes(t, ctx)
	if p2 != p1 {
		t.Errorf("paused, the bands still moved: %.0f bytes, then %.0f", p1, p2)
	}
	waitFor(t, ctx, "events counted while paused", `Number(document.querySelector('[data-testid="live-paused"]')?.dataset.count || 0) > 0`, 5*time.Second)
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "live-paused", shot)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid="live-pause"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the bands move again after resume", `(() => { let bytes = 0;
		document.querySelectorAll('[data-testid="live-band"]').forEach(b => { bytes += Number(b.dataset.bytes); });
		return bytes > `+jsNumber(p2)+`; })()`, 5*time.Second)

	// A dropped connection comes back: the hub's replay of its recent
	// events is recognised, not counted twice, and the bands go on.
	_, r1 := liveBytes(t, ctx)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(window.__sockets.at(-1).send('bye'), true)`)); err != nil {
		t.Fatal(err) // the hub is read-only: anything a browser sends closes its connection
	}
	waitFor(t, ctx, "the websocket reconnects", `window.__sockets.length >= 2 && window.__sockets.at(-1).readyState === 1 &&
		!!document.querySelector('[data-testid="live-status"][data-state="open"]')`, 10*time.Second)
	waitFor(t, ctx, "the replayed events are ignored", `Number(document.querySelector('[data-testid="live-ignored"]')?.dataset.count || 0) > 0`, 5*time.Second)
	waitFor(t, ctx, "the bands move after the reconnect", `(() => { let bytes = 0;
		document.querySelectorAll('[data-testid="live-band"]').forEach(b => { bytes += Number(b.dataset.bytes); });
		return bytes > `+jsNumber(r1)+`; })()`, 5*time.Second)
	gaps, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-gaps"]').dataset.count`))
	t.Logf("after the reconnect: %s events missed", gaps)

	// The export is a Chrome/Perfetto trace of the kept events.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { window.__trace = null;
		kvscope.download = (name, mime, text) => { window.__trace = {name, text}; }; return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid="live-export-trace"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the trace export", `!!window.__trace`, 5*time.Second)
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.__trace.name + '\n' + window.__trace.text`))
	if err != nil {
		t.Fatal(err)
	}
	name, body, _ := strings.Cut(text, "\n")
	var trace struct {
		TraceEvents []struct {
			Cat string `json:"cat"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal([]byte(body), &trace); err != nil || !strings.HasSuffix(name, ".json") {
		t.Fatalf("the trace export %q is not JSON: %v", name, err)
	}
	cats := map[string]int{}
	for _, e := range trace.TraceEvents {
		cats[e.Cat]++
	}
	if cats["desc.measured"] == 0 || cats["transfer.measured"] == 0 || cats["desc.synthesized"] != 0 {
		t.Errorf("trace categories %v: want measured descriptor batches and transfers, nothing synthesized", cats)
	}

	shot, _ = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "live", shot)

	// The panel survives a re-render of the page (dark mode) and keeps
	// moving.
	_, d1 := liveBytes(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[title="dark mode (d)"]`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the bands move in dark mode", `document.querySelector('#kvscope').classList.contains('dark') && (() => { let bytes = 0;
		document.querySelectorAll('[data-testid="live-band"]').forEach(b => { bytes += Number(b.dataset.bytes); });
		return bytes > `+jsNumber(d1)+`; })()`, 5*time.Second)
	time.Sleep(1200 * time.Millisecond) // a sample redraws the timeline in the dark theme
	shot, _ = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "live-dark", shot)
	for _, u := range *urls {
		if !strings.HasPrefix(u, ts.URL) && !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, "blob:") && u != "about:blank" {
			t.Errorf("the app loaded %s from another host", u)
		}
	}
}

func jsNumber(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// TestLiveViewWithoutServer opens the descriptor flow view of the static
// site: there is no /ws/live, and the live panel says so quietly.
func TestLiveViewWithoutServer(t *testing.T) {
	ctx, _, _ := browser(t)
	dir := t.TempDir()
	if err := writeSite(dir); err != nil {
		t.Fatal(err)
	}
	fsrv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer fsrv.Close()
	openLivePanel(t, ctx, fsrv.URL+"/?view=flow&model=Qwen/Qwen3-0.6B&p-tensor-parallel-size=1&d-tensor-parallel-size=2")
	waitFor(t, ctx, "the panel says there is no live server", `!!document.querySelector('[data-testid="live-status"][data-state="none"]')`, 15*time.Second)
	// Quietly: no empty bands, timeline or lists, and the configured flow
	// still draws.
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`getComputedStyle(document.querySelector('#live .live-body')).display === 'none'`))
	if err != nil || !hidden {
		t.Errorf("without a live server the live panel's body shows (%v)", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#flow-svg path.band`))); err != nil {
		t.Errorf("the configured flow does not draw: %v", err)
	}
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "live-no-server", shot)
}
