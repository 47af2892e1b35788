package plan

import (
	"fmt"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/vllm"
)

// Selector names a group-size selector.
type Selector string

// The group-size selectors.
const (
	// Classic is the released rule of the engine's vLLM version: g = the
	// smallest bucket, or the largest when the largest is under 1.25x
	// (0.12-0.17) or 1.5x (0.18 on, and main) the smallest; before 0.12,
	// always the smallest. In the branch profile it is main's rule.
	Classic Selector = "classic"
	// Min is g = the smallest bucket, the rule of vLLM 0.10 and 0.11.
	Min Selector = "min"
	// Balanced minimises padding layers + lambda * groups (vLLM PR #49472).
	Balanced Selector = "balanced"
	// PaddingBytes minimises the worst-case padding bytes per request, then
	// the group count (vLLM PR #58207); the branch profile's default.
	PaddingBytes Selector = "padding-bytes"
)

// BucketMerge says how layers with different specs may share a bucket.
type BucketMerge string

// The bucket merge rules.
const (
	// MergeAuto is Loose with padding-bytes in the branch profile, Strict
	// otherwise.
	MergeAuto BucketMerge = "auto"
	// Strict buckets layers whose specs are equal (vLLM main's merge).
	Strict BucketMerge = "strict"
	// Loose buckets attention layers that agree on kind, block size, page
	// bytes and window, whatever their head layout. Inferred.
	Loose BucketMerge = "loose"
)

// DefaultKVCacheMemoryBytes is the KV cache memory per rank used when the
// engine does not say: 40 GiB, the figure of the reference worked examples.
const DefaultKVCacheMemoryBytes = 40 << 30

// DefaultMaxNumBatchedTokens is vLLM's default for the OpenAI API server on
// GPUs with at least 70 GiB (H100, H200).
const DefaultMaxNumBatchedTokens = 8192

// Engine is one vLLM engine's settings, named after vLLM's flags. The zero
// value of every field means the default of the engine's vLLM version, so
// Engine{} is a TP1 engine of the newest release with default flags.
type Engine struct {
	// VLLMVersion picks the profile whose rules and defaults apply:
	// a release ("0.11.0"), "main" or "pr58207"; "" is the newest release.
	VLLMVersion          string      `json:"vllm_version"`
	TensorParallelSize   int         `json:"tensor_parallel_size"`   // --tensor-parallel-size (1)
	PipelineParallelSize int         `json:"pipeline_parallel_size"` // --pipeline-parallel-size (1)
	BlockSize            int         `json:"block_size"`             // --block-size (16, or the backend's)
	MaxModelLen          int         `json:"max_model_len"`          // --max-model-len (derived from the config)
	MaxNumBatchedTokens  int         `json:"max_num_batched_tokens"` // --max-num-batched-tokens (8192)
	KVCacheDType         string      `json:"kv_cache_dtype"`         // --kv-cache-dtype (auto)
	KVCacheMemoryBytes   int64       `json:"kv_cache_memory_bytes"`  // --kv-cache-memory-bytes (40 GiB) per rank
	NumSpeculativeTokens int         `json:"num_speculative_tokens"` // --num-speculative-tokens (0)
	Selector             Selector    `json:"selector"`               // --selector (the version's rule)
	MinGroupLayers       int         `json:"min_kv_cache_group_layers"`
	GroupSize            int         `json:"kv_cache_group_size"`   // --kv-cache-group-size: fixed g
	BalancedLambda       float64     `json:"balanced_lambda"`       // padding_per_group of the balanced selector (1.0)
	BucketMerge          BucketMerge `json:"kv_cache_bucket_merge"` // --kv-cache-bucket-merge (auto)
	DisableHybrid        bool        `json:"disable_hybrid_kv_cache_manager"`
	MambaCacheMode       string      `json:"mamba_cache_mode"`      // --mamba-cache-mode (none, or what prefix caching implies)
	MambaSSMCacheDType   string      `json:"mamba_ssm_cache_dtype"` // --mamba-ssm-cache-dtype (auto)
	// PrefixCaching is --enable-prefix-caching ("on") or
	// --no-enable-prefix-caching ("off"); "" is the version's default.
	PrefixCaching        string `json:"enable_prefix_caching"`
	AsyncScheduling      bool   `json:"async_scheduling"`    // --async-scheduling
	NoAsyncScheduling    bool   `json:"no_async_scheduling"` // --no-async-scheduling
	AttentionBackend     string `json:"attention_backend"`   // --attention-backend
	NumGPUBlocksOverride int    `json:"num_gpu_blocks_override"`
}

// FlagError reports an engine setting that is out of range.
type FlagError struct {
	Flag   string
	Value  string
	Reason string
}

func (e *FlagError) Error() string {
	return fmt.Sprintf("plan: %s %s: %s", e.Flag, e.Value, e.Reason)
}

func flagErr(flag string, v any, reason string) error {
	return &FlagError{Flag: flag, Value: fmt.Sprint(v), Reason: reason}
}

