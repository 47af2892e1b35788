package plan

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/vllm"
)

// engineJSON is an engine as plan --json writes it, key by key.
func engineJSON(t *testing.T, e Engine) map[string]any {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// TestFlagTableCoversTheEngine: the table's JSON keys are exactly the
// keys plan --json writes for an engine (less vllm_version and the "no_"
// twin of async scheduling), each flag's example sets its own key and no
// other, and reads back as written; names are unique and every flag has
// help and a default in every profile.
func TestFlagTableCoversTheEngine(t *testing.T) {
	var want []string
	for k := range engineJSON(t, Engine{}) {
		if k != "vllm_version" && k != "no_async_scheduling" {
			want = append(want, k)
		}
	}
	var got []string
	seen := map[string]bool{}
	for _, f := range Flags() {
		got = append(got, f.JSON())
		if seen[f.Name] {
			t.Errorf("--%s is in the table twice", f.Name)
		}
		seen[f.Name] = true
	}
	sort.Strings(want)
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("table keys %v\nengine keys %v", got, want)
	}
	zero := engineJSON(t, Engine{})
	for _, f := range Flags() {
		t.Run(f.Name, func(t *testing.T) {
			var e Engine
			if err := f.Set(&e, f.Example); err != nil {
				t.Fatalf("example %q: %v", f.Example, err)
			}
			if v, set := f.Get(&e); !set || v != f.Example {
				t.Errorf("Get after Set(%q) = %q, %v", f.Example, v, set)
			}
			changed := []string{}
			for k, v := range engineJSON(t, e) {
				if !reflect.DeepEqual(v, zero[k]) {
					changed = append(changed, k)
				}
			}
			sort.Strings(changed)
			wantChanged := []string{f.JSON()}
			if f.Name == "async-scheduling" {
				wantChanged = []string{"no_async_scheduling"} // the example is off
			}
			if !reflect.DeepEqual(changed, wantChanged) {
				t.Errorf("setting --%s %s changed %v, want %v", f.Name, f.Example, changed, wantChanged)
			}
			if err := f.Set(&e, ""); err != nil || e != (Engine{}) {
				t.Errorf("Set(\"\") left %+v, %v", e, err)
			}
			if f.Help == "" {
				t.Error("no help")
			}
			for _, v := range vllm.Versions() {
				prof, _ := vllm.Lookup(v)
				if f.Default(&prof) == "" {
					t.Errorf("no default in %s", v)
				}
			}
		})
	}
}

