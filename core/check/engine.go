package check

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/vlog"
)

// Speculative is the speculative decoding a log configures.
type Speculative struct {
	Method string `json:"method"` // mtp, eagle, eagle3, dflash, draft_model, ngram, ...
	Model  string `json:"model"`  // the draft model, when the method has one
	Tokens int    `json:"num_speculative_tokens"`
}

// UsesMTP reports whether the draft is the model's own MTP layers.
func (s Speculative) UsesMTP() bool { return strings.Contains(s.Method, "mtp") }

// Setup is what a log says its engine was asked for, in kvscope's terms.
type Setup struct {
	Version string       `json:"vllm_version"` // the profile's name
	Engine  plan.Engine  `json:"engine"`
	Spec    *Speculative `json:"speculative,omitempty"`
	// MemGiB is the smallest available KV cache memory a worker logged
	// (GiB, printed to 2 decimals), MemLine its line.
	MemGiB  float64 `json:"available_kv_cache_gib"`
	HasMem  bool    `json:"-"`
	MemLine int     `json:"-"`
	// Flags are the kvscope flags that plan the same engine.
	Flags []string `json:"flags"`
	Notes []string `json:"notes"`
}

// SetupOf reads the engine settings a log states: the version (or the one
// given), the non-default arguments and the engine config line, and the
// figures vLLM resolved and printed (max model len, max_num_batched_tokens,
// available memory). Settings the log leaves out keep the version's
// defaults.
func SetupOf(l *vlog.Log, version string) (*Setup, error) {
	s := &Setup{Notes: []string{}}
	v := version
	if v == "" {
		if l.Version == "" {
			return nil, &vlog.ParseError{Reason: "the log names no vLLM version (no version banner or \"Initializing a V1 LLM engine (vX)\" line): pass --vllm-version"}
		}
		v = l.Version
	}
	ver, err := vllm.ParseVersion(v)
	if err != nil {
		return nil, fmt.Errorf("the log's vLLM version %q: %w", v, err)
	}
	s.Version = ver.Name()
	if ver.Dev {
		s.Notes = append(s.Notes, fmt.Sprintf("%s is a development build; it is planned as %s", l.Version, ver.Name()))
	}
	e := plan.Engine{VLLMVersion: ver.Name()}
	setInt := func(dst *int, _ string, n int) { *dst = n }
	if n, ok := firstInt(l, "tensor_parallel_size"); ok && n > 1 {
		setInt(&e.TensorParallelSize, "--tensor-parallel-size", n)
	}
	if n, ok := firstInt(l, "pipeline_parallel_size"); ok && n > 1 {
		setInt(&e.PipelineParallelSize, "--pipeline-parallel-size", n)
	}
	switch {
	case l.MaxModelLen != nil:
		setInt(&e.MaxModelLen, "--max-model-len", l.MaxModelLen.Value)
	default:
		if n, ok := firstInt(l, "max_model_len", "max_seq_len"); ok && n > 0 {
			setInt(&e.MaxModelLen, "--max-model-len", n)
		}
	}
	switch {
	case l.MNBT != nil:
		setInt(&e.MaxNumBatchedTokens, "--max-num-batched-tokens", l.MNBT.Value)
	default:
		if n, ok := l.ArgInt("max_num_batched_tokens"); ok && n > 0 {
			setInt(&e.MaxNumBatchedTokens, "--max-num-batched-tokens", n)
		} else {
			s.Notes = append(s.Notes, fmt.Sprintf("the log prints no max_num_batched_tokens: assuming %d (the API server's default on GPUs of 70 GiB and more)", plan.DefaultMaxNumBatchedTokens))
		}
	}
	if n, ok := l.ArgInt("block_size"); ok && n > 0 {
		setInt(&e.BlockSize, "--block-size", n)
	}
	if n, ok := l.ArgInt("num_gpu_blocks_override"); ok && n > 0 {
		setInt(&e.NumGPUBlocksOverride, "--num-gpu-blocks-override", n)
	}
	if d := stringSetting(l, "kv_cache_dtype"); d != "" && d != "auto" {
		e.KVCacheDType = d
	}
	if d := stringSetting(l, "mamba_ssm_cache_dtype"); d != "" && d != "auto" {
		e.MambaSSMCacheDType = d
	}
	if m, ok := l.ArgString("mamba_cache_mode"); ok && m != "" {
		e.MambaCacheMode = m
	}
	if b, ok := boolSetting(l, "enable_prefix_caching"); ok {
		e.PrefixCaching = "off"
		if b {
			e.PrefixCaching = "on"
		}
	}
	if b, ok := l.Args["async_scheduling"].(bool); ok {
		if b {
			e.AsyncScheduling = true
		} else {
			e.NoAsyncScheduling = true
		}
	}
	if b, ok := l.Args["disable_hybrid_kv_cache_manager"].(bool); ok && b {
		e.DisableHybrid = true
	}
	if l.Backend != nil {
		if name, ok := backendFor(l.Backend.Value); ok {
			e.AttentionBackend = name
		}
	}
	if sp := speculativeOf(l); sp != nil {
		s.Spec = sp
		e.NumSpeculativeTokens = sp.Tokens
	}
	if f, ok := l.MinAvailableGiB(); ok {
		s.MemGiB, s.HasMem, s.MemLine = f.Value, true, f.Line.N
	}
	s.Engine = e
	s.Flags = FlagsOf(e, s.MemGiB, s.HasMem)
	return s, nil
}

