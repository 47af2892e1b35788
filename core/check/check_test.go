package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	modelcatalog "github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/vlog"
)

func catalog() model.Catalog {
	return modelcatalog.Bundled()
}

// gptOSSLog is a startup log of gpt-oss-20b at TP 1 with 40 GiB of KV
// cache memory, 131,072 tokens and 8,192 batched tokens: the worked example
// of reference/planning.md §8.1, whose figures are derived by hand there:
// 12 sliding + 12 full layers, page 32,768 B, 12 slots, num_blocks =
// 40 GiB / 393,216 = 109,226; blocks per request 8,192 + 521 = 8,713;
// concurrency 12.54x; int(12.5360... * 131,072) = 1,643,116 tokens. Before
// vLLM 0.20.1 the size line is num_blocks // 2 groups * 16 = 873,808.
func gptOSSLog(version, tokens, conc string) string {
	return "INFO 08-14 09:07:13 [api_server.py:1] vLLM API server version " + version + "\n" +
		"INFO 08-14 09:07:13 [utils.py:233] non-default args: {'model_tag': 'openai/gpt-oss-20b', 'model': 'openai/gpt-oss-20b'}\n" +
		"INFO 08-14 09:07:18 [model.py:1776] Using max model len 131072\n" +
		"INFO 08-14 09:07:19 [scheduler.py:252] Chunked prefill is enabled with max_num_batched_tokens=8192.\n" +
		"INFO 08-14 09:07:46 [gpu_worker.py:538] Available KV cache memory: 40.00 GiB\n" +
		"INFO 08-14 09:07:46 [kv_cache_utils.py:2146] GPU KV cache size: " + tokens + " tokens\n" +
		"INFO 08-14 09:07:46 [kv_cache_utils.py:2147] Maximum concurrency for 131,072 tokens per request: " + conc + "x\n"
}

func run(t *testing.T, text string, in Input) *Result {
	t.Helper()
	l, err := vlog.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	in.Log, in.Catalog = l, catalog()
	res, err := Run(in)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func lineOf(r *Result, name string) LineCheck {
	for _, c := range r.Lines {
		if c.Name == name {
			return c
		}
	}
	return LineCheck{}
}

func TestCheckAgainstTheWorkedExample(t *testing.T) {
	tests := []struct {
		name, version, tokens, conc string
		verdict                     string
		differs                     []string
	}{
		{"0.21: the size line is concurrency times length", "0.21.0", "1,643,116", "12.54", Match, nil},
		{"0.19: the size line is blocks per group", "0.19.0", "873,808", "12.54", Match, nil},
		{"0.19 printing 0.21's size line differs", "0.19.0", "1,643,116", "12.54", Differs, []string{"kv_cache_tokens"}},
		{"a concurrency off by 0.02 differs", "0.21.0", "1,643,116", "12.56", Differs, []string{"max_concurrency"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, gptOSSLog(tt.version, tt.tokens, tt.conc), Input{})
			if r.Verdict != tt.verdict {
				t.Fatalf("verdict %s: %+v", r.Verdict, r.Lines)
			}
			for _, name := range tt.differs {
				if c := lineOf(r, name); c.Match || c.Name == "" {
					t.Errorf("%s: %+v, want a mismatch", name, c)
				}
			}
			if r.Verdict == Differs && len(r.Explain) == 0 {
				t.Error("a difference comes with an explanation")
			}
		})
	}
}

func TestCheckExplainsAVersionBoundary(t *testing.T) {
	// 0.19's log printed with 0.21's size line: every line matches under
	// the profiles from 0.20.1 on, and the explanation says so.
	r := run(t, gptOSSLog("0.19.0", "1,643,116", "12.54"), Input{})
	found := false
	for _, e := range r.Explain {
		found = found || strings.Contains(e, "0.20.1")
	}
	if !found {
		t.Errorf("explain %q does not name the profiles that match", r.Explain)
	}
}

