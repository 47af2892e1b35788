package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/vllm"
)

// logEntry is one real vLLM startup log of testdata/vllm-logs/index.json:
// where it was posted, the arguments kvscope check needs besides the log
// (a model config for a local path or a fine-tune, the version of a
// fragment), and what the check must say.
type logEntry struct {
	File    string   `json:"file"`
	Source  string   `json:"source"`
	Version string   `json:"vllm_version"`
	Model   string   `json:"model"`
	Kinds   []string `json:"kinds"`
	Args    []string `json:"args"`
	WhyArgs string   `json:"why_args"`
	// Expect is "match" (every logged figure within the log's rounding of
	// kvscope's prediction), "differs: <the behaviour kvscope does not model
	// yet>", or "error: <what the message must say>".
	Expect string `json:"expect"`
}

func readLogIndex(t *testing.T) []logEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var entries []logEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		t.Fatal(err)
	}
	return entries
}

// TestRealVLLMLogs holds every collected startup log against kvscope's
// plan for the log's vLLM version: the figures vLLM printed are the
// expected values, nothing here was computed by kvscope.
func TestRealVLLMLogs(t *testing.T) {
	entries := readLogIndex(t)
	matched, checked := 0, 0
	versions, hybrid := map[string]bool{}, 0
	for _, e := range entries {
		t.Run(e.File, func(t *testing.T) {
			if e.Source == "" {
				t.Error("every log names where it was posted")
			}
			args := append([]string{"check", filepath.Join("..", "testdata", "vllm-logs", e.File), "--json"}, e.Args...)
			code, out, errs := runCLI(t, args...)
			switch {
			case strings.HasPrefix(e.Expect, "error: "):
				want := strings.TrimPrefix(e.Expect, "error: ")
				if code != 1 || !strings.Contains(errs, want) {
					t.Errorf("exit %d, stderr %q; want exit 1 naming %q", code, errs, want)
				}
				return
			case code != 0 && code != 3:
				t.Fatalf("exit %d: %s", code, errs)
			}
			var res struct {
				Profile string `json:"profile"`
				Verdict string `json:"verdict"`
				Lines   []struct {
					Name      string `json:"name"`
					Logged    string `json:"logged"`
					Predicted string `json:"predicted"`
					Match     bool   `json:"match"`
				} `json:"lines"`
				Explain []string `json:"explain"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			checked++
			versions[res.Profile] = true
			for _, k := range e.Kinds {
				if k != "full" {
					hybrid++
					break
				}
			}
			if len(res.Lines) == 0 {
				t.Fatal("no line compared")
			}
			switch {
			case e.Expect == "match":
				if res.Verdict != "match" || code != 0 {
					t.Errorf("verdict %s (exit %d): %+v; explain %q", res.Verdict, code, res.Lines, res.Explain)
				} else {
					matched++
				}
			case strings.HasPrefix(e.Expect, "differs: "):
				if res.Verdict != "differs" || code != 3 {
					t.Errorf("verdict %s: the log was expected to differ (%s)", res.Verdict, e.Expect)
				}
			default:
				t.Fatalf("unknown expectation %q", e.Expect)
			}
		})
	}
	var vs []string
	for v := range versions {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	t.Logf("%d of %d real logs match (%d of hybrid models), over %d vLLM versions: %s", matched, checked, hybrid, len(vs), strings.Join(vs, " "))
	if checked < 25 || hybrid < 12 || len(vs) < 5 {
		t.Errorf("the log set has %d checkable logs, %d of hybrid models, %d versions; want at least 25, 12 and 5", checked, hybrid, len(vs))
	}
}

// TestREADMEShowsTheVersionTable: README's version table is the table in
// core/vllm, row for row (kvscope versions --json prints it).
func TestREADMEShowsTheVersionTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	for _, c := range vllm.Changes() {
		row := "| " + c.From + " | " + c.What() + " | " + strings.ReplaceAll(c.Rule, "|", `\|`) + " | " + c.Source + " | " + string(c.Evidence) + " |"
		if !strings.Contains(readme, row) {
			t.Errorf("README lacks the row %s", row)
		}
	}
}
