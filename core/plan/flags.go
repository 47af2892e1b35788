package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/kvscope/kvscope/core/vllm"
)

// This file is the engine-flag table: every engine flag kvscope takes,
// once. The command lines (kvscope and kvscope-agent, plain and with a p-
// or d- prefix), their help, the API's engine JSON, the app's URL keys and
// form, kvscope check's reading of a startup log and kvscope tune's vllm
// serve lines all walk it, and Engine's range checks read it.

// FlagKind is how an engine flag's value is written.
type FlagKind uint8

// The kinds of engine flags.
const (
	// IntFlag is a whole number: --tensor-parallel-size 4.
	IntFlag FlagKind = iota + 1
	// BytesFlag is a byte count, plain or with a binary or decimal suffix,
	// fractions allowed: 42949672960, 40GiB, 1.5GiB, 512MiB.
	BytesFlag
	// FloatFlag is a number: --balanced-lambda 2.5.
	FloatFlag
	// ChoiceFlag is one of the flag's Choices: --selector balanced.
	ChoiceFlag
	// BoolFlag is a switch: --disable-hybrid-kv-cache-manager.
	BoolFlag
	// ToggleFlag is on (--async-scheduling), off (--no-async-scheduling)
	// or, unset, the vLLM version's default: vLLM's boolean flags with a
	// "no-" twin.
	ToggleFlag
)

// FlagOrigin says who defines an engine flag.
type FlagOrigin uint8

// The origins of engine flags.
const (
	// VLLMFlag is an engine argument of vLLM itself.
	VLLMFlag FlagOrigin = iota + 1
	// SpeculativeFlag is a field of vLLM's --speculative-config, which
	// kvscope takes as a flag of its own.
	SpeculativeFlag
	// BranchFlag is a planner flag of vLLM PR #58207 (the pr58207 profile),
	// in no release.
	BranchFlag
	// ModelFlag is a knob of kvscope's model of the planner, where vLLM's
	// behaviour is inferred; vLLM has no such flag.
	ModelFlag
)

// Flag is one engine flag: its name, how its value is written and
// checked, its help, its default in each vLLM version, and where it lives
// in an Engine.
type Flag struct {
	// Name is the flag as vLLM spells it, without the dashes.
	Name    string
	Kind    FlagKind
	Origin  FlagOrigin
	Help    string   // what the flag does, a phrase
	Example string   // a value as a command line writes it
	Choices []string // the values of a ChoiceFlag (checked where the engine is planned)
	// Min and Max bound a number once the engine's defaults are filled in;
	// Open excludes the bounds themselves; RangeReason is the refusal's
	// text when it is not "must be between Min and Max".
	Min, Max    float64
	Open        bool
	RangeReason string
	// ZeroOK says 0 is a value of an IntFlag on a command line (0
	// speculative tokens), not a mistake for the default.
	ZeroOK bool
	// Unset lists the values that state vLLM's own default ("1" for a
	// parallel size, "auto" for a dtype): a log that states one leaves the
	// flag unset, and a command line written for vLLM leaves it out.
	Unset []string
	// planned says the planner checks a ChoiceFlag's value against its
	// choices (the others are checked where the value is used: the KV
	// cache dtype by the per-rank specs, for one).
	planned bool

	def func(p *vllm.Profile) string // the default in a version, as a user reads it
	// at is where the flag's field lies in an Engine (see fieldAt); a
	// toggle stored as two switches (--x and --no-x) has its second at no.
	at, no uintptr
	pair   bool
	// log says where a vLLM startup log states the flag.
	log LogSource
}

// LogSource says where a vLLM startup log states an engine flag: the
// engine config line ("Initializing a V1 LLM engine ... with config:"),
// the non-default arguments, or both (the config line first).
type LogSource struct {
	Config, Args bool
}

// JSON is the flag's key in the API's engine JSON and in plan --json: the
// name in snake case, as vLLM names its engine arguments.
func (f *Flag) JSON() string { return strings.ReplaceAll(f.Name, "-", "_") }

// Default is the flag's default in a vLLM version, as a user reads it.
func (f *Flag) Default(p *vllm.Profile) string { return f.def(p) }

// Log is where a vLLM startup log states the flag; the zero LogSource
// when it states it nowhere kvscope reads generically (the figures vLLM
// resolves and prints, such as max_model_len, are read where they are).
func (f *Flag) Log() LogSource { return f.log }

