package plan

import (
	"fmt"

	"github.com/kvscope/kvscope/core/kvspec"
)

// Selector names a group-size selector.
type Selector string

// The group-size selectors.
const (
	// Classic is vLLM main's rule: g = the smallest bucket, or the largest
	// when the largest is under 1.5x the smallest.
	Classic Selector = "classic"
	// Balanced minimises padding layers + lambda * groups (vLLM PR #49472).
	Balanced Selector = "balanced"
	// PaddingBytes minimises the worst-case padding bytes per request, then
	// the group count (vLLM PR #58207); the default.
	PaddingBytes Selector = "padding-bytes"
)

// BucketMerge says how layers with different specs may share a bucket.
type BucketMerge string

// The bucket merge rules.
const (
	// MergeAuto is Loose with the padding-bytes selector, Strict otherwise.
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
// value of every field means vLLM's default, so Engine{} is a TP1 engine
// with default flags.
type Engine struct {
	TensorParallelSize   int         `json:"tensor_parallel_size"`   // --tensor-parallel-size (1)
	PipelineParallelSize int         `json:"pipeline_parallel_size"` // --pipeline-parallel-size (1)
	BlockSize            int         `json:"block_size"`             // --block-size (16, or the backend's)
	MaxModelLen          int         `json:"max_model_len"`          // --max-model-len (derived from the config)
	MaxNumBatchedTokens  int         `json:"max_num_batched_tokens"` // --max-num-batched-tokens (8192)
	KVCacheDType         string      `json:"kv_cache_dtype"`         // --kv-cache-dtype (auto)
	KVCacheMemoryBytes   int64       `json:"kv_cache_memory_bytes"`  // --kv-cache-memory-bytes (40 GiB) per rank
	NumSpeculativeTokens int         `json:"num_speculative_tokens"` // --num-speculative-tokens (0)
	Selector             Selector    `json:"selector"`               // --selector (padding-bytes)
	MinGroupLayers       int         `json:"min_kv_cache_group_layers"`
	GroupSize            int         `json:"kv_cache_group_size"` // --kv-cache-group-size: fixed g
	BalancedLambda       float64     `json:"balanced_lambda"`     // padding_per_group of the balanced selector (1.0)
	BucketMerge          BucketMerge `json:"bucket_merge"`        // --kv-cache-bucket-merge (auto)
	DisableHybrid        bool        `json:"disable_hybrid_kv_cache_manager"`
	MambaCacheMode       string      `json:"mamba_cache_mode"`      // --mamba-cache-mode (none)
	MambaSSMCacheDType   string      `json:"mamba_ssm_cache_dtype"` // --mamba-ssm-cache-dtype (auto)
	NoAsyncScheduling    bool        `json:"no_async_scheduling"`   // --no-async-scheduling
	AttentionBackend     string      `json:"attention_backend"`     // --attention-backend
	NumGPUBlocksOverride int         `json:"num_gpu_blocks_override"`
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

// resolved fills in vLLM's defaults and checks ranges.
func (e Engine) resolved(modelMaxLen int) (Engine, error) {
	if e.TensorParallelSize == 0 {
		e.TensorParallelSize = 1
	}
	if e.PipelineParallelSize == 0 {
		e.PipelineParallelSize = 1
	}
	if e.MaxModelLen == 0 {
		if modelMaxLen > 1<<26 {
			return e, flagErr("--max-model-len", "unset", fmt.Sprintf("the config's derived maximum of %d tokens exceeds 67108864; pass --max-model-len", modelMaxLen))
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
		e.Selector = PaddingBytes
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
	if e.MambaCacheMode == "" {
		e.MambaCacheMode = "none"
	}
	if e.MambaSSMCacheDType == "" {
		e.MambaSSMCacheDType = "auto"
	}
	checks := []struct {
		ok   bool
		flag string
		v    any
		why  string
	}{
		{e.TensorParallelSize > 0 && e.TensorParallelSize <= 1024, "--tensor-parallel-size", e.TensorParallelSize, "must be between 1 and 1024"},
		{e.PipelineParallelSize > 0 && e.PipelineParallelSize <= 256, "--pipeline-parallel-size", e.PipelineParallelSize, "must be between 1 and 256"},
		{e.BlockSize >= 0 && e.BlockSize <= 1<<20, "--block-size", e.BlockSize, "must be between 1 and 1048576"},
		{e.MaxModelLen > 0 && e.MaxModelLen <= 1<<26, "--max-model-len", e.MaxModelLen, "must be between 1 and 67108864"},
		{e.MaxNumBatchedTokens > 0 && e.MaxNumBatchedTokens <= 1<<26, "--max-num-batched-tokens", e.MaxNumBatchedTokens, "must be between 1 and 67108864"},
		{e.KVCacheMemoryBytes > 0 && e.KVCacheMemoryBytes <= 1<<50, "--kv-cache-memory-bytes", e.KVCacheMemoryBytes, "must be between 1 and 2^50"},
		{e.NumSpeculativeTokens >= 0 && e.NumSpeculativeTokens <= 64, "--num-speculative-tokens", e.NumSpeculativeTokens, "must be between 0 and 64"},
		{e.MinGroupLayers > 0 && e.MinGroupLayers <= 1<<16, "--min-kv-cache-group-layers", e.MinGroupLayers, "must be positive"},
		{e.GroupSize >= 0 && e.GroupSize <= 1<<16, "--kv-cache-group-size", e.GroupSize, "must be positive"},
		{e.BalancedLambda > 0 && e.BalancedLambda < 1e9, "--balanced-lambda", e.BalancedLambda, "must be positive"},
		{e.NumGPUBlocksOverride >= 0, "--num-gpu-blocks-override", e.NumGPUBlocksOverride, "must not be negative"},
	}
	for _, c := range checks {
		if !c.ok {
			return e, flagErr(c.flag, c.v, c.why)
		}
	}
	switch e.Selector {
	case Classic, Balanced, PaddingBytes:
	default:
		return e, flagErr("--selector", e.Selector, "want classic, balanced or padding-bytes")
	}
	switch e.BucketMerge {
	case MergeAuto, Strict, Loose:
	default:
		return e, flagErr("--kv-cache-bucket-merge", e.BucketMerge, "want auto, strict or loose")
	}
	return e, nil
}

// merge is the bucket merge rule in effect.
func (e Engine) merge() BucketMerge {
	if e.BucketMerge == MergeAuto || e.BucketMerge == "" {
		if e.Selector == PaddingBytes || e.Selector == "" {
			return Loose
		}
		return Strict
	}
	return e.BucketMerge
}

// MaxConcurrentBatches is how many batches can be in flight at once: 2 with
// async scheduling and no pipeline parallelism, else the PP size.
func (e Engine) MaxConcurrentBatches() int {
	pp := max(1, e.PipelineParallelSize)
	if !e.NoAsyncScheduling && pp == 1 {
		return 2
	}
	return pp
}

// InFlightTokens is vLLM's max_in_flight_tokens: max concurrent batches
// times --max-num-batched-tokens.
func (e Engine) InFlightTokens() int {
	mnbt := e.MaxNumBatchedTokens
	if mnbt == 0 {
		mnbt = DefaultMaxNumBatchedTokens
	}
	return e.MaxConcurrentBatches() * mnbt
}

func (e Engine) limits() kvspec.Limits {
	return kvspec.Limits{MaxModelLen: e.MaxModelLen, InFlightTokens: e.InFlightTokens()}
}

func (e Engine) specOptions() kvspec.Options {
	return kvspec.Options{
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
