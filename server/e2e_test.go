package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/kvscope/kvscope/server/internal/budget"
	"github.com/kvscope/kvscope/web"
)

// browser starts Debian's Chromium on a server with the real app. Without
// Chromium or a built app.wasm the test skips, unless
// KVSCOPE_REQUIRE_BROWSER is set (CI sets it), where it fails.
func browser(t *testing.T) (context.Context, *httptest.Server, *[]string) {
	t.Helper()
	return browserWith(t, serveOptions{Addr: "127.0.0.1:0", Agent: "none", Logf: t.Logf})
}

// browserWith is browser on a server with the options o.
func browserWith(t *testing.T, o serveOptions) (context.Context, *httptest.Server, *[]string) {
	t.Helper()
	require := os.Getenv("KVSCOPE_REQUIRE_BROWSER") != ""
	skip := func(format string, args ...any) {
		t.Helper()
		if require {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if _, err := fs.Stat(web.Files(), "app.wasm"); err != nil {
		skip("web/app.wasm is not built into this test binary: run make test (it builds it first)")
	}
	path := ""
	for _, p := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if found, err := exec.LookPath(p); err == nil {
			path = found
			break
		}
	}
	if path == "" {
		skip("no Chromium on PATH: apt-get install chromium (.ci/run does)")
	}
	ts := httptest.NewServer(newMux(catalog(), o))
	t.Cleanup(ts.Close)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("window-size", "1400,1000"),
		chromedp.UserDataDir(t.TempDir()))
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// A hang's ceiling, not a budget: the longest browser test takes under
	// 40 s here.
	ctx, cancelTimeout := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(cancelTimeout)
	var mu sync.Mutex
	var urls []string
	if err := chromedp.Do(ctx); err != nil {
		skip("Chromium did not start: %v", err)
	}
	chromedp.Listen(ctx, func(ev any) {
		var req *network.Request
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			req = e.Request
		case network.EventRequestWillBeSent:
			req = e.Request
		}
		if req != nil {
			mu.Lock()
			urls = append(urls, req.URL)
			mu.Unlock()
		}
	})
	return ctx, ts, &urls
}

// artifact saves a screenshot where CI keeps test artifacts.
func artifact(t *testing.T, name string, png []byte) {
	dir := os.Getenv("KVSCOPE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "testdata", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err == nil {
		os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
}

func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	res, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	if err != nil {
		t.Fatalf("%s[%s]: %v", sel, name, err)
	}
	return res.Value
}

// planTokens is kvscope plan --json's KV cache tokens for the same flags.
func planTokens(t *testing.T, args ...string) int64 {
	t.Helper()
	code, out, errs := runCLI(t, append(append([]string{"plan"}, args...), "--json")...)
	if code != 0 {
		t.Fatalf("plan %v: %s", args, errs)
	}
	var p struct {
		Tokens int64 `json:"kv_cache_tokens"`
		Groups int   `json:"num_groups"`
	}
	json.Unmarshal([]byte(out), &p)
	return p.Tokens
}

