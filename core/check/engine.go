package check

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
	// MemGiB is the smallest KV cache memory a worker logged (GiB,
	// printed to 2 decimals), MemLine its line, MemSource the line's kind
	// (vlog.MemAvailable, MemReserved, MemInUse, or the non-default
	// argument kv_cache_memory_bytes); MemBytes the memory to the byte
	// when the non-default arguments state it (0 otherwise).
	MemGiB    float64 `json:"available_kv_cache_gib"`
	MemSource string  `json:"kv_cache_memory_source,omitempty"`
	MemBytes  int64   `json:"kv_cache_memory_bytes,omitempty"`
	HasMem    bool    `json:"-"`
	MemLine   int     `json:"-"`
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
		if ve := (*vllm.VersionError)(nil); version == "" && l.VersionLine != nil && errors.As(err, &ve) {
			return nil, fmt.Errorf("line %d: the log's vLLM version %q is not one kvscope reads: %s", l.VersionLine.N, v, ve.Reason)
		}
		return nil, fmt.Errorf("the log's vLLM version %q: %w", v, err)
	}
	s.Version = ver.Name()
	if ver.Dev {
		s.Notes = append(s.Notes, fmt.Sprintf("%s is a development build; it is planned as %s", l.Version, ver.Name()))
	}
	e := plan.Engine{VLLMVersion: ver.Name()}
	// The flags a log states where the engine-flag table says it does.
	for _, f := range plan.Flags() {
		if v, ok := loggedValue(l, &f); ok {
			f.Set(&e, v) // loggedValue returns only values the flag takes
		}
	}
	// The figures vLLM resolves and prints, before the arguments asked.
	switch {
	case l.MaxModelLen != nil:
		e.MaxModelLen = l.MaxModelLen.Value
	default:
		if n, ok := firstInt(l, "max_model_len", "max_seq_len"); ok && n > 0 {
			e.MaxModelLen = n
		}
	}
	switch {
	case l.MNBT != nil:
		e.MaxNumBatchedTokens = l.MNBT.Value
	default:
		if n, ok := l.ArgInt("max_num_batched_tokens"); ok && n > 0 {
			e.MaxNumBatchedTokens = n
		} // else assumed (see assumptions)
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
	s.readMemory(l)
	s.Engine = e
	s.Flags = s.flags()
	return s, nil
}

// argMemory is MemSource when the memory comes from the non-default
// arguments alone.
const argMemory = "non-default args: kv_cache_memory_bytes"

// readMemory finds the KV cache memory per rank: the smallest worker's
// available memory, else the memory --kv-cache-memory-bytes reserved (to
// the byte when the non-default arguments state it), else the memory in
// use that the profiler's suggestion line states, else the argument.
func (s *Setup) readMemory(l *vlog.Log) {
	f, src, ok := l.KVMemory()
	if ok {
		s.MemGiB, s.HasMem, s.MemLine, s.MemSource = f.Value, true, f.Line.N, string(src)
	}
	if src == vlog.MemInUse {
		s.Notes = append(s.Notes, fmt.Sprintf("the KV cache memory is the profiler's \"Current kv cache memory in use is %g GiB\" (line %d): the log has no \"Available KV cache memory\" line, and kvscope reads that figure as the same memory (inferred from the line's wording)", f.Value, f.Line.N))
	}
	b, isArg := l.ArgInt("kv_cache_memory_bytes")
	if !isArg || b <= 0 || src == vlog.MemAvailable || src == vlog.MemInUse {
		return
	}
	g := float64(b) / gib
	switch {
	case !ok:
		s.MemGiB, s.MemBytes, s.HasMem, s.MemSource = g, int64(b), true, argMemory
		s.Notes = append(s.Notes, fmt.Sprintf("the log has no KV cache memory line: kvscope plans with the non-default argument kv_cache_memory_bytes=%d, which vLLM reserves as it is", b))
	case math.Abs(g-s.MemGiB) <= 0.005+1e-9:
		s.MemBytes = int64(b)
	default:
		s.Notes = append(s.Notes, fmt.Sprintf("the non-default argument kv_cache_memory_bytes=%d (%.2f GiB) is not the %g GiB line %d reserved: kvscope plans with the line's", b, g, s.MemGiB, s.MemLine))
	}
}

// memory is the KV cache memory a check plans with.
type memory struct {
	gib   float64
	bytes int64 // to the byte, when the log states it; else gib ±0.005
	ok    bool
}

func (s *Setup) memory() memory { return memory{gib: s.MemGiB, bytes: s.MemBytes, ok: s.HasMem} }

// flags are the kvscope flags that plan the setup's engine.
func (s *Setup) flags() []string {
	if s.MemBytes > 0 {
		return append(FlagsOf(s.Engine, 0, false), "--kv-cache-memory-bytes", strconv.FormatInt(s.MemBytes, 10))
	}
	return FlagsOf(s.Engine, s.MemGiB, s.HasMem)
}

// FlagsOf writes an engine's settings as kvscope's flags: the version,
// the flags the engine sets (in the engine-flag table's order), and the
// logged memory.
func FlagsOf(e plan.Engine, memGiB float64, hasMem bool) []string {
	flags := append([]string{"--vllm-version", e.VLLMVersion}, plan.FlagArgs(e, nil, false)...)
	if hasMem {
		flags = append(flags, "--kv-cache-memory-bytes", strconv.FormatFloat(memGiB, 'f', 2, 64)+"GiB")
	}
	return flags
}

// loggedValue is a flag's value as the log states it, in kvscope's
// syntax: from the first place the flag's LogSource names (the engine
// config line, then the non-default arguments) that holds a value the
// flag takes; false when none does, or when the value is one that states
// vLLM's default (the flag's Unset).
func loggedValue(l *vlog.Log, f *plan.Flag) (string, bool) {
	src := f.Log()
	var found []string
	if src.Config {
		if raw, ok := l.ConfigValue(f.JSON()); ok && raw != "None" {
			found = append(found, configLiteral(f, raw))
		}
	}
	if src.Args {
		if v, ok := argLiteral(f, l.Args[f.JSON()]); ok {
			found = append(found, v)
		}
	}
	for _, v := range found {
		if slices.Contains(f.Unset, v) {
			return "", false
		}
		var probe plan.Engine
		if v != "" && f.Set(&probe, v) == nil {
			return v, true
		}
	}
	return "", false
}

// configLiteral is a value of the engine config line in kvscope's
// syntax: unquoted, without a "torch." prefix, True and False as true
// and false.
func configLiteral(f *plan.Flag, raw string) string {
	switch raw {
	case "True":
		return "true"
	case "False":
		return "false"
	}
	if f.Kind == plan.IntFlag {
		if _, err := strconv.Atoi(raw); err != nil {
			return ""
		}
	}
	return strings.TrimPrefix(vlog.Unquote(raw), "torch.")
}

// argLiteral is a non-default argument in kvscope's syntax, when it has
// the flag's kind: a whole number, a string or a boolean.
func argLiteral(f *plan.Flag, v any) (string, bool) {
	switch f.Kind {
	case plan.IntFlag:
		switch n := v.(type) {
		case int64:
			return strconv.FormatInt(n, 10), true
		case float64:
			if n == float64(int64(n)) {
				return strconv.FormatInt(int64(n), 10), true
			}
		}
	case plan.ChoiceFlag:
		if s, ok := v.(string); ok {
			return strings.TrimPrefix(s, "torch."), true
		}
	case plan.BoolFlag, plan.ToggleFlag:
		if b, ok := v.(bool); ok {
			return strconv.FormatBool(b), true
		}
	}
	return "", false
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