func TestCheckToleratesTheLogsRounding(t *testing.T) {
	// 40.00 GiB is anything in [39.995, 40.005) GiB: num_blocks from
	// floor(39.995 GiB / 393,216 B) = 109,212 to 109,240.
	r := run(t, gptOSSLog("0.21.0", "1,643,116", "12.54"), Input{})
	c := lineOf(r, "kv_cache_tokens")
	if !c.Match || !strings.Contains(c.Predicted, " to ") || c.Tolerance == "" {
		t.Errorf("kv tokens %+v: want a range that holds the logged figure", c)
	}
}

func TestCheckNamesWhatIsMissing(t *testing.T) {
	log := "INFO vLLM API server version 0.19.0\n" +
		"INFO non-default args: {'model': 'Qwen/Qwen3.5-0.8B'}\n" +
		"INFO [config.py:228] Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.\n" +
		"INFO [config.py:259] Padding mamba page size by 2.64% to ensure that mamba page size and attention page size are exactly equal.\n"
	r := run(t, log, Input{})
	if r.Verdict != Partial || len(r.Missing) != 3 || !strings.Contains(r.Missing[0], "Available KV cache memory") {
		t.Errorf("verdict %s, missing %q", r.Verdict, r.Missing)
	}
	// The same log against the branch profile (a bfloat16 SSM state: 288
	// tokens) differs, and the explanation names the SSM dtype.
	b := run(t, log, Input{Version: "pr58207"})
	if b.Verdict != Differs || lineOf(b, "block_size").Predicted != "288" {
		t.Fatalf("branch: %+v", b.Lines)
	}
	named := false
	for _, e := range b.Explain {
		named = named || strings.Contains(e, "--mamba-ssm-cache-dtype float32")
	}
	if !named {
		t.Errorf("explain %q", b.Explain)
	}
}

