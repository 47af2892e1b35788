// Package kvspec computes the KV cache spec of every layer on one tensor-
// parallel rank, as vLLM's KVCacheSpec classes do: page bytes, worst-case
// bytes per request, per-rank KV heads and recurrent state shapes, dtype
// sizes, and the hybrid attention/Mamba block-size alignment.
//
// It follows vLLM's vllm/v1/kv_cache_interface.py (newest generation read,
// commit 002f10e0cfa1373a19a0d2756598a34b700d20e5) and the platform's
// _align_hybrid_block_size. It knows nothing of groups or memory pools;
// those belong to package plan.
package kvspec

import (
	"fmt"

	"github.com/kvscope/kvscope/core/model"
)

// Spec is the KV cache spec of one layer on one rank.
type Spec struct {
	Kind      model.Kind
	BlockSize int // tokens per block (page)

	// Attention kinds.
	KVHeads    int // KV heads on this rank (1 for MLA)
	HeadSize   int // elements of one K head
	HeadSizeV  int // elements of one V head (0 for MLA)
	DTypeBytes int // bytes per K/V element
	Window     int // sliding window; on a Full spec, a window recorded by --disable-hybrid-kv-cache-manager
	Chunk      int // chunked local attention chunk; on a Full spec, recorded as above
	// ExtraRetained is vLLM's extra_retained_tokens of a sliding-window
	// spec: num_speculative_tokens-1 with multi-layer MTP, else 0.
	ExtraRetained int

	// Recurrent state kinds.
	Shapes          [][]int // per-rank state tensor shapes: conv first, then SSM
	StateDTypeBytes []int   // bytes per element of each shape
	MambaMode       string  // "none", "align" or "all"
	SpecBlocks      int     // num_speculative_blocks

	// PagePadded, when non-zero, replaces the real page size (it is at
	// least the real size): vLLM pads Mamba pages to the attention page, and
	// pads attention pages that do not divide the largest page.
	PagePadded int64
}

// Limits are the scheduler quantities a worst-case size depends on.
type Limits struct {
	MaxModelLen    int // tokens per request
	InFlightTokens int // max concurrent batches * max_num_batched_tokens
}

// RealPageBytes is the bytes of one block of this layer on one rank,
// without padding.
func (s Spec) RealPageBytes() int64 {
	switch {
	case s.Kind == model.MLA:
		return int64(s.BlockSize) * int64(s.KVHeads) * int64(s.HeadSize) * int64(s.DTypeBytes)
	case s.Kind.IsAttention():
		return int64(s.BlockSize) * int64(s.KVHeads) * int64(s.HeadSize+s.HeadSizeV) * int64(s.DTypeBytes)
	case s.Kind.IsState():
		var total int64
		for i, shape := range s.Shapes {
			n := int64(1)
			for _, d := range shape {
				n *= int64(d)
			}
			total += n * int64(s.StateDTypeBytes[i])
		}
		return total
	}
	return 0
}

// PageBytes is the bytes one block of this layer occupies on one rank.
func (s Spec) PageBytes() int64 {
	if s.PagePadded > 0 {
		return s.PagePadded
	}
	return s.RealPageBytes()
}

// BytesPerToken is the attention bytes one token takes on this rank (K and V
// for one layer); 0 for state kinds.
func (s Spec) BytesPerToken() int64 {
	if !s.Kind.IsAttention() || s.BlockSize == 0 {
		return 0
	}
	one := s
	one.BlockSize = 1
	one.PagePadded = 0
	return one.RealPageBytes()
}

// MaxBlocks is the worst-case number of blocks one request holds in a layer
// of this spec, vLLM's max_memory_usage_bytes divided by the page size.
//
//   - full (and MLA): ceil(max_model_len / block)
//   - sliding window W: ceil(min(W-1+extra+in_flight, max_model_len) / block) + 1;
//     the +1 is because a window need not start on a block boundary
//   - chunked local C: ceil(min(C+in_flight, max_model_len) / block)
//   - state: 1+spec blocks (mode none), 2+spec (align), ceil(max_model_len/block)+spec (all)
//
// in_flight is max_concurrent_batches * max_num_batched_tokens (vLLM's
// max_in_flight_tokens, newest generation).
func (s Spec) MaxBlocks(l Limits) int64 {
	bs := int64(s.BlockSize)
	m := int64(l.MaxModelLen)
	switch s.Kind {
	case model.Full, model.MLA:
		return ceilDiv(m, bs)
	case model.Sliding:
		return ceilDiv(min(int64(s.Window)-1+int64(s.ExtraRetained)+int64(l.InFlightTokens), m), bs) + 1
	case model.ChunkedLocal:
		return ceilDiv(min(int64(s.Chunk)+int64(l.InFlightTokens), m), bs)
	}
	if s.Kind.IsState() {
		switch s.MambaMode {
		case "all":
			return ceilDiv(m, bs) + int64(s.SpecBlocks)
		case "align":
			return 2 + int64(s.SpecBlocks)
		default:
			return 1 + int64(s.SpecBlocks)
		}
	}
	return 0
}

