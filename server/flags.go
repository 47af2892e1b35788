package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	modelcatalog "github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// engineFlags registers vLLM's engine flags on a flag set, once plainly
// (for both engines) and, when sides is set, once per side with a "p-" or
// "d-" prefix that overrides the plain value for that side.
type engineFlags struct {
	fs      *flag.FlagSet
	sides   []string
	version *string
	vals    map[string]map[string]*string // side ("" / "p" / "d") -> flag -> value
	bools   map[string]map[string]*bool
}

// engineFlagNames are the valued engine flags, with their help text.
var engineFlagNames = []struct{ name, help string }{
	{"tensor-parallel-size", "tensor-parallel size (1)"},
	{"pipeline-parallel-size", "pipeline-parallel size (1)"},
	{"block-size", "tokens per KV cache block (16, or the backend's)"},
	{"max-model-len", "maximum tokens per request (derived from the config)"},
	{"max-num-batched-tokens", "tokens per scheduler step (8192)"},
	{"kv-cache-dtype", "auto|bfloat16|float16|fp8 (auto = model dtype)"},
	{"kv-cache-memory-bytes", "KV cache memory per rank, bytes or with a GiB/MiB suffix (40GiB)"},
	{"num-speculative-tokens", "speculative tokens per step (0)"},
	{"selector", "group-size selector: classic|balanced|padding-bytes (padding-bytes)"},
	{"min-kv-cache-group-layers", "padding-bytes selector: smallest group size considered (3)"},
	{"kv-cache-group-size", "fixed group size g, overriding the selector"},
	{"kv-cache-bucket-merge", "auto|strict|loose: how layers of other head layouts share a bucket (auto = loose with padding-bytes; inferred)"},
	{"balanced-lambda", "balanced selector: cost of one group in padding layers (1.0)"},
	{"mamba-cache-mode", "none|align|all (none)"},
	{"mamba-ssm-cache-dtype", "auto|float32|bfloat16|float16 (auto = model dtype)"},
	{"attention-backend", "FLASH_ATTN|FLASHINFER|FLASH_ATTN_MLA|FLASHMLA|CUTLASS_MLA (FLASH_ATTN, or FLASH_ATTN_MLA for MLA)"},
	{"num-gpu-blocks-override", "force num_blocks"},
}

var engineBoolNames = []struct{ name, help string }{
	{"disable-hybrid-kv-cache-manager", "one KV cache group: sliding and chunked layers become full attention"},
	{"async-scheduling", "async scheduling (the default from vLLM 0.14): 2 batches in flight at PP 1"},
	{"no-async-scheduling", "disable async scheduling: 1 batch in flight at PP 1"},
	{"enable-prefix-caching", "prefix caching (hybrid models: off by default before vLLM 0.28)"},
	{"no-enable-prefix-caching", "disable prefix caching"},
}

func newEngineFlags(fs *flag.FlagSet, sides ...string) *engineFlags {
	ef := &engineFlags{fs: fs, sides: sides, vals: map[string]map[string]*string{}, bools: map[string]map[string]*bool{}}
	ef.version = fs.String("vllm-version", "", "the vLLM version whose planner and connector rules apply: a release (0.11.0 ... "+vllm.Newest().Name()+"), main, or "+vllm.Branch+" (see kvscope versions; default the newest release, "+vllm.Newest().Name()+")")
	for _, side := range append([]string{""}, sides...) {
		prefix, note := "", ""
		if side != "" {
			prefix, note = side+"-", " ("+strings.ToUpper(side)+" only)"
		}
		ef.vals[side] = map[string]*string{}
		ef.bools[side] = map[string]*bool{}
		for _, f := range engineFlagNames {
			ef.vals[side][f.name] = fs.String(prefix+f.name, "", f.help+note)
		}
		for _, f := range engineBoolNames {
			ef.bools[side][f.name] = fs.Bool(prefix+f.name, false, f.help+note)
		}
	}
	return ef
}