// Get is the flag's value in e as it is written on a command line or in
// a URL, and whether e sets it ("" and false at the default).
func (f *Flag) Get(e *Engine) (string, bool) {
	switch f.Kind {
	case ToggleFlag:
		v := f.toggle(e)
		return v, v != ""
	case IntFlag:
		if p := f.int(e); *p != 0 {
			return strconv.Itoa(*p), true
		}
	case BytesFlag:
		if p := f.int64(e); *p != 0 {
			return FormatBytes(*p), true
		}
	case FloatFlag:
		if p := f.float(e); *p != 0 {
			return strconv.FormatFloat(*p, 'g', -1, 64), true
		}
	case ChoiceFlag:
		p := f.string(e)
		return *p, *p != ""
	case BoolFlag:
		if *f.bool(e) {
			return "true", true
		}
	}
	return "", false
}

// Set writes the flag's value into e from its text on a command line or
// in a URL; "" resets it to the default. An error says what is wrong
// with the text, without the flag's name (the caller knows how the user
// spelled it).
func (f *Flag) Set(e *Engine, text string) error {
	switch f.Kind {
	case ToggleFlag:
		switch strings.ToLower(text) {
		case "":
			f.setToggle(e, "")
		case "on", "true", "1", "yes":
			f.setToggle(e, "on")
		case "off", "false", "0", "no":
			f.setToggle(e, "off")
		default:
			return fmt.Errorf("want on or off")
		}
	case IntFlag:
		if text == "" {
			*f.int(e) = 0
			return nil
		}
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 || n == 0 && !f.ZeroOK {
			if f.ZeroOK {
				return fmt.Errorf("want a non-negative integer")
			}
			return fmt.Errorf("want a positive integer")
		}
		*f.int(e) = n
	case BytesFlag:
		if text == "" {
			*f.int64(e) = 0
			return nil
		}
		n, err := ParseBytes(text)
		if err != nil {
			return err
		}
		*f.int64(e) = n
	case FloatFlag:
		if text == "" {
			*f.float(e) = 0
			return nil
		}
		x, err := strconv.ParseFloat(text, 64)
		if err != nil || x <= 0 {
			return fmt.Errorf("want a positive number")
		}
		*f.float(e) = x
	case ChoiceFlag:
		*f.string(e) = text
	case BoolFlag:
		if text == "" {
			*f.bool(e) = false
			return nil
		}
		b, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		*f.bool(e) = b
	}
	return nil
}

// number is the value of a numeric flag, for the range check.
func (f *Flag) number(e *Engine) (float64, bool) {
	switch f.Kind {
	case IntFlag:
		return float64(*f.int(e)), true
	case BytesFlag:
		return float64(*f.int64(e)), true
	case FloatFlag:
		return *f.float(e), true
	}
	return 0, false
}

// checkRange refuses a resolved engine's value outside the flag's range.
func (f *Flag) checkRange(e *Engine) error {
	if f.Kind == ToggleFlag || f.Min == 0 && f.Max == 0 {
		return nil
	}
	v, ok := f.number(e)
	if !ok {
		return nil
	}
	in := v >= f.Min && v <= f.Max // NaN is in no range
	if f.Open {
		in = v > f.Min && v < f.Max
	}
	if in {
		return nil
	}
	reason := f.RangeReason
	if reason == "" {
		reason = fmt.Sprintf("must be between %s and %s", fmtNum(f.Min), fmtNum(f.Max))
	}
	switch f.Kind {
	case IntFlag:
		return flagErr("--"+f.Name, *f.int(e), reason)
	case BytesFlag:
		return flagErr("--"+f.Name, *f.int64(e), reason)
	}
	return flagErr("--"+f.Name, v, reason)
}

// checkChoice refuses a ChoiceFlag's value that is none of its choices;
// only the flags the planner itself checks have choices checked here.
func (f *Flag) checkChoice(e *Engine) error {
	v := *f.string(e)
	for _, c := range f.Choices {
		if v == c {
			return nil
		}
	}
	return flagErr("--"+f.Name, v, "want "+orList(f.Choices))
}

