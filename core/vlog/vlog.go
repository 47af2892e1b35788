// Package vlog reads a vLLM engine's startup log as users paste it (with or
// without the "(APIServer pid=1)" and "(EngineCore_DP0 pid=...)" prefixes,
// timestamps and ANSI colours) into what kvscope needs to plan the same
// engine and check its plan: the version, the non-default arguments (a
// Python dict literal, parsed as one), the engine config line, and the
// figures vLLM logs about its KV cache.
//
// It only reads; planning with what it read and comparing is package
// check's business.
package vlog

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MaxLogBytes is the largest log Parse reads.
const MaxLogBytes = 16 << 20

// Line is one log line kvscope recognised: its number (from 1) and text
// without ANSI colours.
type Line struct {
	N    int    `json:"line"`
	Text string `json:"text"`
}

// Figure is a number a log line states, with where it stands.
type Figure[T any] struct {
	Value T    `json:"value"`
	Line  Line `json:"source"`
}

// PaddingWarning is "Add N padding layers, may waste at most X% KV cache
// memory".
type PaddingWarning struct {
	Layers  int     `json:"layers"`
	Percent float64 `json:"percent"`
}

// Concurrency is "Maximum concurrency for L tokens per request: X.XXx".
type Concurrency struct {
	Tokens int     `json:"tokens"`
	X      float64 `json:"x"`
}

// Refusal is vLLM's start-up refusal for lack of KV cache memory.
type Refusal struct {
	MaxModelLen     int     `json:"max_model_len"`
	NeededGiB       float64 `json:"needed_gib"`
	AvailableGiB    float64 `json:"available_gib"`
	EstimatedMaxLen int     `json:"estimated_max_model_len"`
	NoMemory        bool    `json:"no_memory"` // "No available memory for the cache blocks"
	Line            Line    `json:"source"`
}

// Log is what a startup log says about one engine.
type Log struct {
	Version     string `json:"vllm_version"` // as logged: "0.20.2", "0.11.1rc6.dev115+g..."
	VersionLine *Line  `json:"version_source,omitempty"`
	Model       string `json:"model"`
	// Args is the "non-default args: {...}" dict; Config the engine
	// config line's fields ("Initializing a V1 LLM engine (vX) with
	// config: ...").
	Args   map[string]any `json:"non_default_args"`
	Config []Field        `json:"-"`

	MaxModelLen  *Figure[int]      `json:"max_model_len,omitempty"`          // "Using max model len N"
	MNBT         *Figure[int]      `json:"max_num_batched_tokens,omitempty"` // "Chunked prefill is enabled with max_num_batched_tokens=N"
	AvailableGiB []Figure[float64] `json:"available_kv_cache_gib"`           // "Available KV cache memory: X GiB", per worker
	// ReservedGiB is "Initial free memory F GiB, reserved X GiB memory for
	// KV Cache as specified by kv_cache_memory_bytes config and skipped
	// memory profiling", per worker: what vLLM prints instead of the
	// available memory when --kv-cache-memory-bytes is set.
	ReservedGiB []Figure[float64] `json:"reserved_kv_cache_gib"`
	// InUseGiB is the profiler's suggestion line ("Free memory on device
	// (...) ... Replace gpu_memory_utilization config with
	// --kv-cache-memory=N ... Current kv cache memory in use is C GiB."),
	// per worker: C, the KV cache memory the worker holds.
	InUseGiB    []Figure[float64]        `json:"kv_cache_in_use_gib"`
	BlockSize   *Figure[int]             `json:"block_size,omitempty"`        // "Setting attention block size to N tokens"
	MambaPad    *Figure[float64]         `json:"mamba_pad_percent,omitempty"` // "Padding mamba page size by X%"
	Padding     []Figure[PaddingWarning] `json:"padding_layers"`              // "Add N padding layers ..."
	KVTokens    []Figure[int64]          `json:"kv_cache_tokens"`             // "GPU KV cache size: N tokens", per worker
	Concurrency []Figure[Concurrency]    `json:"max_concurrency"`             // per worker
	Override    *Figure[[2]int64]        `json:"num_gpu_blocks_override,omitempty"`
	Refusal     *Refusal                 `json:"refusal,omitempty"`
	MambaMode   *Figure[string]          `json:"mamba_cache_mode,omitempty"` // "Mamba cache mode is set to 'align'"
	Async       *Figure[bool]            `json:"async_scheduling,omitempty"` // "Asynchronous scheduling is enabled."
	PrefixOff   *Line                    `json:"prefix_caching_disabled,omitempty"`
	Failed      *Line                    `json:"failed_to_start,omitempty"`       // "EngineCore failed to start"
	SSMDType    *Figure[string]          `json:"mamba_ssm_cache_dtype,omitempty"` // "Updating mamba_ssm_cache_dtype to 'float16'"
	Backend     *Figure[string]          `json:"attention_backend,omitempty"`
	Recognised  []Line                   `json:"recognised"`
}