// engine builds one side's plan.Engine: the side's flags override the
// plain ones.
func (ef *engineFlags) engine(side string) (plan.Engine, error) {
	set := map[string]bool{}
	ef.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	val := func(name string) (string, string, bool) {
		if side != "" && set[side+"-"+name] {
			return *ef.vals[side][name], "--" + side + "-" + name, true
		}
		if set[name] {
			return *ef.vals[""][name], "--" + name, true
		}
		return "", "", false
	}
	boolean := func(name string) bool {
		if side != "" && set[side+"-"+name] {
			return *ef.bools[side][name]
		}
		return *ef.bools[""][name]
	}
	var e plan.Engine
	e.VLLMVersion = *ef.version
	if _, err := vllm.ParseVersion(e.VLLMVersion); err != nil {
		return e, err
	}
	ints := []struct {
		name string
		dst  *int
	}{
		{"tensor-parallel-size", &e.TensorParallelSize},
		{"pipeline-parallel-size", &e.PipelineParallelSize},
		{"block-size", &e.BlockSize},
		{"max-model-len", &e.MaxModelLen},
		{"max-num-batched-tokens", &e.MaxNumBatchedTokens},
		{"num-speculative-tokens", &e.NumSpeculativeTokens},
		{"min-kv-cache-group-layers", &e.MinGroupLayers},
		{"kv-cache-group-size", &e.GroupSize},
		{"num-gpu-blocks-override", &e.NumGPUBlocksOverride},
	}
	for _, f := range ints {
		s, flagName, ok := val(f.name)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 && f.name != "num-speculative-tokens" || n < 0 {
			return e, fmt.Errorf("%s %q: want a positive integer", flagName, s)
		}
		*f.dst = n
	}
	if s, flagName, ok := val("kv-cache-memory-bytes"); ok {
		n, err := parseBytes(s)
		if err != nil {
			return e, fmt.Errorf("%s %q: %v", flagName, s, err)
		}
		e.KVCacheMemoryBytes = n
	}
	if s, flagName, ok := val("balanced-lambda"); ok {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 {
			return e, fmt.Errorf("%s %q: want a positive number", flagName, s)
		}
		e.BalancedLambda = f
	}
	strs := []struct {
		name string
		dst  *string
	}{
		{"kv-cache-dtype", &e.KVCacheDType},
		{"mamba-cache-mode", &e.MambaCacheMode},
		{"mamba-ssm-cache-dtype", &e.MambaSSMCacheDType},
		{"attention-backend", &e.AttentionBackend},
	}
	for _, f := range strs {
		if s, _, ok := val(f.name); ok {
			*f.dst = s
		}
	}
	if s, _, ok := val("selector"); ok {
		e.Selector = plan.Selector(s)
	}
	if s, _, ok := val("kv-cache-bucket-merge"); ok {
		e.BucketMerge = plan.BucketMerge(s)
	}
	e.DisableHybrid = boolean("disable-hybrid-kv-cache-manager")
	if boolean("async-scheduling") && boolean("no-async-scheduling") {
		return e, fmt.Errorf("--async-scheduling and --no-async-scheduling contradict each other")
	}
	e.AsyncScheduling = boolean("async-scheduling")
	e.NoAsyncScheduling = boolean("no-async-scheduling")
	switch {
	case boolean("enable-prefix-caching") && boolean("no-enable-prefix-caching"):
		return e, fmt.Errorf("--enable-prefix-caching and --no-enable-prefix-caching contradict each other")
	case boolean("enable-prefix-caching"):
		e.PrefixCaching = "on"
	case boolean("no-enable-prefix-caching"):
		e.PrefixCaching = "off"
	}
	return e, e.CheckFlags()
}

