package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files (presentation only: key layout, never numbers)")

func modelPath(name string) string { return filepath.Join(modeltest.Dir(), name+".json") }

// runCLI runs a command line as main does and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestPlanJSONMatchesTheWorkedExample(t *testing.T) {
	// reference/planning.md §8.1: gpt-oss-20b, bf16, block 16, 40 GiB,
	// max_model_len 131,072, 8,192 tokens in flight.
	code, out, errs := runCLI(t, "plan", "--model", modelPath("openai__gpt-oss-20b"), "--max-model-len", "131072",
		"--no-async-scheduling", "--selector", "classic", "--kv-cache-memory-bytes", "40GiB", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		BlockSize        int     `json:"block_size"`
		PageBytes        int64   `json:"page_size_bytes"`
		NumGroups        int     `json:"num_groups"`
		Slots            int     `json:"slots"`
		PaddingSlots     int     `json:"padding_slots"`
		NumBlocks        int64   `json:"num_blocks"`
		BlocksPerRequest int64   `json:"blocks_per_request"`
		MaxConcurrency   float64 `json:"max_concurrency"`
		KVCacheTokens    int64   `json:"kv_cache_tokens"`
		Selector         string  `json:"selector"`
		Inferred         bool    `json:"inferred"`
		Warnings         []string
		Groups           []struct {
			Kind             string   `json:"kind"`
			Layers           []string `json:"layers"`
			BlockSize        int      `json:"block_size"`
			BlocksPerRequest int64    `json:"blocks_per_request"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.BlockSize != 16 || got.PageBytes != 32768 || got.NumGroups != 2 || got.Slots != 12 || got.PaddingSlots != 0 ||
		got.NumBlocks != 109226 || got.BlocksPerRequest != 8713 || got.KVCacheTokens != 1643116 || got.Selector != "classic" || got.Inferred {
		t.Errorf("plan = %+v", got)
	}
	if len(got.Groups) != 2 || got.Groups[0].Kind != "sliding_window" || got.Groups[0].BlocksPerRequest != 521 || got.Groups[1].BlocksPerRequest != 8192 {
		t.Errorf("groups = %+v", got.Groups)
	}
	if got.Warnings == nil {
		t.Error("warnings must be an empty list, not null")
	}
}

func TestPlanTextMirrorsVLLMLogLines(t *testing.T) {
	code, out, errs := runCLI(t, "plan", "--model", modelPath("google__gemma-3-27b-it"), "--max-model-len", "131072",
		"--no-async-scheduling", "--selector", "classic")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"WARNING Add 8 padding layers, may waste at most 15.38% KV cache memory",
		"INFO    GPU KV cache size: 368,540 tokens",
		"INFO    Maximum concurrency for 131,072 tokens per request: 2.81x",
		"g6     full",
		"PAD",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "WARNING Add 8") > strings.Index(out, "GPU KV cache size") {
		t.Error("the padding warning must come before the capacity lines, as vLLM logs them")
	}
}

func TestPlanErrorsAreOneClearLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a TP size that does not divide the heads", []string{"plan", "--model", modelPath("google__gemma-3-1b-it"), "--tensor-parallel-size", "8"}, 1, "--tensor-parallel-size 8: must divide num_attention_heads = 4"},
		{"a malformed number", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--block-size", "x"}, 2, `--block-size "x"`},
		{"an unknown flag", []string{"plan", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"no model", []string{"plan"}, 1, "--model is required"},
		{"an unknown selector", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--selector", "magic"}, 1, "--selector magic: want classic, min, balanced or padding-bytes"},
		{"contradicting async flags", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--async-scheduling", "--no-async-scheduling"}, 2, "contradict"},
		{"an unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"a broken config", []string{"plan", "--model", writeTemp(t, `{"num_hidden_layers": -1}`)}, 1, "num_hidden_layers = -1: must be positive"},
		{"MTP on a model without MTP", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--draft", "mtp"}, 1, "no MTP layers"},
		// Hostile sizes (issue 10): each refused, naming the flag and the cap.
		{"a config that never ends", []string{"plan", "--model", "/dev/zero"}, 1, "--model /dev/zero: larger than the 4194304-byte limit"},
		{"a block size vLLM's CLI refuses", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--block-size", "1048576"}, 2, "--block-size 1048576: vLLM 0.31.0 refuses it (argparse: invalid choice"},
		{"a block size between the choices", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--block-size", "48"}, 2, "--block-size 48: vLLM 0.31.0 refuses it"},
		{"a block override that would overflow", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--num-gpu-blocks-override", "9223372036854775807"}, 1, "--num-gpu-blocks-override 9223372036854775807: must be between 0 and 4294967296"},
		{"a size that is not a number", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--kv-cache-memory-bytes", "NaNGiB"}, 2, `--kv-cache-memory-bytes "NaNGiB": want a positive size`},
		{"an infinite size", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--kv-cache-memory-bytes", "InfGiB"}, 2, `--kv-cache-memory-bytes "InfGiB": want a positive size`},
		{"a count past int", []string{"plan", "--model", modelPath("openai__gpt-oss-20b"), "--max-model-len", "99999999999999999999"}, 2, `--max-model-len "99999999999999999999": want a positive integer`},
		{"a sweep with a worker per request", []string{"oracle", "--sweep", "--workers", "100000"}, 1, "--workers 100000: at most"},
		{"a log that never ends", []string{"check", "/dev/zero", "--model", modelPath("openai__gpt-oss-20b")}, 1, "/dev/zero: larger than the"},
		{"a four-million-token transfer", []string{"pd", "--model", modelPath("Qwen__Qwen3-0.6B"), "--prompt-tokens", "4000000", "--max-model-len", "4194304", "--kv-cache-memory-bytes", "2000GiB"}, 1, "descriptor pairs, over the limit of 4000000 (--max-pairs)"},
		{"an oracle over its memory bound", []string{"oracle", "--model", modelPath("Qwen__Qwen3-0.6B"), "--max-memory", "8MiB"}, 1, "MiB memory, over the limit of 8.0 MiB (--max-memory)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tt.code, errs)
			}
			if out != "" && tt.code == 1 {
				t.Errorf("stdout should be empty on error, got %q", out)
			}
			first := strings.SplitN(errs, "\n", 2)[0]
			if !strings.Contains(first, tt.want) {
				t.Errorf("first stderr line %q lacks %q", first, tt.want)
			}
		})
	}
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPlanJSONSchema fixes the --json vocabulary: every key path and its JSON
// type, for a hybrid plan with a draft. The golden file holds no numbers.
func TestPlanJSONSchema(t *testing.T) {
	code, out, errs := runCLI(t, "plan", "--model", modelPath("Qwen__Qwen3.6-35B-A3B"), "--draft", modelPath("z-lab__Qwen3.6-35B-A3B-DFlash"),
		"--tensor-parallel-size", "2", "--num-speculative-tokens", "7", "--pipeline-parallel-size", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	schemaOf("", v, paths)
	var lines []string
	for p, typ := range paths {
		lines = append(lines, p+" "+typ)
	}
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join("..", "testdata", "golden", "plan.schema")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./server -run TestPlanJSONSchema -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("the --json schema changed; if intended, run go test ./server -run TestPlanJSONSchema -update and document it in README.\ngot:\n%s", got)
	}
}

// schemaOf records the JSON type at every key path; list elements share "[]".
func schemaOf(path string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		out[path] = "object"
		for k, e := range x {
			schemaOf(path+"."+k, e, out)
		}
	case []any:
		out[path] = "array"
		for _, e := range x {
			schemaOf(path+"[]", e, out)
		}
	case string:
		out[path] = "string"
	case float64:
		out[path] = "number"
	case bool:
		out[path] = "bool"
	case nil:
		out[path] = "null"
	}
}

func TestPDJSON(t *testing.T) {
	code, out, errs := runCLI(t, "pd", "--model", modelPath("openai__gpt-oss-20b"), "--p-tensor-parallel-size", "2", "--d-tensor-parallel-size", "4",
		"--prompt-tokens", "300", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Plans    string `json:"plans"`
		Transfer struct {
			Path      string `json:"path"`
			Mode      string `json:"mode"`
			Bytes     int64  `json:"bytes"`
			RankPairs []struct {
				P     int `json:"p_rank"`
				D     int `json:"d_rank"`
				Bytes int64
			} `json:"rank_pairs"`
			Handshake struct {
				P []struct {
					Version int `json:"version"`
				} `json:"p"`
			} `json:"handshake"`
		} `json:"transfer"`
		PCost struct {
			Independent int64 `json:"independent_kv_tokens"`
		} `json:"p_cost"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	// 300 tokens: full layers move ceil(300/16) = 19 pages, sliding ones
	// their last ceil(128/16)+1 = 9; 12 of each, K and V, 2 KV heads of 64
	// per D rank in bf16 (4,096 B per page and head pair):
	// 4 ranks * 12 * (19 + 9) * 2 * 4,096 B. The newest release, 0.31.0,
	// speaks handshake version 12 (region_members, #50494).
	want := int64(4 * 12 * (19 + 9) * 2 * 4096)
	if got.Plans != "independent" || got.Transfer.Path != "vllm" || got.Transfer.Mode != "pull" || got.Transfer.Bytes != want ||
		len(got.Transfer.RankPairs) != 4 || got.Transfer.Handshake.P[0].Version != 12 || got.PCost.Independent <= 0 {
		t.Errorf("pd = %+v, want %d bytes", got, want)
	}
}

func TestPDTextAndOracle(t *testing.T) {
	args := []string{"--vllm-version", "pr58207", "--model", modelPath("Qwen__Qwen3.6-35B-A3B"), "--draft", modelPath("z-lab__Qwen3.6-35B-A3B-DFlash"), "--max-model-len", "8192",
		"--num-speculative-tokens", "7", "--p-tensor-parallel-size", "2", "--d-tensor-parallel-size", "4", "--prompt-tokens", "700"}
	code, out, errs := runCLI(t, append([]string{"pd"}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"TP-invariant plan (inferred)", "--block-size 592 on both engines makes them divide", "path group-pairs", "group pair", "gdn"} {
		if !strings.Contains(out, want) {
			t.Errorf("pd output lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = runCLI(t, append([]string{"oracle"}, args...)...)
	if code != 0 || !strings.HasPrefix(out, "exact: ") {
		t.Errorf("oracle: exit %d, %q %q", code, out, errs)
	}
	code, out, _ = runCLI(t, "pd", "--vllm-version", "pr58207", "--model", modelPath("deepseek-ai__DeepSeek-V2-Lite"), "--p-block-size", "16", "--d-block-size", "32", "--plans", "independent", "--prompt-tokens", "100")
	if code != 0 || !strings.Contains(out, "REJECTED (mla-plan, P/D)") || !strings.Contains(out, "fix: ") {
		t.Errorf("MLA with two block sizes: exit %d\n%s", code, out)
	}
	// The same deployment on a release: its own connector rules.
	code, out, _ = runCLI(t, append([]string{"pd", "--vllm-version", "0.28.0"}, args[2:]...)...)
	// 0.28.0 turns prefix caching on for hybrids; with it, a Mamba hybrid's
	// two block sizes are refused (#51527, which would lift it, is open).
	if code != 0 || !strings.Contains(out, "REJECTED (mamba-prefix-block-size, P/D)") || !strings.Contains(out, "vLLM 0.28.0") || !strings.Contains(out, "--no-enable-prefix-caching") {
		t.Errorf("the seed deployment on 0.28: exit %d\n%s", code, out)
	}
	code, _, errs = runCLI(t, "pd", "--model", modelPath("openai__gpt-oss-20b"), "--connector", "nccl")
	if code != 2 || !strings.Contains(errs, `unknown connector "nccl"`) {
		t.Errorf("bad connector: exit %d %q", code, errs)
	}
}