// CheckFlags refuses what a user gave that this version's vLLM refuses at
// its command line, before the planner runs: today --block-size outside
// its choices. Only user input goes through it; kvscope's own engines (a
// TP-invariant layout's block size) are planned as vLLM would plan the
// sizes it computes internally.
func (e Engine) CheckFlags() error {
	prof, err := e.Profile()
	if err != nil {
		return err
	}
	if why := prof.BlockSizeRefusal(e.BlockSize); why != "" {
		return flagErr("--block-size", e.BlockSize, why)
	}
	return nil
}

// Profile returns the engine's vLLM version profile.
func (e Engine) Profile() (vllm.Profile, error) {
	p, err := vllm.Lookup(e.VLLMVersion)
	if err != nil {
		return vllm.Profile{}, flagErr("--vllm-version", e.VLLMVersion, err.(*vllm.VersionError).Reason)
	}
	return p, nil
}

// resolved fills in the defaults of the engine's vLLM version and checks
// ranges. hybrid says whether the model has attention and state layers
// (prefix caching and the mamba cache mode depend on it), mambaAll whether
// it supports Mamba prefix caching (mode all).
func (e Engine) resolved(modelMaxLen int, hybrid, mambaAll bool) (Engine, vllm.Profile, []string, error) {
	prof, err := e.Profile()
	if err != nil {
		return e, prof, nil, err
	}
	e, notes, err := e.resolve(&prof, modelMaxLen, hybrid, mambaAll)
	if err != nil {
		return e, prof, nil, err
	}
	return e, prof, notes.render(&prof), nil
}

