package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vlog"
)

// resolveByName parses a bundled model.
func resolveByName(t *testing.T, name string) (*model.Model, error) {
	t.Helper()
	n, data, err := catalog().Lookup(name)
	if err != nil {
		return nil, err
	}
	m, err := model.Parse(data)
	if err != nil {
		return nil, err
	}
	m.Name = n
	return m, nil
}

// cut removes the lines of a log that contain any of drop.
func cut(log string, drop ...string) string {
	var keep []string
	for _, l := range strings.SplitAfter(log, "\n") {
		skip := false
		for _, d := range drop {
			skip = skip || strings.Contains(l, d)
		}
		if !skip {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

// reservedLine is vLLM's line for --kv-cache-memory-bytes, with the
// figures of the worked example's 40 GiB.
const reservedLine = "INFO 08-14 09:07:46 [gpu_worker.py:491] Initial free memory 78.12 GiB, reserved 40.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect the gpu_memory_utilization config.\n"

// qwenCutBeforeKV is a Qwen3.5-0.8B start-up on vLLM 0.19 cut after its
// block-size and mamba-padding lines (544 tokens and 2.64%, as vLLM prints
// them for that model): both match, and the capacity is never judged.
const qwenCutBeforeKV = "INFO vLLM API server version 0.19.0\n" +
	"INFO non-default args: {'model': 'Qwen/Qwen3.5-0.8B'}\n" +
	"INFO [config.py:228] Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.\n" +
	"INFO [config.py:259] Padding mamba page size by 2.64% to ensure that mamba page size and attention page size are exactly equal.\n"

func TestCheckVerdicts(t *testing.T) {
	full := gptOSSLog("0.21.0", "1,643,116", "12.54")
	reserved := strings.Replace(cut(full, "Available KV cache memory"), "INFO 08-14 09:07:46 [kv_cache_utils", reservedLine+"INFO 08-14 09:07:46 [kv_cache_utils", 1)
	withBytes := strings.Replace(reserved, "'model': 'openai/gpt-oss-20b'}", "'model': 'openai/gpt-oss-20b', 'kv_cache_memory_bytes': 42949672960}", 1)
	inUse := strings.Replace(cut(full, "Available KV cache memory"), "INFO 08-14 09:07:46 [kv_cache_utils",
		"INFO 08-14 09:07:50 [gpu_worker.py:789] Free memory on device (78.5/79.2 GiB) on startup. Replace gpu_memory_utilization config with `--kv-cache-memory=1` (1.0 GiB) to fit into requested memory. Current kv cache memory in use is 40.0 GiB.\nINFO 08-14 09:07:46 [kv_cache_utils", 1)
	tests := []struct {
		name    string
		log     string
		verdict string
		missing []string // words each missing line must hold, in order
		bytes   int64    // the memory planned to the byte (0: the GiB's range)
	}{
		{"every line a judgement needs, all within rounding", full, Match, nil, 0},
		{"cut before the KV lines: two figures match, nothing judged", qwenCutBeforeKV, Partial,
			[]string{"Available KV cache memory", "GPU KV cache size", "Maximum concurrency"}, 0},
		{"cut after the size line", cut(full, "Maximum concurrency"), Partial, []string{"Maximum concurrency"}, 0},
		{"the memory reserved by --kv-cache-memory-bytes", reserved, Match, nil, 0},
		{"the reserved memory to the byte from the non-default args", withBytes, Match, nil, 42949672960},
		{"the profiler's memory in use instead of the available line", inUse, Match, nil, 0},
		{"a figure out of rounding differs even with lines missing", cut(gptOSSLog("0.21.0", "1,643,116", "12.99"), "GPU KV cache size"), Differs, []string{"GPU KV cache size"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.log, Input{})
			if r.Verdict != tt.verdict {
				t.Fatalf("verdict %s, want %s: %+v, missing %q", r.Verdict, tt.verdict, r.Lines, r.Missing)
			}
			if len(r.Missing) != len(tt.missing) {
				t.Fatalf("missing %q, want %d lines", r.Missing, len(tt.missing))
			}
			for i, w := range tt.missing {
				if !strings.Contains(r.Missing[i], w) {
					t.Errorf("missing[%d] = %q, want it to name %q", i, r.Missing[i], w)
				}
			}
			if r.Setup.MemBytes != tt.bytes {
				t.Errorf("memory bytes %d, want %d", r.Setup.MemBytes, tt.bytes)
			}
		})
	}
}

// A fragment that prints no max_num_batched_tokens is planned with the
// default and says so; where the figures then differ, the explanation
// names the value that makes them match. The log is a real one (the
// figures vLLM printed on an L4, where the API server's default is 2048).
func TestCheckNamesTheAssumedFlagThatWouldMatch(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vllm-logs", "gemma4-e2b-l4-v0.21.0-FRAGMENT.log"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := vlog.Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	m, err := resolveByName(t, "google/gemma-4-E2B")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(Input{Log: l, Version: "0.21.0", Model: m, Catalog: catalog()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != Differs {
		t.Fatalf("verdict %s: %+v", r.Verdict, r.Lines)
	}
	assumed := map[string]string{}
	for _, a := range r.Assumed {
		assumed[a.Flag] = a.Value
		if a.Why == "" {
			t.Errorf("%s: no reason", a.Flag)
		}
	}
	if assumed["--max-num-batched-tokens"] != "8192" {
		t.Errorf("assumed %+v, want --max-num-batched-tokens 8192", r.Assumed)
	}
	named := false
	for _, e := range r.Explain {
		named = named || strings.HasPrefix(e, "matches with --max-num-batched-tokens 2048 ")
	}
	if !named {
		t.Errorf("explain %q does not name --max-num-batched-tokens 2048", r.Explain)
	}

	// Stated by the caller, the flag is not assumed, and the log matches.
	in := Input{Log: l, Version: "0.21.0", Model: m, Catalog: catalog(), Given: []string{"max-num-batched-tokens"}}
	in.Adjust = func(e *plan.Engine) { e.MaxNumBatchedTokens = 2048 }
	r, err = Run(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Assumed {
		if a.Flag == "--max-num-batched-tokens" {
			t.Errorf("a flag the caller gave is listed as assumed: %+v", a)
		}
	}
	if r.Verdict != Match {
		t.Errorf("with 2048: verdict %s, %+v", r.Verdict, r.Lines)
	}
}

// A log whose drafter comes from kvscope's catalog and whose padding lines
// differ says that the run may have loaded another revision of that
// drafter. The figures are those vLLM issue #46462 quotes (Qwen3.6-35B-A3B
// with the DFlash drafter, k=6, on vLLM 0.20.2: "Add 2 padding layers" and
// "Add 6 padding layers" with 5.16 GiB available).
func TestCheckNamesTheDrafterRevision(t *testing.T) {
	log := "INFO vLLM API server version 0.20.2\n" +
		"INFO non-default args: {'model': 'Qwen/Qwen3.6-35B-A3B-FP8', 'max_model_len': 8192, 'enable_prefix_caching': True, 'speculative_config': {'method': 'dflash', 'model': 'z-lab/Qwen3.6-35B-A3B-DFlash', 'num_speculative_tokens': 6}}\n" +
		"WARNING [kv_cache_utils.py:1140] Add 2 padding layers, may waste at most 6.67% KV cache memory\n" +
		"WARNING [kv_cache_utils.py:1140] Add 6 padding layers, may waste at most 60.00% KV cache memory\n" +
		"INFO [gpu_worker.py:460] Available KV cache memory: 5.16 GiB\n"
	r := run(t, log, Input{})
	if r.Verdict != Differs {
		t.Fatalf("verdict %s: %+v", r.Verdict, r.Lines)
	}
	named := false
	for _, e := range r.Explain {
		named = named || strings.Contains(e, "z-lab/Qwen3.6-35B-A3B-DFlash") && strings.Contains(e, "revision")
	}
	if !named {
		t.Errorf("explain %q does not say the drafter's revision may differ", r.Explain)
	}
	// A drafter the caller gave is not second-guessed.
	d, err := resolveByName(t, "z-lab/Qwen3.6-35B-A3B-DFlash")
	if err != nil {
		t.Fatal(err)
	}
	r = run(t, log, Input{Draft: d})
	for _, e := range r.Explain {
		if strings.Contains(e, "revision") {
			t.Errorf("explain names a revision for a drafter the caller gave: %q", e)
		}
	}
}
