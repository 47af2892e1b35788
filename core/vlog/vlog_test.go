package vlog

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseLiteral(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want any
	}{
		{"a dict of vLLM's non-default args", `{'model': 'Qwen/Qwen3.5-4B', 'max_model_len': 32768, 'gpu_memory_utilization': 0.9, 'enable_prefix_caching': True, 'api_key': ['k'], 'x': None}`,
			map[string]any{"model": "Qwen/Qwen3.5-4B", "max_model_len": int64(32768), "gpu_memory_utilization": 0.9, "enable_prefix_caching": true, "api_key": []any{"k"}, "x": nil}},
		{"nested dicts and tuples", `{'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 2}, 'sizes': (1, 2)}`,
			map[string]any{"speculative_config": map[string]any{"method": "mtp", "num_speculative_tokens": int64(2)}, "sizes": []any{int64(1), int64(2)}}},
		{"escapes and quotes in strings", `{"a": 'it\'s', 'b': "tab\there", 'c': '\x41'}`,
			map[string]any{"a": "it's", "b": "tab\there", "c": "A"}},
		{"an object repr stays raw", `{'compilation_config': <CompilationMode.VLLM_COMPILE: 3>, 'path': PosixPath('/m'), 'n': -1.5e3}`,
			map[string]any{"compilation_config": Raw("<CompilationMode.VLLM_COMPILE: 3>"), "path": Raw("PosixPath('/m')"), "n": -1500.0}},
		{"a set", `{'a'}`, []any{"a"}},
		{"empty containers", `{'a': {}, 'b': [], 'c': ()}`, map[string]any{"a": map[string]any{}, "b": []any{}, "c": []any{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLiteral(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseLiteralRefusesBrokenInput(t *testing.T) {
	for _, in := range []string{`{'a': 1`, `{'a' 1}`, `{'a': 'unterminated}`, `[1, 2`, ``, `{'a': 1} trailing`, strings.Repeat("[", 200) + strings.Repeat("]", 200)} {
		if v, err := ParseLiteral(in); err == nil {
			t.Errorf("%q: accepted as %#v", in, v)
		}
	}
}

func TestSplitFieldsKeepsNestedCommas(t *testing.T) {
	fs := SplitFields(`model='m', speculative_config=SpeculativeConfig(method='mtp', model='m', num_spec_tokens=2), dtype=torch.bfloat16, compilation_config={"level": 3, "sizes": [1, 2]}, odd='a, b=c'`)
	want := []Field{{"model", "'m'"}, {"speculative_config", "SpeculativeConfig(method='mtp', model='m', num_spec_tokens=2)"}, {"dtype", "torch.bfloat16"},
		{"compilation_config", `{"level": 3, "sizes": [1, 2]}`}, {"odd", "'a, b=c'"}}
	if !reflect.DeepEqual(fs, want) {
		t.Errorf("got %q", fs)
	}
	if n, ok := Lookup(CallFields(fs[1].Value), "num_spec_tokens"); !ok || n != "2" {
		t.Errorf("num_spec_tokens %q %v", n, ok)
	}
}

// A startup log as users paste it: process prefixes, timestamps, ANSI
// colours, a banner, two workers, the figures in the newer one-line form.
const pasted = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m INFO 05-14 08:20:13 [utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.28.0\n" +
	"(APIServer pid=1) INFO 05-14 08:20:13 [utils.py:299]   █▄█▀ █     █     █     █  model   openai/gpt-oss-20b\n" +
	"(APIServer pid=1) INFO 05-14 08:20:13 [utils.py:233] non-default args: {'model_tag': 'openai/gpt-oss-20b', 'tensor_parallel_size': 2, 'enable_prefix_caching': True}\n" +
	"(APIServer pid=1) INFO 05-14 08:20:20 [model.py:1680] Using max model len 131072\n" +
	"(APIServer pid=1) INFO 05-14 08:20:25 [scheduler.py:239] Chunked prefill is enabled with max_num_batched_tokens=8192.\n" +
	"(EngineCore_DP0 pid=168) INFO 05-14 08:20:42 [core.py:109] Initializing a V1 LLM engine (v0.28.0) with config: model='openai/gpt-oss-20b', speculative_config=None, dtype=torch.bfloat16, max_seq_len=131072, tensor_parallel_size=2, pipeline_parallel_size=1, kv_cache_dtype=auto, enable_prefix_caching=True\n" +
	"(Worker_TP0 pid=200) INFO 05-14 08:25:41 [gpu_worker.py:440] Available KV cache memory: 20.25 GiB\n" +
	"(Worker_TP1 pid=201) INFO 05-14 08:25:41 [gpu_worker.py:440] Available KV cache memory: 20.19 GiB\n" +
	"(EngineCore_DP0 pid=168) INFO 05-14 08:25:41 [kv_cache_utils.py:1708] GPU KV cache size: 1,662,345 tokens, Maximum concurrency for 131,072 tokens per request: 12.68x\r\n"

func TestParseReadsWhatUsersPaste(t *testing.T) {
	l, err := Parse(pasted)
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != "0.28.0" || l.Model != "openai/gpt-oss-20b" {
		t.Errorf("version %q model %q", l.Version, l.Model)
	}
	if n, ok := l.ArgInt("tensor_parallel_size"); !ok || n != 2 {
		t.Errorf("args %v", l.Args)
	}
	if n, ok := l.ConfigInt("tensor_parallel_size"); !ok || n != 2 {
		t.Errorf("config %v", l.Config)
	}
	if l.MaxModelLen == nil || l.MaxModelLen.Value != 131072 || l.MNBT == nil || l.MNBT.Value != 8192 {
		t.Errorf("max len %v, mnbt %v", l.MaxModelLen, l.MNBT)
	}
	if m, ok := l.MinAvailableGiB(); !ok || m.Value != 20.19 || m.Line.N != 8 {
		t.Errorf("min available %+v", m)
	}
	if len(l.KVTokens) != 1 || l.KVTokens[0].Value != 1662345 || len(l.Concurrency) != 1 || l.Concurrency[0].Value != (Concurrency{131072, 12.68}) {
		t.Errorf("one-line capacity: %+v %+v", l.KVTokens, l.Concurrency)
	}
}

func TestParseRefusesWhatIsNotALog(t *testing.T) {
	for _, in := range []string{"", "hello\nworld", "\x00\x01\x02", strings.Repeat("INFO nothing here\n", 100)} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "vLLM prints") {
			t.Errorf("%q: %v", clip(in, 20), err)
		}
	}
	if _, err := Parse(strings.Repeat("x", MaxLogBytes+1)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized log: %v", err)
	}
}

func TestParseReadsTheRefusal(t *testing.T) {
	l, err := Parse("(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's max seq len (262144), (24.0 GiB KV cache is needed, which is larger than the available KV cache memory (3.18 GiB). Based on the available memory, the estimated maximum model length is 34736. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
	if err != nil {
		t.Fatal(err)
	}
	r := l.Refusal
	if r == nil || r.MaxModelLen != 262144 || r.NeededGiB != 24 || r.AvailableGiB != 3.18 || r.EstimatedMaxLen != 34736 {
		t.Errorf("refusal %+v", r)
	}
}

// The lines that state a worker's KV cache memory, as vLLM 0.27.1 printed
// them on a GB10 (the reserved and in-use figures from public logs in
// testdata/vllm-logs/qwen38-27b-gb10-*.log), and which one KVMemory
// takes.
func TestParseReadsEveryMemoryLine(t *testing.T) {
	const (
		avail    = "(EngineCore pid=492078) INFO 08-23 09:39:41 [gpu_worker.py:563] Available KV cache memory: 50.29 GiB\n"
		reserved = "(EngineCore pid=602779) INFO 08-23 13:06:45 [gpu_worker.py:491] Initial free memory 111.93 GiB, reserved 33.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect the gpu_memory_utilization config.\n"
		inUse    = "81:(EngineCore pid=492078) INFO 08-23 09:40:11 [gpu_worker.py:789] Free memory on device (112.26/119.63 GiB) on startup. Desired GPU memory utilization is (0.92, 110.06 GiB). Replace gpu_memory_utilization config with `--kv-cache-memory=52830620611` (49.2 GiB) to fit into requested memory, or `--kv-cache-memory=55188796928` (51.4 GiB) to fully utilize gpu memory. Current kv cache memory in use is 50.28 GiB.\n"
	)
	tests := []struct {
		name string
		log  string
		gib  float64
		src  MemorySource
		line int
	}{
		{"the available memory wins over the others", inUse + reserved + avail, 50.29, MemAvailable, 3},
		{"the reserved memory of --kv-cache-memory-bytes", "INFO 08-23 [kv_cache_utils.py:2235] GPU KV cache size: 1,073,277 tokens\n" + reserved, 33, MemReserved, 2},
		{"the profiler's memory in use when nothing else is there", inUse, 50.28, MemInUse, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Parse(tt.log)
			if err != nil {
				t.Fatal(err)
			}
			f, src, ok := l.KVMemory()
			if !ok || f.Value != tt.gib || src != tt.src || f.Line.N != tt.line {
				t.Errorf("KVMemory = %+v, %q, %v; want %v GiB from %q at line %d", f, src, ok, tt.gib, tt.src, tt.line)
			}
		})
	}
	if l, _ := Parse("INFO GPU KV cache size: 5 tokens\n"); l != nil {
		if _, _, ok := l.KVMemory(); ok {
			t.Error("a log without a memory line has none")
		}
	}
}

// FuzzParseLiteral: any text is a literal, or an error; never a panic.
func FuzzParseLiteral(f *testing.F) {
	for _, s := range []string{`{'a': 1, 'b': [1, (2, 3)], 'c': {'d': None}}`, `<X: 1>`, `'\x41'`, `{'a'}`, `-1.5e3`, `'''x'''`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ParseLiteral(s)
		SplitFields(s)
		Parse(s)
	})
}
