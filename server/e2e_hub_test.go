package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/kvscope/kvscope/server/internal/hub"
)

// browserHub is a loopback server laid out as the Hub's resolve API,
// answering cross-origin requests as the Hub does: someone/Tiny-0.6B is
// the real bundled Qwen3-0.6B config.json under an id that is not
// bundled, someone/gated answers 401 and anything else 404. requests
// counts the config.json requests.
func browserHub(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	data, err := os.ReadFile(modelPath("Qwen__Qwen3-0.6B"))
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Expose-Headers", "X-Repo-Commit")
		requests.Add(1)
		switch r.URL.Path {
		case "/someone/Tiny-0.6B/resolve/main/config.json":
			w.Header().Set("X-Repo-Commit", hubCommit)
			w.Header().Set("Content-Type", "application/json")
			w.Write(data)
		case "/someone/gated/resolve/main/config.json":
			http.Error(w, "Access to model someone/gated is restricted.", http.StatusUnauthorized)
		default:
			http.Error(w, "Repository not found", http.StatusNotFound)
		}
	}))
	t.Cleanup(ts.Close)
	return ts, &requests
}

// TestBrowserHubModel: Configure takes a model by its Hub id; the browser
// fetches its config.json from the server's HF_ENDPOINT, says where it
// came from, plans it as kvscope plan plans the same file, and keeps the
// id, not the file, in the URL; a shared link fetches again; a missing
// and a gated model say so; under HF_HUB_OFFLINE nothing is fetched.
func TestBrowserHubModel(t *testing.T) {
	fake, requests := browserHub(t)
	env := map[string]string{"HF_ENDPOINT": fake.URL}
	ctx, ts, _ := browserWith(t, serveOptions{Addr: "127.0.0.1:0", Agent: "none", Logf: t.Logf, Hub: &hub.Resolver{Getenv: func(k string) string { return env[k] }}})
	text := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s
	}
	source := "config.json from " + fake.URL + "/someone/Tiny-0.6B/resolve/main/config.json (commit " + hubCommit + ")"

	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?view=configure&model=Qwen%2FQwen3-0.6B"), chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #model-id`))); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("a bundled model asked the Hub %d times", n)
	}
	setField(t, ctx, "model-id", "someone/Tiny-0.6B")
	waitFor(t, ctx, "the source line", `!!document.getElementById('model-source') || (() => { throw new Error((document.querySelector('.field-error[data-field="model"]')?.textContent || '') + ' | ' + (document.getElementById('hub-fetching')?.textContent || '') + ' | ' + document.getElementById('model-id')?.value + ' | ' + location.search); })()`, time.Minute)
	if got := text(`document.getElementById('model-source').textContent`); got != source {
		t.Errorf("source line %q, want %q", got, source)
	}
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "hub-model", shot)
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if u, err := url.Parse(loc); err != nil || u.Query().Get("model") != "someone/Tiny-0.6B" || u.Query().Has("config") {
		t.Errorf("the link %s: want model=someone/Tiny-0.6B and no config", loc)
	}

	// A shared link to the plan fetches the config again, in a new page.
	before := requests.Load()
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?model=someone%2FTiny-0.6B&tensor-parallel-size=2")); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx)
	want := planTokens(t, "--model", modelPath("Qwen__Qwen3-0.6B"), "--tensor-parallel-size", "2")
	if d := attr(t, ctx, `[data-testid="kv-tokens-d"]`, "data-value"); d != strconv.FormatInt(want, 10) {
		t.Errorf("D shows %s KV tokens for the fetched model, kvscope plan says %d for the same file", d, want)
	}
	if got := text(`document.getElementById('model-source')?.textContent || ''`); got != source {
		t.Errorf("the plan view's source line %q", got)
	}
	if requests.Load() == before {
		t.Errorf("the shared link did not fetch the config again")
	}

	for _, tt := range []struct{ id, want string }{
		{"someone/missing@v2", "someone/missing@v2: " + fake.URL + "/someone/missing/resolve/v2/config.json: HTTP 404: no such model or revision"},
		{"someone/gated", "HTTP 401: the model is gated or private, and the browser sends no token: download its config.json"},
	} {
		if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?view=configure&model="+url.QueryEscape(tt.id))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, tt.id+"'s error", `(document.querySelector('.field-error[data-field="model"]')?.textContent || '').includes(`+strconv.Quote(tt.want)+`)`, time.Minute)
	}

	// HF_HUB_OFFLINE: the page fetches nothing and says so.
	offline := httptest.NewServer(newMux(catalog(), serveOptions{Addr: "127.0.0.1:0", Agent: "none", Logf: t.Logf,
		Hub: &hub.Resolver{Getenv: func(k string) string { return map[string]string{"HF_ENDPOINT": fake.URL, "HF_HUB_OFFLINE": "1"}[k] }}}))
	t.Cleanup(offline.Close)
	before = requests.Load()
	if err := chromedp.Do(ctx, chromedp.Navigate(offline.URL+"/?view=configure&model=someone%2FTiny-0.6B"), chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #model-id`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the offline message", `(document.querySelector('.field-error[data-field="model"]')?.textContent || '').includes('HF_HUB_OFFLINE is set on the server: nothing is fetched')`, time.Minute)
	if n := requests.Load() - before; n != 0 {
		t.Errorf("offline, the page asked the Hub %d times", n)
	}
}