// MaxMemoryBytes is vLLM's max_memory_usage_bytes: the worst-case bytes one
// request holds in one layer of this spec on one rank.
func (s Spec) MaxMemoryBytes(l Limits) int64 { return s.MaxBlocks(l) * s.PageBytes() }

// WithBlockSize returns a copy with a new block size, scaling a padded page
// in proportion, as vLLM's copy_with_new_block_size does.
func (s Spec) WithBlockSize(blockSize int) Spec {
	if s.PagePadded > 0 && s.BlockSize > 0 {
		s.PagePadded = s.PagePadded * int64(blockSize) / int64(s.BlockSize)
	}
	s.BlockSize = blockSize
	return s
}

// Equal reports whether two specs are equal field by field, which is how
// vLLM buckets layers (dataclass equality).
func (s Spec) Equal(o Spec) bool {
	if s.Kind != o.Kind || s.BlockSize != o.BlockSize || s.KVHeads != o.KVHeads || s.HeadSize != o.HeadSize ||
		s.HeadSizeV != o.HeadSizeV || s.DTypeBytes != o.DTypeBytes || s.Window != o.Window || s.Chunk != o.Chunk || s.ExtraRetained != o.ExtraRetained ||
		s.MambaMode != o.MambaMode || s.SpecBlocks != o.SpecBlocks || s.PagePadded != o.PagePadded ||
		len(s.Shapes) != len(o.Shapes) || len(s.StateDTypeBytes) != len(o.StateDTypeBytes) {
		return false
	}
	for i := range s.Shapes {
		if len(s.Shapes[i]) != len(o.Shapes[i]) || s.StateDTypeBytes[i] != o.StateDTypeBytes[i] {
			return false
		}
		for j := range s.Shapes[i] {
			if s.Shapes[i][j] != o.Shapes[i][j] {
				return false
			}
		}
	}
	return true
}

// LooselyEqual reports whether two specs agree on kind, block size, page
// bytes and window/chunk, ignoring the head layout. Inferred: the seed
// deployment's vLLM build buckets a drafter's full-attention layer with the
// target's when these agree (see reference/padding-bytes-selector.md §4).
func (s Spec) LooselyEqual(o Spec) bool {
	if !s.Kind.IsAttention() || !o.Kind.IsAttention() {
		return s.Equal(o)
	}
	return s.Kind == o.Kind && s.BlockSize == o.BlockSize && s.PageBytes() == o.PageBytes() &&
		s.Window == o.Window && s.Chunk == o.Chunk && s.ExtraRetained == o.ExtraRetained
}

// String renders the spec compactly for logs and tables.
func (s Spec) String() string {
	switch {
	case s.Kind.IsAttention():
		extra := ""
		if s.Window > 0 {
			extra = fmt.Sprintf(" window=%d", s.Window)
		}
		if s.Chunk > 0 {
			extra += fmt.Sprintf(" chunk=%d", s.Chunk)
		}
		pad := ""
		if s.PagePadded > 0 {
			pad = fmt.Sprintf(" padded=%d", s.PagePadded)
		}
		return fmt.Sprintf("%s bs=%d heads=%d head=%d/%d %dB%s page=%d%s", s.Kind, s.BlockSize, s.KVHeads, s.HeadSize, s.HeadSizeV, s.DTypeBytes, extra, s.RealPageBytes(), pad)
	case s.Kind.IsState():
		pad := ""
		if s.PagePadded > 0 {
			pad = fmt.Sprintf(" padded=%d", s.PagePadded)
		}
		return fmt.Sprintf("%s bs=%d shapes=%v page=%d%s mode=%s spec=%d", s.Kind, s.BlockSize, s.Shapes, s.RealPageBytes(), pad, s.MambaMode, s.SpecBlocks)
	}
	return string(s.Kind)
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// CeilDiv returns ceil(a/b) for positive b, and 0 for a <= 0.
func CeilDiv(a, b int64) int64 { return ceilDiv(a, b) }