func waitReady(t *testing.T, ctx context.Context) time.Duration {
	t.Helper()
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] [data-testid="kv-tokens-p"]`))); err != nil {
		t.Fatalf("the app never reported data-wasm=ready: %v", err)
	}
	return time.Since(start)
}

func TestBrowserApp(t *testing.T) {
	ctx, ts, urls := browser(t)
	link := ts.URL + "/?model=openai/gpt-oss-20b&p-tensor-parallel-size=2&d-tensor-parallel-size=4&prompt-tokens=300"

	// The server-rendered page carries the plan too, but not data-wasm=ready:
	// only the mounted WebAssembly app sets it.
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx)
	budget.Within(t, "first plan visible after navigation", time.Since(start).Seconds(), 2, "s")
	p := attr(t, ctx, `[data-testid="kv-tokens-p"]`, "data-value")
	d := attr(t, ctx, `[data-testid="kv-tokens-d"]`, "data-value")
	wantP := planTokens(t, "--model", modelPath("openai__gpt-oss-20b"), "--tensor-parallel-size", "2")
	wantD := planTokens(t, "--model", modelPath("openai__gpt-oss-20b"), "--tensor-parallel-size", "4")
	if p != strconv.FormatInt(wantP, 10) || d != strconv.FormatInt(wantD, 10) {
		t.Errorf("browser shows P %s, D %s KV tokens; kvscope plan --json says %d, %d", p, d, wantP, wantD)
	}
	if g := attr(t, ctx, `[data-testid="groups-p"]`, "data-value"); g != "2" {
		t.Errorf("groups-p = %q, want 2", g)
	}
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "plan", shot)

	// Change D's TP through the form: the numbers and the URL follow.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-view="configure"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#d-tensor-parallel-size`))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const el = document.getElementById('d-tensor-parallel-size');
		el.value = '8'; el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-view="plan"]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="kv-tokens-d"]`))); err != nil {
		t.Fatal(err)
	}
	wantD8 := planTokens(t, "--model", modelPath("openai__gpt-oss-20b"), "--tensor-parallel-size", "8")
	if d8 := attr(t, ctx, `[data-testid="kv-tokens-d"]`, "data-value"); d8 != strconv.FormatInt(wantD8, 10) {
		t.Errorf("after D TP 8: D shows %s KV tokens, kvscope plan says %d", d8, wantD8)
	}
	shared, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shared, "d-tensor-parallel-size=8") || !strings.Contains(shared, "model=openai%2Fgpt-oss-20b") {
		t.Errorf("the URL did not follow the change: %s", shared)
	}
	ms := attr(t, ctx, `#recompute`, "data-ms")
	t.Logf("recompute after the change: %s ms", ms)
	// The footer's time is read from the browser's high-resolution timer:
	// WebAssembly's time.Now ticks in milliseconds and printed 0.00.
	if v, err := strconv.ParseFloat(ms, 64); err != nil || v <= 0 {
		t.Errorf("the footer says computed in %q ms, want a positive figure", ms)
	}

	// A shared link restores the view in a fresh page.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank"), chromedp.Navigate(shared)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx)
	if d8 := attr(t, ctx, `[data-testid="kv-tokens-d"]`, "data-value"); d8 != strconv.FormatInt(wantD8, 10) {
		t.Errorf("the shared link restores D at %s KV tokens, want %d", d8, wantD8)
	}
	shot, _ = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "shared-link", shot)

	// The descriptor flow view proves the transfer in the browser.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-view="flow"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="verdict"][data-value="exact"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#flow-svg path.band`))); err != nil {
		t.Fatalf("flow view: %v", err)
	}
	shot, _ = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "flow", shot)
	// The SVG export of this view is the flow diagram with the page's CSS.
	svgLen, err := chromedp.Run(ctx, chromedp.Evaluate[int](`kvscope.viewSVG().svg.length`))
	if err != nil || svgLen < 1000 {
		t.Errorf("SVG export: %d bytes, %v", svgLen, err)
	}

	// Charts come from the ECharts bundle this server serves.
	// They draw in the chart worker, which says what each drew.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-view="charts"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-tokens canvas`))); err != nil {
		t.Fatalf("charts view: %v", err)
	}
	waitFor(t, ctx, "the three charts are drawn", `['chart-tokens', 'chart-groups', 'chart-descs'].every(id => +document.getElementById(id).dataset.drawn > 0)`, time.Minute)
	shot, _ = chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "charts", shot)

	for _, u := range *urls {
		if !strings.HasPrefix(u, ts.URL) && !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, "blob:") && u != "about:blank" {
			t.Errorf("the app loaded %s from another host", u)
		}
	}
}

// TestRecomputeBudget times a recompute of Qwen3.6-35B-A3B + DFlash (both
// plans, the TP-invariant plan and the transfer) after an input change.
// Its budget is 50 ms (package budget: make budgets holds it, make test
// only to ten times as much).
func TestRecomputeBudget(t *testing.T) {
	ctx, ts, _ := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx)
	setTP := func(tp string) {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { document.querySelector('button[data-view="configure"]').click(); return true; })()`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#d-tensor-parallel-size`))); err != nil {
			t.Fatal(err)
		}
		chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const el = document.getElementById('d-tensor-parallel-size');
			el.value = '`+tp+`'; el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`))
	}
	// measure changes D's TP (on the descriptor flow view, a recompute
	// includes the transfer: it opens that view after the change) and
	// reads the recompute's time.
	measure := func(tp string, flow bool) float64 {
		setTP(tp)
		if flow {
			if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-view="flow"]`)), chromedp.WaitVisible(chromedp.CSS(`#flow-svg`))); err != nil {
				t.Fatal(err)
			}
		} else if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#recompute`))); err != nil {
			t.Fatal(err)
		}
		ms, _ := strconv.ParseFloat(attr(t, ctx, `#recompute`, "data-ms"), 64)
		return ms
	}
	const recomputeBudget = 50 // ms
	limit := recomputeBudget * budget.Slack()
	var worst float64
	for _, step := range []struct {
		tp   string
		flow bool
	}{{"8", false}, {"2", false}, {"4", false}, {"8", true}, {"4", true}} {
		// A VM that stalls one recompute (a GC, another process) gets two
		// more tries at the same change; a slow recompute is slow in all.
		best := math.Inf(1)
		for try := 0; try < 3 && best > limit; try++ {
			if try > 0 {
				setTP("1") // away, so that the next change recomputes again
			}
			ms := measure(step.tp, step.flow)
			t.Logf("recompute with D TP %s (flow view %v, try %d): %.1f ms", step.tp, step.flow, try+1, ms)
			best = min(best, ms)
		}
		worst = max(worst, best)
	}
	budget.Within(t, "the slowest recompute (five changes, the best of three tries each)", worst, recomputeBudget, "ms")
}