// ParseError reports a log kvscope cannot use, naming what is missing.
type ParseError struct {
	Reason string
}

func (e *ParseError) Error() string { return "vlog: " + e.Reason }

// patterns are the lines kvscope reads, compiled when a log is parsed
// (not when the package loads: the browser app starts without them).
type patterns struct {
	ansi          *regexp.Regexp
	reBanner      *regexp.Regexp
	reEngine      *regexp.Regexp
	reBannerModel *regexp.Regexp
	reArgs        *regexp.Regexp
	reMaxLen      *regexp.Regexp
	reMNBT        *regexp.Regexp
	reAvail       *regexp.Regexp
	reReserved    *regexp.Regexp
	reInUse       *regexp.Regexp
	reBlock       *regexp.Regexp
	reMambaPad    *regexp.Regexp
	rePadding     *regexp.Regexp
	reKVTokens    *regexp.Regexp
	reConc        *regexp.Regexp
	reOverride    *regexp.Regexp
	reRefusal     *regexp.Regexp
	reNoMemory    *regexp.Regexp
	reFailed      *regexp.Regexp
	reMambaMode   *regexp.Regexp
	reAsync       *regexp.Regexp
	rePrefixOff   *regexp.Regexp
	reSSMDType    *regexp.Regexp
	reBackend     *regexp.Regexp
}

func newPatterns() *patterns {
	return &patterns{
		ansi:          regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`),
		reBanner:      regexp.MustCompile(`(?:vLLM API server version|█\s+version)\s+(\S+)`),
		reEngine:      regexp.MustCompile(`Initializing a V[01] LLM engine \(v?([^)\s]+)\) with config: (.*)$`),
		reBannerModel: regexp.MustCompile(`█\s+model\s+(\S+)`),
		reArgs:        regexp.MustCompile(`non-default args: (\{.*\})\s*$`),
		reMaxLen:      regexp.MustCompile(`Using max model len (\d+)`),
		reMNBT:        regexp.MustCompile(`Chunked prefill is enabled with max_num_batched_tokens=(\d+)`),
		reAvail:       regexp.MustCompile(`Available KV cache memory: (-?[0-9.]+) GiB`),
		reReserved:    regexp.MustCompile(`reserved (-?[0-9.]+) GiB memory for KV Cache`),
		reInUse:       regexp.MustCompile(`Current kv cache memory in use is (-?[0-9.]+) GiB`),
		reBlock:       regexp.MustCompile(`Setting attention block size to (\d+) tokens`),
		reMambaPad:    regexp.MustCompile(`Padding mamba page size by ([0-9.]+)%`),
		rePadding:     regexp.MustCompile(`Add (\d+) padding layers, may waste at most ([0-9.]+)% KV cache memory`),
		reKVTokens:    regexp.MustCompile(`GPU KV cache size: ([0-9,]+) tokens`),
		reConc:        regexp.MustCompile(`Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x`),
		reOverride:    regexp.MustCompile(`Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)`),
		reRefusal:     regexp.MustCompile(`To serve at least one request with the models?'s max seq len \((\d+)\), \(([0-9.]+) GiB KV cache is needed, which is larger than the available KV cache memory \(([0-9.]+) GiB\)\. Based on the available memory, the estimated maximum model length is (\d+)`),
		reNoMemory:    regexp.MustCompile(`No available memory for the cache blocks`),
		reFailed:      regexp.MustCompile(`EngineCore failed to start|Engine core initialization failed`),
		reMambaMode:   regexp.MustCompile(`Mamba cache mode is set to '(\w+)'`),
		reAsync:       regexp.MustCompile(`Asynchronous scheduling is (enabled|disabled)`),
		rePrefixOff:   regexp.MustCompile(`disabling prefix caching`),
		reSSMDType:    regexp.MustCompile(`Updating mamba_ssm_cache_dtype to '(\w+)'`),
		reBackend:     regexp.MustCompile(`Using (FLASH_ATTN|FLASHINFER|FLASHMLA|FLASH_ATTN_MLA|CUTLASS_MLA|TRITON_ATTN|TRITON_MLA|FlashInfer|Flash Attention|FlashMLA|Triton MLA|CUTLASS MLA)(?: attention)? backend`),
	}
}

