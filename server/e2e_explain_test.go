package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	kvapp "github.com/kvscope/kvscope/app"
)

// TestAppExplains: the page a new user opens names what it shows and
// says why. Without settings it offers three starts; the header names the
// model, the drafter and the profile with what it is; the matrix has a
// legend on both sides; P vs D opens with the planner's own account of
// why P and D differ, the same lines kvscope pd --explain --json prints
// (P's g = 3 and D's g = 11 for the published deployment); a bad value on
// D keeps P's plan; at 800 px nothing overflows sideways and the tabs are
// one row; exports are named for the model, view and TP pair. Screenshots
// of every view at 1600 and 800 px land in the artifacts folder.
func TestAppExplains(t *testing.T) {
	ctx, ts, _ := browser(t)
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] [data-testid="landing"]`))); err != nil {
		t.Fatal(err)
	}
	if m, p := eval(`document.getElementById('header-model').textContent`), eval(`document.getElementById('profile').textContent`); m != "Qwen/Qwen3.6-35B-A3B + z-lab/Qwen3.6-35B-A3B-DFlash" || !strings.HasPrefix(p, "pr58207: the group-pair branch") {
		t.Errorf("header names %q, %q", m, p)
	}
	if n := eval(`String(document.querySelectorAll('[data-testid="matrix-legend"]').length)`); n != "2" {
		t.Errorf("%s matrix legends, want one per side", n)
	}
	if intro := eval(`document.querySelector('[data-testid="view-intro"]').textContent`); !strings.Contains(intro, "KV cache groups") {
		t.Errorf("the plan view opens with %q", intro)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid="start-logs"]`)), chromedp.WaitVisible(chromedp.CSS(`#check-log-d`))); err != nil {
		t.Fatalf("the Check my logs start: %v", err)
	}

	// P vs D: the difference in the planner's words, as the CLI prints it.
	s := kvapp.DefaultSettings()
	code, out, errs := runCLI(t, append(strings.Fields(s.CLI("pd"))[1:], "--explain", "--json")...)
	if code != 0 {
		t.Fatalf("kvscope pd --explain: %s", errs)
	}
	var cli struct {
		Explain struct {
			Difference []string `json:"difference"`
		} `json:"explain"`
	}
	if err := json.Unmarshal([]byte(out), &cli); err != nil || len(cli.Explain.Difference) == 0 {
		t.Fatalf("pd --explain --json: %v %q", err, cli.Explain.Difference)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?"+s.Query().Encode()+"&view=pd"), chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] [data-testid="why-difference"] li`))); err != nil {
		t.Fatal(err)
	}
	page := eval(`[...document.querySelectorAll('[data-testid="why-difference"] li')].map(l => l.textContent).join('\n')`)
	if page != strings.Join(cli.Explain.Difference, "\n") || !strings.Contains(page, "P's selector picks g = 3, D's g = 11") {
		t.Errorf("the page says\n%s\nkvscope pd --explain says\n%s", page, strings.Join(cli.Explain.Difference, "\n"))
	}
	if why := eval(`document.querySelector('[data-testid="why-D"] summary').textContent`); !strings.Contains(why, "g = 11 has the fewest padding bytes") {
		t.Errorf("D's reason: %q", why)
	}

	// A bad value on D keeps P's plan.
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?model=Qwen%2FQwen3-0.6B&vllm-version=0.31.0&d-tensor-parallel-size=3"),
		chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] [data-testid="side-error-d"]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid="kv-tokens-p"]`))); err != nil {
		t.Fatalf("D at TP 3: %v", err)
	}
	if msg := eval(`document.querySelector('[data-testid="side-error-d"]').textContent`); !strings.Contains(msg, "--tensor-parallel-size 3") || strings.Contains(msg, "kvspec:") {
		t.Errorf("D's error %q: want the flag and value, no package name", msg)
	}

	// Exports: distinct names.
	eval(`(() => { window.__names = []; kvscope.download = (n) => window.__names.push(n); kvscope.downloadURL = (n) => window.__names.push(n); return ''; })()`)
	base := ts.URL + "/?" + s.Query().Encode()
	for _, v := range []string{"plan", "pd"} {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"&view="+v), chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] main`))); err != nil {
			t.Fatal(err)
		}
		eval(`(() => { window.__names = window.__names || []; kvscope.download = (n) => window.__names.push(n); return ''; })()`)
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[title^="export the plans as JSON"]`))); err != nil {
			t.Fatal(err)
		}
		if got, want := eval(`window.__names.join(',')`), "kvscope-Qwen3.6-35B-A3B-"+v+"-2to4.json"; got != want {
			t.Errorf("the %s view exports %q, want %q", v, got, want)
		}
	}

	// Every view at 1600 and 800 px; at 800 px nothing overflows sideways
	// and the tabs are one row.
	for _, width := range []int64{1600, 800} {
		if _, err := chromedp.Call(ctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{Width: width, Height: 1000, DeviceScaleFactor: 1}); err != nil {
			t.Fatal(err)
		}
		for _, v := range kvapp.Views {
			if err := chromedp.Do(ctx, chromedp.Navigate(base+"&view="+v.ID), chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] main`))); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // charts and the flow draw after the first frame
			shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(80))
			artifact(t, fmt.Sprintf("view-%s-%d", v.ID, width), shot)
			if width != 800 {
				continue
			}
			if over := eval(`String(document.documentElement.scrollWidth - window.innerWidth)`); over != "0" {
				t.Errorf("%s at 800 px: the page is %s px wider than the window", v.ID, over)
			}
			if rows := eval(`String(new Set([...document.querySelectorAll('nav.tabs .tab')].map(b => b.offsetTop)).size)`); rows != "1" {
				t.Errorf("%s at 800 px: the tabs take %s rows", v.ID, rows)
			}
		}
	}
}