// FlagsOf writes an engine's settings as kvscope's flags: the ones that
// differ from the defaults, and the logged memory.
func FlagsOf(e plan.Engine, memGiB float64, hasMem bool) []string {
	flags := []string{"--vllm-version", e.VLLMVersion}
	num := func(flag string, n int) {
		if n > 0 {
			flags = append(flags, flag, strconv.Itoa(n))
		}
	}
	str := func(flag, v string) {
		if v != "" && v != "auto" {
			flags = append(flags, flag, v)
		}
	}
	if e.TensorParallelSize > 1 {
		num("--tensor-parallel-size", e.TensorParallelSize)
	}
	if e.PipelineParallelSize > 1 {
		num("--pipeline-parallel-size", e.PipelineParallelSize)
	}
	num("--max-model-len", e.MaxModelLen)
	num("--max-num-batched-tokens", e.MaxNumBatchedTokens)
	num("--block-size", e.BlockSize)
	num("--num-gpu-blocks-override", e.NumGPUBlocksOverride)
	num("--num-speculative-tokens", e.NumSpeculativeTokens)
	str("--kv-cache-dtype", e.KVCacheDType)
	str("--mamba-ssm-cache-dtype", e.MambaSSMCacheDType)
	str("--mamba-cache-mode", e.MambaCacheMode)
	str("--selector", string(e.Selector))
	str("--attention-backend", e.AttentionBackend)
	switch e.PrefixCaching {
	case "on":
		flags = append(flags, "--enable-prefix-caching")
	case "off":
		flags = append(flags, "--no-enable-prefix-caching")
	}
	if e.AsyncScheduling {
		flags = append(flags, "--async-scheduling")
	}
	if e.NoAsyncScheduling {
		flags = append(flags, "--no-async-scheduling")
	}
	if e.DisableHybrid {
		flags = append(flags, "--disable-hybrid-kv-cache-manager")
	}
	if hasMem {
		flags = append(flags, "--kv-cache-memory-bytes", strconv.FormatFloat(memGiB, 'f', 2, 64)+"GiB")
	}
	return flags
}

// backendFor maps a logged backend to one kvscope plans with.
func backendFor(name string) (string, bool) {
	switch name {
	case "FLASH_ATTN", "FLASHINFER", "FLASH_ATTN_MLA", "FLASHMLA", "CUTLASS_MLA", "TRITON_ATTN", "TRITON_MLA":
		return name, true
	}
	return "", false
}

// firstInt is the first of keys found as an integer in the engine config
// line, then in the non-default arguments.
func firstInt(l *vlog.Log, keys ...string) (int, bool) {
	for _, k := range keys {
		if n, ok := l.ConfigInt(k); ok {
			return n, true
		}
		if n, ok := l.ArgInt(k); ok {
			return n, true
		}
	}
	return 0, false
}

// stringSetting is a setting from the engine config line or the
// non-default arguments, unquoted and without a "torch." prefix.
func stringSetting(l *vlog.Log, key string) string {
	if v, ok := l.ConfigValue(key); ok && v != "None" {
		return strings.TrimPrefix(vlog.Unquote(v), "torch.")
	}
	if s, ok := l.ArgString(key); ok {
		return strings.TrimPrefix(s, "torch.")
	}
	return ""
}

func boolSetting(l *vlog.Log, key string) (bool, bool) {
	if v, ok := l.ConfigValue(key); ok {
		switch v {
		case "True":
			return true, true
		case "False":
			return false, true
		}
	}
	b, ok := l.Args[key].(bool)
	return b, ok
}

// speculativeOf reads the speculative config: the engine config line's
// SpeculativeConfig(method=..., model=..., num_spec_tokens=N) or the
// non-default argument's dict (or its JSON string).
func speculativeOf(l *vlog.Log) *Speculative {
	if v, ok := l.ConfigValue("speculative_config"); ok && v != "None" {
		if fs := vlog.CallFields(v); fs != nil {
			sp := &Speculative{}
			if m, ok := vlog.Lookup(fs, "method"); ok {
				sp.Method = vlog.Unquote(m)
			}
			if m, ok := vlog.Lookup(fs, "model"); ok {
				sp.Model = vlog.Unquote(m)
			}
			if n, ok := vlog.Lookup(fs, "num_spec_tokens"); ok {
				sp.Tokens, _ = strconv.Atoi(n)
			}
			if sp.Tokens > 0 {
				return sp
			}
		}
	}
	raw, ok := l.Args["speculative_config"]
	if !ok {
		return nil
	}
	if s, ok := raw.(string); ok {
		v, err := vlog.ParseLiteral(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(s, "true", "True"), "false", "False"), "null", "None"))
		if err != nil {
			return nil
		}
		raw = v
	}
	d, ok := raw.(map[string]any)
	if !ok {
		return nil
	}
	sp := &Speculative{}
	sp.Method, _ = d["method"].(string)
	sp.Model, _ = d["model"].(string)
	if n, ok := d["num_speculative_tokens"].(int64); ok {
		sp.Tokens = int(n)
	}
	if sp.Tokens <= 0 {
		return nil
	}
	return sp
}
