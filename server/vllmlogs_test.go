package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vlog"
	"github.com/kvscope/kvscope/server/internal/hub"
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
	// kvscope's prediction), "partial: <the missing lines, by their words,
	// separated by "; ">" (every compared figure matches but the log lacks
	// lines a full judgement needs), "differs: <the behaviour kvscope does
	// not model yet>", or "error: <what the message must say>".
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
	matched, partial, checked := 0, 0, 0
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
			case code != 0 && code != 3 && code != 4:
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
				Missing []string `json:"missing"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			checked++
			versions[res.Profile] = true
			if hasNonFullLayers(t, e) {
				hybrid++
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
			case strings.HasPrefix(e.Expect, "partial: "):
				want := strings.Split(strings.TrimPrefix(e.Expect, "partial: "), "; ")
				if res.Verdict != "partial" || code != 4 {
					t.Fatalf("verdict %s (exit %d): %+v; missing %q; want partial, missing %q", res.Verdict, code, res.Lines, res.Missing, want)
				}
				if len(res.Missing) != len(want) {
					t.Errorf("missing %q, want %d lines: %q", res.Missing, len(want), want)
				}
				for _, w := range want {
					named := false
					for _, m := range res.Missing {
						named = named || strings.Contains(m, w)
					}
					if !named {
						t.Errorf("missing %q does not name %q", res.Missing, w)
					}
				}
				partial++
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
	t.Logf("%d of %d real logs match, %d partial (%d of hybrid models), over %d vLLM versions: %s", matched, checked, partial, hybrid, len(vs), strings.Join(vs, " "))
	if checked < 25 || hybrid < 12 || len(vs) < 5 {
		t.Errorf("the log set has %d checkable logs, %d of hybrid models, %d versions; want at least 25, 12 and 5", checked, hybrid, len(vs))
	}
}

// argValue is the value of flag name in a log entry's extra arguments, ""
// when the entry does not give it.
func argValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

// hasNonFullLayers says whether the model a log's check planned has a
// layer other than full attention (sliding window, chunked local, MLA,
// Mamba, GDN): a log counts towards the hybrid-model minimum by the
// model's own layers, never by the labels written in the index (a
// full-attention model's pipeline-parallel refusal is not hybrid).
func hasNonFullLayers(t *testing.T, e logEntry) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "vllm-logs", e.File))
	if err != nil {
		t.Fatal(err)
	}
	l, err := vlog.Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	in := check.Input{Log: l, Version: argValue(e.Args, "--vllm-version"), Catalog: catalog()}
	if ref := argValue(e.Args, "--model"); ref != "" {
		if in.Model, _, err = readModel(hub.Models{Catalog: in.Catalog}, ref); err != nil {
			t.Fatal(err)
		}
	}
	res, err := check.Run(in)
	if err != nil {
		t.Fatalf("resolving the log's model: %v", err)
	}
	for _, ly := range res.ModelRef.Layers {
		if ly.Kind != model.Full {
			return true
		}
	}
	return false
}

// TestHybridCountReadsTheModel: the hybrid count decides by layer kinds,
// so a full-attention model stays full whatever its index labels say and
// a sliding-window or GDN model counts.
func TestHybridCountReadsTheModel(t *testing.T) {
	byFile := map[string]logEntry{}
	for _, e := range readLogIndex(t) {
		byFile[e.File] = e
	}
	tests := []struct {
		file   string
		hybrid bool
	}{
		{"qwen3-coder-30b-fp8-pp2-v0.15.2rc1-REFUSAL-FRAGMENT.log", false}, // full attention, labelled refusal + pipeline_parallel
		{"llama31-8b-l4-v0.11.0.log", false},
		{"gpt-oss-120b-h100-v0.11.0-REFUSAL-FRAGMENT.log", true}, // sliding window every other layer
		{"qwen36-35b-a3b-nvfp4-v0.20.0-wsl.log", true},           // GDN
		{"granite-4.0-h-1b-v0.19.0-eager.log", true},             // Mamba2
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			e, ok := byFile[tt.file]
			if !ok {
				t.Fatalf("%s is not in the index", tt.file)
			}
			if got := hasNonFullLayers(t, e); got != tt.hybrid {
				t.Errorf("hybrid %v, want %v", got, tt.hybrid)
			}
		})
	}
}

// TestCheckTextNamesWhatItLacksAndAssumed: kvscope check's text output
// and exit status for the three verdicts, on real logs.
func TestCheckTextNamesWhatItLacksAndAssumed(t *testing.T) {
	logPath := func(f string) string { return filepath.Join("..", "testdata", "vllm-logs", f) }
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"a log without a memory line is partial (exit 4)",
			[]string{"check", logPath("qwen38-27b-w4a16-rtx3090-v0.28.0-PARTIAL-FRAGMENT.log"), "--model", "Qwen/Qwen3.6-27B"}, 4,
			[]string{"verdict: partial", `missing: "Available KV cache memory: X GiB"`}},
		{"a flag the fragment does not print is assumed, and the value that matches is named (exit 3)",
			[]string{"check", logPath("gemma4-e2b-l4-v0.21.0-FRAGMENT.log"), "--model", "google/gemma-4-E2B", "--vllm-version", "0.21.0"}, 3,
			[]string{"verdict: differs", "explain: matches with --max-num-batched-tokens 2048", "assumed: --max-num-batched-tokens 8192: the log prints no"}},
		{"the reserved memory of --kv-cache-memory-bytes, to the byte (exit 0)",
			[]string{"check", logPath("qwen38-27b-gb10-fp8kv-768k-RESERVED-FRAGMENT.log"), "--model", "Qwen/Qwen3.6-27B", "--vllm-version", "0.27.1"}, 0,
			[]string{"verdict: match", "--kv-cache-memory-bytes 32212254720"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s%s", code, tt.code, out, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
