package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// setField sets a field's value in the page as a paste does and fires
// its change event.
func setField(t *testing.T, ctx context.Context, id, value string) {
	t.Helper()
	text, _ := json.Marshal(value)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const el = document.getElementById(`+strconv.Quote(id)+`);
		el.value = `+string(text)+`; el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`)); err != nil {
		t.Fatalf("setting #%s: %v", id, err)
	}
}

// TestBrowserCheckPair pastes two real startup logs into the Check view:
// the verdict, its sentence and the counts are the ones kvscope pd
// --p-log --d-log --json gives for the same logs (the same core, run in
// the browser), each side's check is kvscope check's, and the pair opens
// in P vs D with P and D apart. A D log that is not one names D and
// leaves the page as it was.
func TestBrowserCheckPair(t *testing.T) {
	ctx, ts, _ := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/?view=check")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#kvscope[data-wasm="ready"] #check-log-d`)), chromedp.WaitVisible(chromedp.CSS(`#check-log-d-file`))); err != nil {
		t.Fatal(err)
	}
	setField(t, ctx, "check-prompt", "1000")
	logs := func(name string) string { return filepath.Join("..", "testdata", "vllm-logs", name) }
	for _, tt := range []struct {
		name, p, d, verdict string
	}{
		{"two 0.24.0 engines transfer", logs("club3090-612-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"), logs("club3090-652-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"), "ok"},
		{"0.20.0 with Mamba prefix caching is rejected", logs("qwen36-35b-a3b-nvfp4-v0.20.0-262k.log"), logs("qwen36-35b-a3b-nvfp4-v0.20.0-262k.log"), "rejected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, "pd", "--p-log", tt.p, "--d-log", tt.d, "--prompt-tokens", "1000", "--json")
			if code != 0 {
				t.Fatalf("kvscope pd: exit %d: %s", code, errs)
			}
			var cli struct {
				P  struct{ Verdict string } `json:"p_log"`
				D  struct{ Verdict string } `json:"d_log"`
				PD struct {
					Preflight struct {
						Verdict   string `json:"verdict"`
						Sentence  string `json:"sentence"`
						Descs     int    `json:"descs_per_rank_pair"`
						Bytes     int64  `json:"bytes_per_rank_pair"`
						RankPairs int    `json:"rank_pairs"`
					} `json:"preflight"`
					Transfer struct {
						Descs int   `json:"descs"`
						Bytes int64 `json:"bytes"`
					} `json:"transfer"`
				} `json:"pd"`
			}
			if err := json.Unmarshal([]byte(out), &cli); err != nil {
				t.Fatal(err)
			}
			if cli.PD.Preflight.Verdict != tt.verdict {
				t.Fatalf("kvscope pd says %s, the test expects %s", cli.PD.Preflight.Verdict, tt.verdict)
			}
			for i, f := range []string{tt.p, tt.d} {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				setField(t, ctx, []string{"check-log", "check-log-d"}[i], string(b))
			}
			if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#pair-verdict[data-verdict="`+tt.verdict+`"]`))); err != nil {
				t.Fatalf("no %s verdict: %v", tt.verdict, err)
			}
			pf := cli.PD.Preflight
			for attrName, want := range map[string]string{"data-descs": strconv.Itoa(pf.Descs), "data-bytes": strconv.FormatInt(pf.Bytes, 10),
				"data-rank-pairs": strconv.Itoa(pf.RankPairs), "data-transfer-descs": strconv.Itoa(cli.PD.Transfer.Descs),
				"data-transfer-bytes": strconv.FormatInt(cli.PD.Transfer.Bytes, 10)} {
				if got := attr(t, ctx, "#pair-verdict", attrName); got != want {
					t.Errorf("%s = %s, kvscope pd says %s", attrName, got, want)
				}
			}
			sentence, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('pair-sentence').textContent`))
			if sentence != pf.Sentence {
				t.Errorf("the page says\n  %s\nkvscope pd says\n  %s", sentence, pf.Sentence)
			}
			if p, d := attr(t, ctx, "#check-result-p", "data-verdict"), attr(t, ctx, "#check-result-d", "data-verdict"); p != cli.P.Verdict || d != cli.D.Verdict {
				t.Errorf("the sides' checks say %s and %s, kvscope pd %s and %s", p, d, cli.P.Verdict, cli.D.Verdict)
			}
			// The verdict comes first, then the sides, the handshake and the values.
			order, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#pair-verdict, #check-result-p, #check-result-d, #handshake, #pair-facets')].map(e => e.id).join(' ')`))
			if order != "pair-verdict check-result-p check-result-d handshake pair-facets" {
				t.Errorf("the page's order: %s", order)
			}
			shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			artifact(t, "check-pair-"+tt.verdict, shot)
		})
	}

	setField(t, ctx, "check-log-d", "not a startup log\n")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#check-error`))); err != nil {
		t.Fatal(err)
	}
	msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('check-error').textContent`))
	kept, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.getElementById('check-log').value.length`))
	if !strings.HasPrefix(msg, "D's log: ") || kept == 0 {
		t.Errorf("error %q, P's log kept %d characters; want D's error and P's log in place", msg, kept)
	}

	// Back to a pair that transfers; open it in P vs D.
	for i, f := range []string{"club3090-612-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log", "club3090-652-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"} {
		b, _ := os.ReadFile(logs(f))
		setField(t, ctx, []string{"check-log", "check-log-d"}[i], string(b))
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#pair-verdict[data-verdict="ok"]`)), chromedp.Click(chromedp.CSS(`#pair-open-pd`)),
		chromedp.WaitVisible(chromedp.CSS(`.tab.active[data-view="pd"]`))); err != nil {
		t.Fatal(err)
	}
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if !strings.Contains(loc, "view=pd") || !strings.Contains(loc, "vllm-version=0.24.0") || !strings.Contains(loc, "prompt-tokens=1000") || !strings.Contains(loc, "p-kv-cache-memory-bytes=") {
		t.Errorf("P vs D's link %s", loc)
	}
}