// TestFlagTextsRefuseNonsense: each kind refuses text it cannot read, with
// a reason that says what it wants; a choice is kept as given (the planner
// and the per-rank specs refuse an unknown one, naming the flag).
func TestFlagTextsRefuseNonsense(t *testing.T) {
	for _, c := range []struct{ flag, text, want string }{
		{"tensor-parallel-size", "0", "want a positive integer"},
		{"tensor-parallel-size", "two", "want a positive integer"},
		{"num-speculative-tokens", "-1", "want a non-negative integer"},
		{"kv-cache-memory-bytes", "12XB", "want a positive size such as 40GiB"},
		{"kv-cache-memory-bytes", "-1GiB", "want a positive size"},
		{"balanced-lambda", "0", "want a positive number"},
		{"async-scheduling", "sometimes", "want on or off"},
		{"disable-hybrid-kv-cache-manager", "perhaps", "want true or false"},
	} {
		f, ok := LookupFlag(c.flag)
		if !ok {
			t.Fatalf("no flag %s", c.flag)
		}
		var e Engine
		if err := f.Set(&e, c.text); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--%s %q: %v, want %q", c.flag, c.text, err, c.want)
		}
		if e != (Engine{}) {
			t.Errorf("--%s %q changed the engine: %+v", c.flag, c.text, e)
		}
	}
	sel, _ := LookupFlag("selector")
	var e Engine
	if err := sel.Set(&e, "magic"); err != nil || e.Selector != "magic" {
		t.Fatalf("selector magic: %v", err)
	}
	if _, _, err := e.resolve(ptr(vllm.For(vllm.Newest())), 1024, false, false); err == nil || !strings.Contains(err.Error(), "--selector magic: want classic, min, balanced or padding-bytes") {
		t.Errorf("resolving selector magic: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestEngineRangesComeFromTheTable: a resolved engine's value out of its
// flag's range is refused with the flag's name and its reason.
func TestEngineRangesComeFromTheTable(t *testing.T) {
	prof := vllm.For(vllm.Newest())
	for _, c := range []struct {
		e    Engine
		want string
	}{
		{Engine{TensorParallelSize: 2048}, "--tensor-parallel-size 2048: must be between 1 and 1024"},
		{Engine{PipelineParallelSize: 300}, "--pipeline-parallel-size 300: must be between 1 and 256"},
		{Engine{BlockSize: -1}, "--block-size -1: must be between 1 and 1048576"},
		{Engine{MaxNumBatchedTokens: 1 << 27}, "--max-num-batched-tokens 134217728: must be between 1 and 67108864"},
		{Engine{KVCacheMemoryBytes: -5}, "--kv-cache-memory-bytes -5: must be between 1 and 2^50"},
		{Engine{NumSpeculativeTokens: 65}, "--num-speculative-tokens 65: must be between 0 and 64"},
		{Engine{MinGroupLayers: -1}, "--min-kv-cache-group-layers -1: must be positive"},
		{Engine{GroupSize: 1 << 17}, "--kv-cache-group-size 131072: must be positive"},
		{Engine{BalancedLambda: 1e9}, "--balanced-lambda 1e+09: must be positive"},
		{Engine{NumGPUBlocksOverride: -2}, "--num-gpu-blocks-override -2: must be between 0 and 4294967296"},
		{Engine{BucketMerge: "sloppy"}, "--kv-cache-bucket-merge sloppy: want auto, strict or loose"},
	} {
		if _, _, err := c.e.resolve(&prof, 4096, false, false); err == nil || err.Error() != "plan: "+c.want {
			t.Errorf("%+v: %v, want %q", c.e, err, c.want)
		}
	}
}

// TestEngineJSONReadsTheTable: an engine's JSON takes every flag's key,
// sizes as numbers or strings, toggles as booleans or on/off and by their
// "no_" twin, and refuses keys and values it does not know by name.
func TestEngineJSONReadsTheTable(t *testing.T) {
	var e Engine
	if err := json.Unmarshal([]byte(`{"vllm_version": "0.19.0", "tensor_parallel_size": 4, "kv_cache_memory_bytes": "1.5GiB",
		"no_enable_prefix_caching": true, "async_scheduling": false, "kv_cache_bucket_merge": "strict", "balanced_lambda": 2}`), &e); err != nil {
		t.Fatal(err)
	}
	want := Engine{VLLMVersion: "0.19.0", TensorParallelSize: 4, KVCacheMemoryBytes: 3 << 29, PrefixCaching: "off", NoAsyncScheduling: true, BucketMerge: Strict, BalancedLambda: 2}
	if e != want {
		t.Errorf("got %+v\nwant %+v", e, want)
	}
	// A resolved engine writes both async keys; both false is unset.
	e = Engine{TensorParallelSize: 2}
	if err := json.Unmarshal([]byte(`{"async_scheduling": false, "no_async_scheduling": false, "kv_cache_memory_bytes": 1024}`), &e); err != nil {
		t.Fatal(err)
	}
	if e != (Engine{TensorParallelSize: 2, KVCacheMemoryBytes: 1024}) {
		t.Errorf("both async keys false, or a key left out, changed the engine: %+v", e)
	}
	for _, c := range []struct{ in, want string }{
		{`{"tensor_parallel": 2}`, `unknown key "tensor_parallel"`},
		{`{"bucket_merge": "strict"}`, `unknown key "bucket_merge"`},
		{`{"tensor_parallel_size": 2.5}`, "tensor_parallel_size = 2.5: want a whole number"},
		{`{"kv_cache_memory_bytes": "lots"}`, `kv_cache_memory_bytes = "lots": want a byte count`},
		{`{"disable_hybrid_kv_cache_manager": "yes"}`, "disable_hybrid_kv_cache_manager = \"yes\": want true or false"},
		{`{"async_scheduling": true, "no_async_scheduling": true}`, "contradict"},
		{`{"no_async_scheduling": "off"}`, "want true or false"},
		{`[1, 2]`, "want a JSON object"},
	} {
		var e Engine
		if err := json.Unmarshal([]byte(c.in), &e); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
}

// TestFlagArgsWriteWhatIsSet: a command line written from an engine names
// the flags it sets, in the table's order, leaves out values that state
// vLLM's default, and reads back into the same engine.
func TestFlagArgsWriteWhatIsSet(t *testing.T) {
	e := Engine{TensorParallelSize: 1, PipelineParallelSize: 2, KVCacheDType: "auto", BlockSize: 32, NoAsyncScheduling: true, DisableHybrid: true, KVCacheMemoryBytes: 3 << 29, Selector: Balanced}
	got := strings.Join(FlagArgs(e, nil, false), " ")
	want := "--pipeline-parallel-size 2 --block-size 32 --selector balanced --no-async-scheduling --disable-hybrid-kv-cache-manager --kv-cache-memory-bytes 1536MiB"
	if got != want {
		t.Errorf("FlagArgs = %q\nwant %q", got, want)
	}
	if got := strings.Join(FlagArgs(e, func(f *Flag) bool { return f.Origin == VLLMFlag }, true), " "); strings.Contains(got, "selector") || !strings.Contains(got, "--kv-cache-memory-bytes 1610612736") {
		t.Errorf("vLLM's flags in plain bytes: %q", got)
	}
}

// TestFlagFieldsHaveTheirKindsType: each flag's field, found at its offset
// in Engine, has the Go type its kind reads and writes (a wrong row would
// read another field's bytes).
func TestFlagFieldsHaveTheirKindsType(t *testing.T) {
	typ := reflect.TypeOf(Engine{})
	fieldAtOffset := func(at uintptr) (reflect.StructField, bool) {
		for i := 0; i < typ.NumField(); i++ {
			if typ.Field(i).Offset == at {
				return typ.Field(i), true
			}
		}
		return reflect.StructField{}, false
	}
	want := map[FlagKind]reflect.Kind{IntFlag: reflect.Int, BytesFlag: reflect.Int64, FloatFlag: reflect.Float64, ChoiceFlag: reflect.String, BoolFlag: reflect.Bool}
	used := map[uintptr]string{}
	for _, f := range Flags() {
		sf, ok := fieldAtOffset(f.at)
		if !ok {
			t.Errorf("--%s: no Engine field at offset %d", f.Name, f.at)
			continue
		}
		k, ok := want[f.Kind]
		if f.Kind == ToggleFlag {
			k, ok = reflect.String, true
			if f.pair {
				k = reflect.Bool
				if no, _ := fieldAtOffset(f.no); no.Type.Kind() != reflect.Bool || f.no == f.at {
					t.Errorf("--%s: its no- field %s is not a second bool", f.Name, no.Name)
				}
			}
		}
		if !ok || sf.Type.Kind() != k {
			t.Errorf("--%s (%s) is stored in %s, a %s", f.Name, f.Kind, sf.Name, sf.Type)
		}
		if other, dup := used[f.at]; dup {
			t.Errorf("--%s and --%s share the field %s", f.Name, other, sf.Name)
		}
		used[f.at] = f.Name
	}
}