// overlay applies the engine flags given on the command line (and only
// those) to base: kvscope check's way to supply what a log leaves out.
func (ef *engineFlags) overlay(base *plan.Engine) error {
	e, err := ef.engine("")
	if err != nil {
		return err
	}
	var unknown []string
	ef.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "vllm-version":
			base.VLLMVersion = e.VLLMVersion
		case "tensor-parallel-size":
			base.TensorParallelSize = e.TensorParallelSize
		case "pipeline-parallel-size":
			base.PipelineParallelSize = e.PipelineParallelSize
		case "block-size":
			base.BlockSize = e.BlockSize
		case "max-model-len":
			base.MaxModelLen = e.MaxModelLen
		case "max-num-batched-tokens":
			base.MaxNumBatchedTokens = e.MaxNumBatchedTokens
		case "kv-cache-dtype":
			base.KVCacheDType = e.KVCacheDType
		case "num-speculative-tokens":
			base.NumSpeculativeTokens = e.NumSpeculativeTokens
		case "selector":
			base.Selector = e.Selector
		case "min-kv-cache-group-layers":
			base.MinGroupLayers = e.MinGroupLayers
		case "kv-cache-group-size":
			base.GroupSize = e.GroupSize
		case "kv-cache-bucket-merge":
			base.BucketMerge = e.BucketMerge
		case "balanced-lambda":
			base.BalancedLambda = e.BalancedLambda
		case "mamba-cache-mode":
			base.MambaCacheMode = e.MambaCacheMode
		case "mamba-ssm-cache-dtype":
			base.MambaSSMCacheDType = e.MambaSSMCacheDType
		case "attention-backend":
			base.AttentionBackend = e.AttentionBackend
		case "num-gpu-blocks-override":
			base.NumGPUBlocksOverride = e.NumGPUBlocksOverride
		case "disable-hybrid-kv-cache-manager":
			base.DisableHybrid = e.DisableHybrid
		case "async-scheduling", "no-async-scheduling":
			base.AsyncScheduling, base.NoAsyncScheduling = e.AsyncScheduling, e.NoAsyncScheduling
		case "enable-prefix-caching", "no-enable-prefix-caching":
			base.PrefixCaching = e.PrefixCaching
		case "kv-cache-memory-bytes":
			unknown = append(unknown, "--"+f.Name)
		}
	})
	if len(unknown) > 0 {
		return fmt.Errorf("%s: kvscope check takes the memory from the log's \"Available KV cache memory\" line", strings.Join(unknown, ", "))
	}
	return nil
}

// parseBytes reads "42949672960", "40GiB", "512MiB" or "1.5GiB".
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		scale  float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || !(f > 0 && f*u.scale <= 1<<50) { // NaN fails both

				return 0, fmt.Errorf("want a positive size such as 40GiB")
			}
			return int64(f * u.scale), nil
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive size such as 40GiB")
	}
	return n, nil
}

// modelFlags are --model and --draft.
type modelFlags struct {
	model, draft *string
}

func newModelFlags(fs *flag.FlagSet) modelFlags {
	return modelFlags{
		model: fs.String("model", "", "a config.json path, or a bundled model name (see `kvscope models`)"),
		draft: fs.String("draft", "", "a draft model's config.json path or bundled name, or \"mtp\" for the model's own MTP layers"),
	}
}

// load reads the target and attaches the draft.
func (mf modelFlags) load(cat model.Catalog) (*model.Model, error) {
	if *mf.model == "" {
		return nil, fmt.Errorf("--model is required (a config.json path or a bundled name)")
	}
	m, err := readModel(cat, *mf.model)
	if err != nil {
		return nil, err
	}
	switch d := *mf.draft; d {
	case "":
		return m, nil
	case "mtp":
		return m.WithMTP()
	default:
		dm, err := readModel(cat, d)
		if err != nil {
			return nil, fmt.Errorf("--draft: %w", err)
		}
		return m.WithDraft(dm)
	}
}

// maxConfigBytes caps a config.json read from a path: the largest real
// config is tens of KiB.
const maxConfigBytes = 4 << 20

func readModel(cat model.Catalog, ref string) (*model.Model, error) {
	name := ref
	data, err := readCapped(ref, maxConfigBytes)
	var big *tooLargeError
	if errors.As(err, &big) {
		return nil, fmt.Errorf("--model %w", err)
	}
	if err != nil {
		var lerr error
		name, data, lerr = cat.Lookup(ref)
		if lerr != nil {
			return nil, fmt.Errorf("--model %s: not a readable file (%v), and %v", ref, err, lerr)
		}
	}
	m, err := model.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	m.Name = displayName(name)
	return m, nil
}

func displayName(ref string) string {
	base := ref
	if i := strings.LastIndexAny(base, "/\\"); i >= 0 && strings.HasSuffix(base, ".json") {
		base = base[i+1:]
	}
	base = strings.TrimSuffix(base, ".json")
	return strings.Replace(base, "__", "/", 1)
}

// catalog is the bundled model configs, embedded in the binary.
func catalog() model.Catalog { return modelcatalog.Bundled() }