// Parse reads a startup log. It fails only when the text holds nothing
// vLLM prints at startup; what a usable log lacks is for the caller to
// name (see Missing).
func Parse(text string) (*Log, error) {
	if len(text) > MaxLogBytes {
		return nil, &ParseError{Reason: fmt.Sprintf("the log is %d bytes, over the %d-byte limit", len(text), MaxLogBytes)}
	}
	l := &Log{Args: map[string]any{}, AvailableGiB: []Figure[float64]{}, ReservedGiB: []Figure[float64]{}, InUseGiB: []Figure[float64]{}, Padding: []Figure[PaddingWarning]{}, KVTokens: []Figure[int64]{}, Concurrency: []Figure[Concurrency]{}, Recognised: []Line{}}
	p := newPatterns()
	for i, raw := range strings.Split(text, "\n") {
		line := Line{N: i + 1, Text: strings.TrimRight(p.ansi.ReplaceAllString(raw, ""), "\r")}
		if l.readLine(p, line) {
			l.Recognised = append(l.Recognised, line)
		}
	}
	if len(l.Recognised) == 0 {
		return nil, &ParseError{Reason: "no line of this text is one vLLM prints at startup (version banner, non-default args, engine config, KV cache memory, GPU KV cache size): is it a vLLM log?"}
	}
	if l.Model == "" {
		l.Model = l.configString("model")
	}
	return l, nil
}