// TestStaticSite writes the static website and runs it from a plain file
// server: the planning happens in the browser alone.
func TestStaticSite(t *testing.T) {
	ctx, _, urls := browser(t)
	dir := t.TempDir()
	if err := writeSite(dir); err != nil {
		t.Fatal(err)
	}
	fsrv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer fsrv.Close()
	*urls = nil
	if err := chromedp.Do(ctx, chromedp.Navigate(fsrv.URL+"/?model=Qwen/Qwen3-0.6B&p-tensor-parallel-size=1&d-tensor-parallel-size=2")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx)
	want := planTokens(t, "--model", modelPath("Qwen__Qwen3-0.6B"), "--tensor-parallel-size", "2")
	if d := attr(t, ctx, `[data-testid="kv-tokens-d"]`, "data-value"); d != strconv.FormatInt(want, 10) {
		t.Errorf("static site: D shows %s KV tokens, kvscope plan says %d", d, want)
	}
	for _, u := range *urls {
		if strings.Contains(u, "/api/") {
			t.Errorf("the static site called the API: %s", u)
		}
	}
}

// TestCheckView pastes a real startup log into the Check view: the table
// and the verdict come from the same core as kvscope check, and the plan
// the log implies loads into the other views.
func TestCheckView(t *testing.T) {
	ctx, ts, _ := browser(t)
	log, err := os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", "qwen36-35b-a3b-nvfp4-mtp2-v0.20.2-262k.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?view=check&unknown-key=1")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #check-log`)), chromedp.WaitVisible(chromedp.CSS(`#unknown-keys`))); err != nil {
		t.Fatal(err)
	}
	text, _ := json.Marshal(string(log))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const el = document.getElementById('check-log');
		el.value = `+string(text)+`; el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#check-result[data-verdict="match"]`))); err != nil {
		t.Fatalf("no matching verdict: %v", err)
	}
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#check-result tr[data-name="block_size"] td')].map(td => td.textContent)`))
	if err != nil || len(cells) < 4 || cells[2] != "2128" || cells[3] != "2128" {
		t.Errorf("block_size row %q, %v; want logged and predicted 2128", cells, err)
	}
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "check", shot)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#check-load`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="kv-tokens-p"]`))); err != nil {
		t.Fatal(err)
	}
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if !strings.Contains(loc, "vllm-version=0.20.2") || !strings.Contains(loc, "model=Qwen%2FQwen3.6-35B-A3B") || !strings.Contains(loc, "draft=mtp") {
		t.Errorf("loaded plan URL %s", loc)
	}
	if badge, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('profile').textContent`)); badge != "vLLM 0.20.2 release" {
		t.Errorf("profile badge %q", badge)
	}
}

// TestCheckViewShowsPartialAndAssumed: a real fragment cut before its KV
// lines shows the partial verdict and its missing lines; a real log that
// prints no max_num_batched_tokens lists the flag as assumed.
func TestCheckViewShowsPartialAndAssumed(t *testing.T) {
	ctx, ts, _ := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?view=check")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #check-log`))); err != nil {
		t.Fatal(err)
	}
	paste := func(file string) {
		t.Helper()
		log, err := os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", file))
		if err != nil {
			t.Fatal(err)
		}
		text, _ := json.Marshal(string(log))
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const el = document.getElementById('check-log');
			el.value = `+string(text)+`; el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`)); err != nil {
			t.Fatal(err)
		}
	}
	paste("qwen35-27b-autoround-w4a16-v0.19.1-fragment.log")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#check-result[data-verdict="partial"] .verdict.partial`))); err != nil {
		t.Fatalf("no partial verdict: %v", err)
	}
	missing, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#check-result li.missing')].map(li => li.textContent)`))
	if err != nil || len(missing) != 3 || !strings.Contains(missing[0], "Available KV cache memory") {
		t.Errorf("missing lines %q, %v; want the memory, size and concurrency lines", missing, err)
	}
	paste("phi3-mini-4k-v0.19.1.log")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#check-result[data-verdict="match"] li.assumed[data-flag="--max-num-batched-tokens"]`))); err != nil {
		t.Fatalf("no assumed --max-num-batched-tokens: %v", err)
	}
}