func TestCheckBadInput(t *testing.T) {
	tests := []struct {
		name, log, want string
	}{
		{"no version", "INFO Available KV cache memory: 10.00 GiB\nINFO GPU KV cache size: 1,000 tokens\n", "names no vLLM version"},
		{"a version that is not one", "INFO vLLM API server version banana\nINFO Available KV cache memory: 10.00 GiB\nINFO GPU KV cache size: 1,000 tokens\n", `line 1: the log's vLLM version "banana" is not one kvscope reads`},
		{"a version before 0.10", "INFO vLLM API server version 0.8.4\nINFO GPU KV cache size: 1,000 tokens\n", "start at vLLM 0.10.0"},
		{"a model kvscope does not have", "INFO vLLM API server version 0.20.0\nINFO non-default args: {'model': 'acme/unknown-7b'}\nINFO GPU KV cache size: 1,000 tokens\n", "pass --model"},
		{"no model", "INFO vLLM API server version 0.20.0\nINFO GPU KV cache size: 1,000 tokens\n", "names no model"},
		{"nothing to compare", "INFO vLLM API server version 0.20.0\nINFO non-default args: {'model': 'openai/gpt-oss-20b'}\n", "none of the lines kvscope compares"},
		{"an MTP log of a model without MTP layers", "INFO vLLM API server version 0.20.0\nINFO non-default args: {'model': 'openai/gpt-oss-20b', 'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 2}}\nINFO GPU KV cache size: 1,000 tokens\n", "mtp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := vlog.Parse(tt.log)
			if err == nil {
				_, err = Run(Input{Log: l, Catalog: catalog()})
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// TestCheckNewerVersion: a log from a vLLM newer than every release
// kvscope has read is checked with the newest release's rules, and the
// result says so (a note, the profile's label), instead of an error.
func TestCheckNewerVersion(t *testing.T) {
	l, err := vlog.Parse("INFO vLLM API server version 0.40.0\nINFO non-default args: {'model': 'openai/gpt-oss-20b'}\nINFO GPU KV cache size: 1,000 tokens\n")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Input{Log: l, Catalog: catalog()})
	if err != nil {
		t.Fatalf("a log of vLLM 0.40.0: %v, want it checked with the newest profile", err)
	}
	want := "vLLM 0.40.0 is newer than the newest release kvscope has read (" + vllm.Newest().Name() + ")"
	noted := false
	for _, n := range res.Notes {
		noted = noted || strings.Contains(n, want) && strings.Contains(n, "inferred")
	}
	if !noted || !strings.Contains(res.ProfileLabel, "newer than the newest release") {
		t.Errorf("notes %q, label %q: want %q and an inferred label", res.Notes, res.ProfileLabel, want)
	}
}

func TestLookupModelStripsQuantizationSuffixes(t *testing.T) {
	for ref, want := range map[string]string{
		"RedHatAI/Qwen3.6-35B-A3B-NVFP4":             "Qwen/Qwen3.6-35B-A3B",
		"/models/AWQ/Qwen3.5-35B-A3B-AWQ":            "Qwen/Qwen3.5-35B-A3B",
		"kaitchup/Qwen3.5-27B-autoround-W4A16":       "Qwen/Qwen3.5-27B",
		"meta-llama/Meta-Llama-3.1-8B-Instruct":      "meta-llama/Llama-3.1-8B-Instruct",
		"~/.cache/huggingface/qwen3.6-35b-a3b-nvfp4": "Qwen/Qwen3.6-35B-A3B",
		"openai/gpt-oss-20b":                         "openai/gpt-oss-20b",
	} {
		got, _, _, err := lookupModel(catalog(), ref)
		if err != nil || got != want {
			t.Errorf("%s: %s, %v; want %s", ref, got, err, want)
		}
	}
}

// FuzzCheck feeds arbitrary text through the log parser and the check: a
// clear error or a result, never a panic.
func FuzzCheck(f *testing.F) {
	f.Add(gptOSSLog("0.21.0", "1,643,116", "12.54"))
	f.Add("INFO vLLM API server version 0.19.0\nnon-default args: {'model': 'Qwen/Qwen3.5-0.8B', 'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}\nAvailable KV cache memory: -1.00 GiB\n")
	f.Add("Initializing a V1 LLM engine (v0.15.1) with config: model='openai/gpt-oss-120b', tensor_parallel_size=2, kv_cache_dtype=fp8, speculative_config=SpeculativeConfig(method='eagle', model='x', num_spec_tokens=3)\nGPU KV cache size: 5 tokens\n")
	// The memory lines of --kv-cache-memory-bytes and of the profiler, the
	// one-line size/concurrency form, and logs cut before or inside the
	// lines a judgement needs.
	full := gptOSSLog("0.21.0", "1,643,116", "12.54")
	f.Add(strings.Replace(cut(full, "Available KV"), "INFO 08-14 09:07:46 [kv_cache_utils", reservedLine+"INFO 08-14 09:07:46 [kv_cache_utils", 1))
	f.Add(strings.Replace(full, "'model': 'openai/gpt-oss-20b'}", "'model': 'openai/gpt-oss-20b', 'kv_cache_memory_bytes': -5}", 1) + reservedLine)
	f.Add("INFO vLLM API server version 0.28.0\nnon-default args: {'model': 'openai/gpt-oss-20b', 'kv_cache_memory_bytes': 42949672960}\n" +
		"Current kv cache memory in use is 40.0 GiB.\nGPU KV cache size: 1,643,116 tokens, Maximum concurrency for 131,072 tokens per request: 12.54x\n")
	f.Add("INFO vLLM API server version 0.31.0\nnon-default args: {'model': 'Qwen/Qwen3.5-0.8B'}\nreserved 0.0 GiB memory for KV Cache\nGPU KV cache size: 0 tokens, Maximum concurrency for 0 tokens per request: 0.00x\n")
	f.Add(qwenCutBeforeKV)
	f.Add(cut(full, "Maximum concurrency"))
	if files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "vllm-logs", "*.log")); len(files) > 0 {
		for _, p := range files {
			if !strings.Contains(p, "RESERVED") && !strings.Contains(p, "PARTIAL") && p != files[0] {
				continue
			}
			if data, err := os.ReadFile(p); err == nil {
				f.Add(string(data))
			}
		}
	}
	cat := catalog()
	f.Fuzz(func(t *testing.T, text string) {
		l, err := vlog.Parse(text)
		if err != nil {
			return
		}
		res, err := Run(Input{Log: l, Catalog: cat})
		if err != nil {
			return
		}
		switch res.Verdict {
		case Match, Partial, Differs:
		default:
			t.Fatalf("verdict %q", res.Verdict)
		}
		if res.Verdict == Partial && len(res.Missing) == 0 {
			t.Fatal("a partial verdict names no missing line")
		}
	})
}