// readLine records what one line says; it reports whether it said
// anything kvscope reads.
func (l *Log) readLine(p *patterns, line Line) bool {
	t := line.Text
	if m := p.reEngine.FindStringSubmatch(t); m != nil {
		if l.Version == "" {
			l.Version, l.VersionLine = m[1], &line
		}
		l.Config = SplitFields(m[2])
		return true
	}
	if m := p.reBanner.FindStringSubmatch(t); m != nil {
		if l.Version == "" || l.VersionLine != nil && !p.reEngine.MatchString(l.VersionLine.Text) {
			l.Version, l.VersionLine = m[1], &line
		}
		return true
	}
	if m := p.reBannerModel.FindStringSubmatch(t); m != nil {
		l.Model = m[1]
		return true
	}
	if m := p.reArgs.FindStringSubmatch(t); m != nil {
		v, err := ParseLiteral(m[1])
		if d, ok := v.(map[string]any); err == nil && ok {
			l.Args = d
			if s, ok := d["model"].(string); ok && l.Model == "" {
				l.Model = s
			} else if s, ok := d["model_tag"].(string); ok && l.Model == "" {
				l.Model = s
			}
		}
		return true
	}
	// The first max model len is the target's (a draft's config prints its
	// own later); the last max_num_batched_tokens is the final scheduler
	// config (a default one can print before the arguments are applied);
	// the last block size is the one the engine settled on.
	switch {
	case l.intFigure(p.reMaxLen, t, line, &l.MaxModelLen, false), l.intFigure(p.reMNBT, t, line, &l.MNBT, true), l.intFigure(p.reBlock, t, line, &l.BlockSize, true):
		return true
	}
	if m := p.reAvail.FindStringSubmatch(t); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			l.AvailableGiB = append(l.AvailableGiB, Figure[float64]{f, line})
		}
		return true
	}
	if floatFigure(p.reReserved, t, line, &l.ReservedGiB) || floatFigure(p.reInUse, t, line, &l.InUseGiB) {
		return true
	}
	if m := p.reMambaPad.FindStringSubmatch(t); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			l.MambaPad = &Figure[float64]{f, line}
		}
		return true
	}
	if m := p.rePadding.FindStringSubmatch(t); m != nil {
		n, _ := strconv.Atoi(m[1])
		f, _ := strconv.ParseFloat(m[2], 64)
		l.Padding = append(l.Padding, Figure[PaddingWarning]{PaddingWarning{n, f}, line})
		return true
	}
	kv := false
	if m := p.reKVTokens.FindStringSubmatch(t); m != nil {
		if n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64); err == nil {
			l.KVTokens = append(l.KVTokens, Figure[int64]{n, line})
		}
		kv = true // from vLLM 0.28 the concurrency follows on the same line
	}
	if m := p.reConc.FindStringSubmatch(t); m != nil {
		n, err1 := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
		x, err2 := strconv.ParseFloat(m[2], 64)
		if err1 == nil && err2 == nil {
			l.Concurrency = append(l.Concurrency, Figure[Concurrency]{Concurrency{n, x}, line})
		}
		return true
	}
	if kv {
		return true
	}
	if m := p.reOverride.FindStringSubmatch(t); m != nil {
		a, _ := strconv.ParseInt(m[1], 10, 64)
		b, _ := strconv.ParseInt(m[2], 10, 64)
		l.Override = &Figure[[2]int64]{[2]int64{a, b}, line}
		return true
	}
	if m := p.reRefusal.FindStringSubmatch(t); m != nil {
		r := &Refusal{Line: line}
		r.MaxModelLen, _ = strconv.Atoi(m[1])
		r.NeededGiB, _ = strconv.ParseFloat(m[2], 64)
		r.AvailableGiB, _ = strconv.ParseFloat(m[3], 64)
		r.EstimatedMaxLen, _ = strconv.Atoi(m[4])
		l.Refusal = r
		return true
	}
	if p.reNoMemory.MatchString(t) {
		if l.Refusal == nil {
			l.Refusal = &Refusal{NoMemory: true, Line: line}
		}
		return true
	}
	if p.reFailed.MatchString(t) {
		if l.Failed == nil {
			l.Failed = &line
		}
		return true
	}
	if m := p.reMambaMode.FindStringSubmatch(t); m != nil {
		l.MambaMode = &Figure[string]{m[1], line}
		return true
	}
	if m := p.reAsync.FindStringSubmatch(t); m != nil {
		l.Async = &Figure[bool]{m[1] == "enabled", line}
		return true
	}
	if p.rePrefixOff.MatchString(t) {
		l.PrefixOff = &line
		return true
	}
	if m := p.reSSMDType.FindStringSubmatch(t); m != nil {
		l.SSMDType = &Figure[string]{m[1], line}
		return true
	}
	if m := p.reBackend.FindStringSubmatch(t); m != nil && !strings.Contains(t, "vit") && !strings.Contains(t, "MMEncoder") {
		l.Backend = &Figure[string]{backendName(m[1]), line}
		return true
	}
	return false
}