func fmtNum(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// orList writes choices as "a, b or c".
func orList(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// Flags is the engine-flag table, in the order kvscope writes flags: a
// copy, so a caller may keep it.
func Flags() []Flag { return append([]Flag(nil), flagTable[:]...) }

// LookupFlag finds an engine flag by its name ("block-size") or its JSON
// key ("block_size").
func LookupFlag(name string) (Flag, bool) {
	name = strings.ReplaceAll(name, "_", "-")
	for _, f := range flagTable {
		if f.Name == name {
			return f, true
		}
	}
	return Flag{}, false
}

// ParseBytes reads a byte count: "42949672960", "40GiB", "512MiB", "1.5GiB"
// or a decimal "40GB".
func ParseBytes(s string) (int64, error) {
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

// FormatBytes writes a byte count as ParseBytes reads it back: whole GiB
// or MiB with their suffix, anything else in bytes.
func FormatBytes(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	}
	return strconv.FormatInt(n, 10)
}

// fixed is a default that no version changes.
func fixed(s string) func(*vllm.Profile) string { return func(*vllm.Profile) string { return s } }

// flagTable is every engine flag, in the order kvscope writes them.
var flagTable = [...]Flag{
	{Name: "tensor-parallel-size", Example: "2", Kind: IntFlag, Origin: VLLMFlag, Help: "tensor-parallel size: ranks that split each layer's heads",
		Min: 1, Max: 1024, def: fixed("1"),
		at: fieldAt(func(e *Engine) any { return &e.TensorParallelSize }), Unset: []string{"1"}, log: LogSource{Config: true, Args: true}},
	{Name: "pipeline-parallel-size", Example: "2", Kind: IntFlag, Origin: VLLMFlag, Help: "pipeline-parallel size: stages that split the layers",
		Min: 1, Max: 256, def: fixed("1"),
		at: fieldAt(func(e *Engine) any { return &e.PipelineParallelSize }), Unset: []string{"1"}, log: LogSource{Config: true, Args: true}},
	{Name: "max-model-len", Example: "4096", Kind: IntFlag, Origin: VLLMFlag, Help: "the most tokens one request holds",
		Min: 1, Max: 1 << 26, def: fixed("the model config's maximum"),
		at: fieldAt(func(e *Engine) any { return &e.MaxModelLen })},
	{Name: "max-num-batched-tokens", Example: "2048", Kind: IntFlag, Origin: VLLMFlag, Help: "tokens one scheduler step takes (sliding windows keep them in flight)",
		Min: 1, Max: 1 << 26, def: fixed(strconv.Itoa(DefaultMaxNumBatchedTokens)),
		at: fieldAt(func(e *Engine) any { return &e.MaxNumBatchedTokens })},
	{Name: "block-size", Example: "32", Kind: IntFlag, Origin: VLLMFlag, Help: "tokens per KV cache block",
		Min: 0, Max: 1 << 20, RangeReason: "must be between 1 and 1048576", def: fixed("16, raised to fit a hybrid model's state pages"),
		at: fieldAt(func(e *Engine) any { return &e.BlockSize }), log: LogSource{Args: true}},
	{Name: "num-gpu-blocks-override", Example: "100000", Kind: IntFlag, Origin: VLLMFlag, Help: "force num_blocks, whatever the memory",
		Min: 0, Max: maxBlocksOverride, def: fixed("none: the memory decides"),
		at: fieldAt(func(e *Engine) any { return &e.NumGPUBlocksOverride }), log: LogSource{Args: true}},
	{Name: "num-speculative-tokens", Example: "2", Kind: IntFlag, Origin: SpeculativeFlag, Help: "speculative tokens per step",
		Min: 0, Max: 64, ZeroOK: true, def: fixed("0"),
		at: fieldAt(func(e *Engine) any { return &e.NumSpeculativeTokens })},
	{Name: "kv-cache-dtype", Example: "fp8", Kind: ChoiceFlag, Origin: VLLMFlag, Help: "the KV cache's element type",
		Choices: []string{"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"}, def: fixed("auto: the model's dtype"),
		at: fieldAt(func(e *Engine) any { return &e.KVCacheDType }), Unset: []string{"auto"}, log: LogSource{Config: true, Args: true}},
	{Name: "mamba-ssm-cache-dtype", Example: "float32", Kind: ChoiceFlag, Origin: VLLMFlag, Help: "the Mamba/GDN SSM state's element type",
		Choices: []string{"auto", "float32", "bfloat16", "float16"}, def: fixed("auto: the version's rule for the model"),
		at: fieldAt(func(e *Engine) any { return &e.MambaSSMCacheDType }), Unset: []string{"auto"}, log: LogSource{Config: true, Args: true}},
	{Name: "mamba-cache-mode", Example: "align", Kind: ChoiceFlag, Origin: VLLMFlag, Help: "how Mamba/GDN state is cached for prefix caching (vLLM 0.15 on)",
		Choices: []string{"none", "align", "all"}, def: mambaModeDefault,
		at: fieldAt(func(e *Engine) any { return &e.MambaCacheMode }), log: LogSource{Args: true}},
	{Name: "selector", Example: "balanced", Kind: ChoiceFlag, Origin: BranchFlag, Help: "the group-size selector of hybrid models",
		Choices: []string{string(Classic), string(Min), string(Balanced), string(PaddingBytes)}, def: selectorDefault, planned: true,
		at: fieldAt(func(e *Engine) any { return &e.Selector })},
	{Name: "attention-backend", Example: "FLASHINFER", Kind: ChoiceFlag, Origin: VLLMFlag, Help: "the attention backend, whose kernel block aligns hybrid block sizes",
		Choices: []string{"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLASH_ATTN_MLA", "FLASHMLA", "CUTLASS_MLA", "TRITON_MLA"}, def: fixed("FLASH_ATTN, or FLASH_ATTN_MLA for MLA models"),
		at: fieldAt(func(e *Engine) any { return &e.AttentionBackend })},
	{Name: "enable-prefix-caching", Example: "off", Kind: ToggleFlag, Origin: VLLMFlag, Help: "prefix caching",
		def: prefixDefault,
		at:  fieldAt(func(e *Engine) any { return &e.PrefixCaching }), log: LogSource{Config: true, Args: true}},
	{Name: "async-scheduling", Example: "off", Kind: ToggleFlag, Origin: VLLMFlag, Help: "async scheduling: two batches in flight at PP 1",
		def: asyncDefault,
		at:  fieldAt(func(e *Engine) any { return &e.AsyncScheduling }), no: fieldAt(func(e *Engine) any { return &e.NoAsyncScheduling }), pair: true, log: LogSource{Args: true}},
	{Name: "disable-hybrid-kv-cache-manager", Example: "true", Kind: BoolFlag, Origin: VLLMFlag, Help: "one KV cache group: sliding and chunked layers plan as full attention",
		def: fixed("off"),
		at:  fieldAt(func(e *Engine) any { return &e.DisableHybrid }), log: LogSource{Args: true}},
	{Name: "kv-cache-memory-bytes", Example: "8GiB", Kind: BytesFlag, Origin: VLLMFlag, Help: "KV cache memory per rank (bytes, or with a GiB/MiB suffix)",
		Min: 1, Max: 1 << 50, RangeReason: "must be between 1 and 2^50", def: fixed(FormatBytes(DefaultKVCacheMemoryBytes) + " (kvscope's; vLLM sizes it from --gpu-memory-utilization)"),
		at: fieldAt(func(e *Engine) any { return &e.KVCacheMemoryBytes })},
	{Name: "min-kv-cache-group-layers", Example: "2", Kind: IntFlag, Origin: BranchFlag, Help: "the padding-bytes selector's smallest group size",
		Min: 1, Max: 1 << 16, RangeReason: "must be positive", def: fixed("3"),
		at: fieldAt(func(e *Engine) any { return &e.MinGroupLayers })},
	{Name: "kv-cache-group-size", Example: "4", Kind: IntFlag, Origin: BranchFlag, Help: "a fixed group size g, overriding the selector",
		Min: 0, Max: 1 << 16, RangeReason: "must be positive", def: fixed("none: the selector chooses"),
		at: fieldAt(func(e *Engine) any { return &e.GroupSize })},
	{Name: "kv-cache-bucket-merge", Example: "strict", Kind: ChoiceFlag, Origin: ModelFlag, Help: "how layers of other head layouts share a bucket (inferred)",
		Choices: []string{string(MergeAuto), string(Strict), string(Loose)}, def: fixed("auto: loose with padding-bytes in pr58207, strict otherwise"), planned: true,
		at: fieldAt(func(e *Engine) any { return &e.BucketMerge })},
	{Name: "balanced-lambda", Example: "2.5", Kind: FloatFlag, Origin: ModelFlag, Help: "the balanced selector's cost of one group, in padding layers",
		Min: 0, Max: 1e9, Open: true, RangeReason: "must be positive", def: fixed("1"),
		at: fieldAt(func(e *Engine) any { return &e.BalancedLambda })},
}

func selectorDefault(p *vllm.Profile) string {
	switch p.Selector {
	case vllm.SelectorPaddingBytes:
		return string(PaddingBytes)
	case vllm.SelectorMin:
		return string(Min) + " (this version's rule)"
	}
	return string(Classic) + " (this version's rule)"
}

func mambaModeDefault(p *vllm.Profile) string {
	if !p.MambaModeFlag {
		return "no such flag before vLLM 0.15"
	}
	return "none, or what prefix caching implies"
}

func prefixDefault(p *vllm.Profile) string {
	switch p.HybridPrefixCaching {
	case "on":
		return "on"
	case "forced-off":
		return "on; off for hybrid models (vLLM forces it off)"
	}
	return "on; off for hybrid models"
}

func asyncDefault(p *vllm.Profile) string {
	switch {
	case p.AsyncDefault && p.AsyncWithPP:
		return "on"
	case p.AsyncDefault:
		return "on at PP 1, off with PP"
	}
	return "off"
}

// checkRanges refuses a resolved engine's value out of its flag's range,
// in the table's order, then a choice the planner does not know. It runs
// for every plan a search makes, so it reads the table's ranges as
// rangeChecks lays them out, not flag by flag.
func (e *Engine) checkRanges() error {
	base := unsafe.Pointer(e)
	for i := range rangeChecks {
		c := &rangeChecks[i]
		switch c.kind {
		case IntFlag:
			if v := int64(*(*int)(unsafe.Add(base, c.at))); v >= c.min && v <= c.max {
				continue
			}
		case BytesFlag:
			if v := *(*int64)(unsafe.Add(base, c.at)); v >= c.min && v <= c.max {
				continue
			}
		default:
			if flagTable[c.flag].checkRange(e) == nil {
				continue
			}
		}
		return flagTable[c.flag].checkRange(e)
	}
	for _, i := range choiceChecks {
		if err := flagTable[i].checkChoice(e); err != nil {
			return err
		}
	}
	return nil
}

// rangeCheck is one numeric flag's range where checkRanges reads it: a
// whole number's bounds as integers (a float's range is its flag's).
type rangeCheck struct {
	at       uintptr
	kind     FlagKind
	min, max int64
	flag     int // its row in flagTable
}

// rangeChecks and choiceChecks are the table's ranges and the choices the
// planner checks, taken from flagTable once: data, never written.
var rangeChecks, choiceChecks = func() ([]rangeCheck, []int) {
	var ranges []rangeCheck
	var choices []int
	for i := range flagTable {
		f := &flagTable[i]
		switch {
		case f.planned:
			choices = append(choices, i)
		case f.Min != 0 || f.Max != 0:
			ranges = append(ranges, rangeCheck{at: f.at, kind: f.Kind, min: int64(f.Min), max: int64(f.Max), flag: i})
		}
	}
	return ranges, choices
}()

// fieldAt is the offset in an Engine of the field addr takes the address
// of: the table names each flag's field once, in its row, and reading or
// writing a flag is then a typed access at that offset (no map and no
// switch from flags to fields, and nothing that moves an Engine to the
// heap: a plan's hot path resolves its engine through the table).
func fieldAt(addr func(e *Engine) any) uintptr {
	var e Engine
	var p unsafe.Pointer
	switch q := addr(&e).(type) {
	case *int:
		p = unsafe.Pointer(q)
	case *int64:
		p = unsafe.Pointer(q)
	case *float64:
		p = unsafe.Pointer(q)
	case *string:
		p = unsafe.Pointer(q)
	case *Selector:
		p = unsafe.Pointer(q)
	case *BucketMerge:
		p = unsafe.Pointer(q)
	case *bool:
		p = unsafe.Pointer(q)
	default:
		panic(fmt.Sprintf("plan: flag table: a field of type %T", q)) // the table's own mistake, caught at start
	}
	return uintptr(p) - uintptr(unsafe.Pointer(&e))
}

// The typed fields of a flag in e; TestFlagFieldsHaveTheirKindsType holds
// each flag's kind to its field's type.
func (f *Flag) ptr(e *Engine) unsafe.Pointer { return unsafe.Add(unsafe.Pointer(e), f.at) }
func (f *Flag) int(e *Engine) *int           { return (*int)(f.ptr(e)) }
func (f *Flag) int64(e *Engine) *int64       { return (*int64)(f.ptr(e)) }
func (f *Flag) float(e *Engine) *float64     { return (*float64)(f.ptr(e)) }
func (f *Flag) string(e *Engine) *string     { return (*string)(f.ptr(e)) }
func (f *Flag) bool(e *Engine) *bool         { return (*bool)(f.ptr(e)) }

// toggle is a toggle's state: "on", "off" or "" (the version's default).
// A toggle stored as two switches (async scheduling: --async-scheduling
// and --no-async-scheduling, as a resolved engine reports both) reads
// both set as unset, and resolving refuses it.
func (f *Flag) toggle(e *Engine) string {
	if !f.pair {
		return *f.string(e)
	}
	on, off := *f.bool(e), *(*bool)(unsafe.Add(unsafe.Pointer(e), f.no))
	switch {
	case on && !off:
		return "on"
	case off && !on:
		return "off"
	}
	return ""
}

func (f *Flag) setToggle(e *Engine, v string) {
	if !f.pair {
		*f.string(e) = v
		return
	}
	*f.bool(e), *(*bool)(unsafe.Add(unsafe.Pointer(e), f.no)) = v == "on", v == "off"
}

// FlagArgs are the command-line arguments that set e's flags, in the
// table's order: for each flag e sets to other than vLLM's default (see
// Flag.Unset) that keep accepts (nil keeps every flag), --name and its
// value; a switch alone; a toggle as --name or
// --no-name. Byte counts are written as kvscope reads them (40GiB), or
// in plain bytes when plainBytes is set, as vLLM reads them.
func FlagArgs(e Engine, keep func(f *Flag) bool, plainBytes bool) []string {
	var args []string
	for i := range flagTable {
		f := &flagTable[i]
		v, set := f.Get(&e)
		if !set || keep != nil && !keep(f) || slices.Contains(f.Unset, v) {
			continue
		}
		switch f.Kind {
		case BoolFlag:
			args = append(args, "--"+f.Name)
		case ToggleFlag:
			if v == "off" {
				args = append(args, "--no-"+f.Name)
			} else {
				args = append(args, "--"+f.Name)
			}
		case BytesFlag:
			if plainBytes {
				v = strconv.FormatInt(*f.int64(&e), 10)
			}
			args = append(args, "--"+f.Name, v)
		default:
			args = append(args, "--"+f.Name, v)
		}
	}
	return args
}

// String names the kind as the API's flag list does.
func (k FlagKind) String() string {
	switch k {
	case IntFlag:
		return "int"
	case BytesFlag:
		return "bytes"
	case FloatFlag:
		return "float"
	case ChoiceFlag:
		return "choice"
	case BoolFlag:
		return "bool"
	case ToggleFlag:
		return "toggle"
	}
	return "unknown"
}

// String names the origin as the API's flag list does.
func (o FlagOrigin) String() string {
	switch o {
	case VLLMFlag:
		return "vllm"
	case SpeculativeFlag:
		return "vllm-speculative-config"
	case BranchFlag:
		return "vllm-pr58207"
	case ModelFlag:
		return "kvscope-inferred"
	}
	return "unknown"
}

// FlagDoc is an engine flag as a list of flags shows it, with its
// default in one vLLM version.
type FlagDoc struct {
	Name    string   `json:"name"` // --name on a command line and in a URL
	JSON    string   `json:"json"` // the key in an engine's JSON
	Kind    string   `json:"kind"`
	Origin  string   `json:"origin"`
	Help    string   `json:"help"`
	Choices []string `json:"choices,omitempty"`
	Default string   `json:"default"`
}

// Docs describes every engine flag, with its default in prof.
func Docs(prof *vllm.Profile) []FlagDoc {
	out := make([]FlagDoc, 0, len(flagTable))
	for i := range flagTable {
		f := &flagTable[i]
		out = append(out, FlagDoc{Name: f.Name, JSON: f.JSON(), Kind: f.Kind.String(), Origin: f.Origin.String(),
			Help: f.Help, Choices: f.Choices, Default: f.Default(prof)})
	}
	return out
}