// resolve is resolved with the profile already looked up. It allocates
// nothing unless a setting is refused: the notes it has to tell come back
// as flags, rendered by the caller that wants them.
func (e Engine) resolve(prof *vllm.Profile, modelMaxLen int, hybrid, mambaAll bool) (Engine, modeNotes, error) {
	e.VLLMVersion = prof.Name
	if e.TensorParallelSize == 0 {
		e.TensorParallelSize = 1
	}
	if e.PipelineParallelSize == 0 {
		e.PipelineParallelSize = 1
	}
	if e.MaxModelLen == 0 {
		if modelMaxLen > 1<<26 {
			return e, 0, flagErr("--max-model-len", "unset", fmt.Sprintf("the config's derived maximum of %d tokens exceeds 67108864; pass --max-model-len", modelMaxLen))
		}
		e.MaxModelLen = modelMaxLen
	}
	if e.MaxNumBatchedTokens == 0 {
		e.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if e.KVCacheDType == "" {
		e.KVCacheDType = "auto"
	}
	if e.KVCacheMemoryBytes == 0 {
		e.KVCacheMemoryBytes = DefaultKVCacheMemoryBytes
	}
	if e.Selector == "" {
		e.Selector = Classic
		switch prof.Selector {
		case vllm.SelectorPaddingBytes:
			e.Selector = PaddingBytes
		case vllm.SelectorMin:
			e.Selector = Min
		}
	}
	if e.MinGroupLayers == 0 {
		e.MinGroupLayers = 3
	}
	if e.BalancedLambda == 0 {
		e.BalancedLambda = 1
	}
	if e.BucketMerge == "" {
		e.BucketMerge = MergeAuto
	}
	if e.AsyncScheduling && e.NoAsyncScheduling {
		return e, 0, flagErr("--async-scheduling", true, "contradicts --no-async-scheduling")
	}
	mode, pc, notes, err := mambaMode(e, prof, hybrid, mambaAll)
	if err != nil {
		return e, 0, err
	}
	e.MambaCacheMode, e.PrefixCaching = mode, pc
	async := e.AsyncScheduling || !e.NoAsyncScheduling && prof.AsyncScheduling(e.PipelineParallelSize) && !(prof.AsyncOffWithMambaPC && hybrid && mode != "none")
	e.AsyncScheduling, e.NoAsyncScheduling = async, !async
	if e.MambaSSMCacheDType == "" {
		e.MambaSSMCacheDType = "auto"
	}
	// The range checks of the flag table, in its order.
	if err := e.checkRanges(); err != nil {
		return e, 0, err
	}
	return e, notes, nil
}

// modeNotes are the notes resolving the mamba cache mode has to tell, as
// flags, so that resolving allocates nothing.
type modeNotes uint8

const (
	// notePrefixForcedOff: the version disables prefix caching for hybrids.
	notePrefixForcedOff modeNotes = 1 << iota
	// notePrefixMambaOnly: the version's per-block prefix caching supports
	// only Mamba1/Mamba2 hybrids.
	notePrefixMambaOnly
)

// render writes the notes as the user reads them; nil when there are none.
func (n modeNotes) render(prof *vllm.Profile) []string {
	var notes []string
	if n&notePrefixForcedOff != 0 {
		notes = append(notes, fmt.Sprintf("vLLM %s disables prefix caching for hybrid models (\"Hybrid or mamba-based model detected: disabling prefix caching since it is not yet supported.\")", prof.Name))
	}
	if n&notePrefixMambaOnly != 0 {
		notes = append(notes, fmt.Sprintf("vLLM %s supports prefix caching only for Mamba1/Mamba2 hybrids: prefix caching stays off for this model (inferred)", prof.Name))
	}
	return notes
}

// maxBlocksOverride bounds --num-gpu-blocks-override: far above any GPU's
// block count, and low enough that blocks times bytes per block and
// blocks times tokens per block cannot overflow.
const maxBlocksOverride = 1 << 32

// mambaMode resolves the state cache mode and prefix caching: an explicit
// --mamba-cache-mode wins (where the version has the flag); otherwise
// prefix caching, on or off by the version's default for hybrids or by
// the flag, implies none or the version's mode for it.
func mambaMode(e Engine, prof *vllm.Profile, hybrid, mambaAll bool) (mode, pc string, notes modeNotes, err error) {
	switch e.PrefixCaching {
	case "", "on", "off":
	default:
		return "", "", 0, flagErr("--enable-prefix-caching", e.PrefixCaching, "want on or off")
	}
	switch e.MambaCacheMode {
	case "", "none", "align", "all":
	default:
		return "", "", 0, flagErr("--mamba-cache-mode", e.MambaCacheMode, "want none, align or all")
	}
	if e.MambaCacheMode != "" && !prof.MambaModeFlag && hybrid {
		return "", "", 0, flagErr("--mamba-cache-mode", e.MambaCacheMode, fmt.Sprintf("vLLM %s has no --mamba-cache-mode (it came with 0.15, #30877); use --enable-prefix-caching", prof.Name))
	}
	pc = e.PrefixCaching
	if !hybrid {
		if pc == "" {
			pc = "on"
		}
		return orNone(e.MambaCacheMode), pc, 0, nil
	}
	switch {
	case prof.HybridPrefixCaching == "forced-off" && pc == "on":
		notes |= notePrefixForcedOff
		pc = "off"
	case pc == "" && prof.HybridPrefixCaching == "on":
		pc = "on"
	case pc == "":
		pc = "off"
	}
	if e.MambaCacheMode != "" {
		if e.MambaCacheMode != "none" && pc == "off" && e.PrefixCaching == "" {
			pc = "on"
		}
		return e.MambaCacheMode, pc, notes, nil
	}
	if pc == "off" {
		return "none", pc, notes, nil
	}
	switch prof.PrefixMambaMode {
	case "align":
		return "align", pc, notes, nil
	case "per-block":
		if !mambaAll {
			return "none", "off", notes | notePrefixMambaOnly, nil
		}
		return "all", pc, notes, nil
	}
	if mambaAll && !(prof.SpecAlignsAll && e.NumSpeculativeTokens > 0) {
		return "all", pc, notes, nil
	}
	return "align", pc, notes, nil
}

func orNone(mode string) string {
	if mode == "" {
		return "none"
	}
	return mode
}

// merge is the bucket merge rule in effect: auto is loose with the
// padding-bytes selector in the profiles that merge loosely (the branch),
// strict otherwise (the classic selector keeps vLLM main's strict merge).
func (e Engine) merge(prof vllm.Profile) BucketMerge {
	if e.BucketMerge == MergeAuto || e.BucketMerge == "" {
		if prof.LooseMerge && e.Selector == PaddingBytes {
			return Loose
		}
		return Strict
	}
	return e.BucketMerge
}

// MaxConcurrentBatches is how many batches can be in flight at once: 2 with
// async scheduling and no pipeline parallelism, else the PP size. It reads
// the resolved async setting (a plan's Engine).
func (e Engine) MaxConcurrentBatches() int {
	return vllm.ConcurrentBatches(!e.NoAsyncScheduling, e.PipelineParallelSize)
}

// InFlightTokens is what a sliding window or chunk reserves beyond itself
// on a resolved engine: --max-num-batched-tokens, times the batches in
// flight in the versions that count them (vLLM's max_in_flight_tokens).
func (e Engine) InFlightTokens() int {
	prof, err := e.Profile()
	if err != nil {
		prof = vllm.For(vllm.Newest())
	}
	return e.inFlight(prof)
}

func (e Engine) inFlight(prof vllm.Profile) int {
	mnbt := e.MaxNumBatchedTokens
	if mnbt == 0 {
		mnbt = DefaultMaxNumBatchedTokens
	}
	async := e.AsyncScheduling || !e.NoAsyncScheduling && prof.AsyncScheduling(e.PipelineParallelSize)
	return prof.InFlightTokens(mnbt, async, e.PipelineParallelSize)
}

func (e Engine) limits(prof vllm.Profile) kvspec.Limits {
	return kvspec.Limits{MaxModelLen: e.MaxModelLen, InFlightTokens: e.inFlight(prof)}
}

func (e Engine) specOptions(prof vllm.Profile) kvspec.Options {
	return kvspec.Options{
		Profile:              prof,
		TensorParallelSize:   e.TensorParallelSize,
		BlockSize:            e.BlockSize,
		KVCacheDType:         e.KVCacheDType,
		MambaSSMCacheDType:   e.MambaSSMCacheDType,
		MambaCacheMode:       e.MambaCacheMode,
		NumSpeculativeTokens: e.NumSpeculativeTokens,
		AttentionBackend:     e.AttentionBackend,
		MaxModelLen:          e.MaxModelLen,
	}
}
