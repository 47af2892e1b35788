package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/kvscope/kvscope/server/internal/budget"
)

// TestFirstNumbersBeforeWasm: the server renders the view's numbers into
// the HTML it sends (go-app's prerendering of the same Go code), and they
// are visible, not under go-app's loader, with app.wasm blocked: KV cache
// tokens as kvscope plan --json gives them. Budgets (make budgets): first
// numbers visible within 1 s of navigation; with app.wasm allowed, the
// app interactive (mounted) within 2.5 s.
func TestFirstNumbersBeforeWasm(t *testing.T) {
	ctx, ts, _ := browser(t)
	link := ts.URL + "/?model=openai/gpt-oss-20b&p-tensor-parallel-size=2&d-tensor-parallel-size=4"
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	block := network.SetBlockedURLsParams{URLPatterns: []*network.BlockPattern{{URLPattern: ts.URL + "/web/app.wasm*", Block: true}}}
	if _, err := chromedp.Call(ctx, network.SetBlockedURLs, block); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.CSS(`[data-testid="kv-tokens-p"]`))); err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	// Visible means on top: the element at its centre is the figure, not
	// go-app's loader.
	onTop, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const el = document.querySelector('[data-testid="kv-tokens-p"]'); const r = el.getBoundingClientRect();
		const at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
		return !!at && (at === el || el.contains(at)); })()`))
	if err != nil || !onTop {
		t.Errorf("the server's numbers are covered (on top: %v, %v)", onTop, err)
	}
	if ready, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('kvscope').dataset.wasm || ''`)); ready != "" {
		t.Errorf("data-wasm=%q with app.wasm blocked: the numbers must come from the server", ready)
	}
	want := planTokens(t, "--model", modelPath("openai__gpt-oss-20b"), "--tensor-parallel-size", "2")
	if got := attr(t, ctx, `[data-testid="kv-tokens-p"]`, "data-value"); got != strconv.FormatInt(want, 10) {
		t.Errorf("server-rendered P KV tokens %s, kvscope plan says %d", got, want)
	}
	// The browser's own clock: the first contentful paint after the
	// navigation began (the numbers are in the first HTML, so that paint
	// shows them); the test's wall clock adds the protocol's round trips.
	fcp, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime`))
	if err != nil || fcp < 0 {
		t.Fatalf("no first-contentful-paint entry: %v", err)
	}
	t.Logf("numbers visible %.0f ms after navigation by the browser's clock, %.0f ms by the test's", fcp, budget.Millis(first))
	budget.Within(t, "first numbers visible after navigation (first contentful paint, server-rendered, app.wasm blocked)", fcp/1000, 1, "s")

	if _, err := chromedp.Call(ctx, network.SetBlockedURLs, network.SetBlockedURLsParams{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx)
	ready, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(performance.getEntriesByName('kvscope-ready')[0] || {startTime: -1}).startTime`))
	if err != nil || ready < 0 {
		t.Fatalf("the app set no kvscope-ready mark: %v", err)
	}
	t.Logf("interactive %.0f ms after navigation by the browser's clock, %.0f ms by the test's", ready, budget.Millis(time.Since(start)))
	budget.Within(t, "interactive after navigation (app.wasm mounted, the browser's clock)", ready/1000, 2.5, "s")
	if got := attr(t, ctx, `[data-testid="kv-tokens-p"]`, "data-value"); got != strconv.FormatInt(want, 10) {
		t.Errorf("after the app took over, P KV tokens %s, want %d (no change of value)", got, want)
	}
}