// floatFigure appends the number re finds in t to dst; it reports
// whether t is re's line (a number that does not parse is dropped).
func floatFigure(re *regexp.Regexp, t string, line Line, dst *[]Figure[float64]) bool {
	m := re.FindStringSubmatch(t)
	if m == nil {
		return false
	}
	if f, err := strconv.ParseFloat(m[1], 64); err == nil {
		*dst = append(*dst, Figure[float64]{f, line})
	}
	return true
}

func (l *Log) intFigure(re *regexp.Regexp, t string, line Line, dst **Figure[int], last bool) bool {
	m := re.FindStringSubmatch(t)
	if m == nil {
		return false
	}
	if n, err := strconv.Atoi(m[1]); err == nil && (*dst == nil || last) {
		*dst = &Figure[int]{n, line}
	}
	return true
}

// backendName maps the names vLLM logs to its --attention-backend names.
func backendName(s string) string {
	switch s {
	case "FlashInfer":
		return "FLASHINFER"
	case "Flash Attention":
		return "FLASH_ATTN"
	case "FlashMLA":
		return "FLASHMLA"
	case "Triton MLA":
		return "TRITON_MLA"
	case "CUTLASS MLA":
		return "CUTLASS_MLA"
	}
	return s
}

// configString is an engine config field with its quotes stripped, or "".
func (l *Log) configString(key string) string {
	v, ok := Lookup(l.Config, key)
	if !ok || v == "None" {
		return ""
	}
	return Unquote(v)
}

// ConfigValue returns an engine config field as written ("" and false when
// absent).
func (l *Log) ConfigValue(key string) (string, bool) { return Lookup(l.Config, key) }

// Arg returns a non-default argument.
func (l *Log) Arg(key string) (any, bool) {
	v, ok := l.Args[key]
	return v, ok
}

// ArgInt returns an integer non-default argument.
func (l *Log) ArgInt(key string) (int, bool) {
	switch v := l.Args[key].(type) {
	case int64:
		return int(v), true
	case float64:
		return int(v), v == float64(int(v))
	}
	return 0, false
}

// ArgString returns a string non-default argument.
func (l *Log) ArgString(key string) (string, bool) {
	s, ok := l.Args[key].(string)
	return s, ok
}

// ConfigInt returns an integer engine config field.
func (l *Log) ConfigInt(key string) (int, bool) {
	v, ok := Lookup(l.Config, key)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// MinAvailableGiB is the smallest available KV cache memory any worker
// logged: the engine's num_blocks is the minimum over workers.
func (l *Log) MinAvailableGiB() (Figure[float64], bool) { return minFigure(l.AvailableGiB) }

// MemorySource names the line a KV cache memory figure came from.
type MemorySource string

// The lines that state a worker's KV cache memory, in the order KVMemory
// prefers them.
const (
	MemAvailable MemorySource = "Available KV cache memory: X GiB"
	MemReserved  MemorySource = "reserved X GiB memory for KV Cache"
	MemInUse     MemorySource = "Current kv cache memory in use is X GiB"
)

// KVMemory is the KV cache memory of the smallest worker and the line it
// came from: the available memory, else the memory reserved by
// --kv-cache-memory-bytes, else the profiler suggestion's memory in use.
func (l *Log) KVMemory() (Figure[float64], MemorySource, bool) {
	for _, src := range []struct {
		figs []Figure[float64]
		name MemorySource
	}{{l.AvailableGiB, MemAvailable}, {l.ReservedGiB, MemReserved}, {l.InUseGiB, MemInUse}} {
		if f, ok := minFigure(src.figs); ok {
			return f, src.name, true
		}
	}
	return Figure[float64]{}, "", false
}

func minFigure(fs []Figure[float64]) (Figure[float64], bool) {
	if len(fs) == 0 {
		return Figure[float64]{}, false
	}
	best := fs[0]
	for _, f := range fs[1:] {
		if f.Value < best.Value {
			best = f
		}
	}
	return best, true
}
