package plan

import (
	"fmt"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/vllm"
)

// RefusalError is vLLM's refusal to start an engine: the KV cache memory
// of a worker cannot hold one request of max_model_len. The message is the
// one the engine's version prints, with its estimate of the longest
// max_model_len that would fit.
type RefusalError struct {
	Version         string `json:"vllm_version"`
	Message         string `json:"message"`
	MaxModelLen     int    `json:"max_model_len"`
	NeededBytes     int64  `json:"needed_bytes"`
	AvailableBytes  int64  `json:"available_bytes"`
	EstimatedMaxLen int    `json:"estimated_max_model_len"`
	Rule            string `json:"rule"` // how the version sizes one request (vllm.Refusal*)
}

func (e *RefusalError) Error() string {
	return fmt.Sprintf("vLLM %s refuses to start: %s", e.Version, e.Message)
}

// gib is 2^30 bytes, vLLM's GiB_bytes.
const gib = 1 << 30

// startupCheck is vLLM's check that one request of max_model_len fits the
// KV cache memory of every worker (_check_enough_kv_cache_memory), with
// the needed bytes sized as the engine's version sizes them (need):
//   - layers (before 0.14): the sum of every layer's worst case, no padding;
//   - first-group (0.14 to 0.17): slots * page * blocks of group 0 only;
//   - all-groups (0.19 on): bytes per block * blocks per request.
//
// From 0.21 a --num-gpu-blocks-override replaces the memory by the blocks
// it forces; from 0.29 the check holds back one block (the null block).
// With pipeline parallelism every stage's worker checks its own layers
// against its own memory (from 0.17; 0.14 to 0.16 held the whole model's
// groups against the smallest worker's memory).
func (c *call) startupCheck() error {
	e, prof := &c.e, c.prof
	for s, st := range c.stages() {
		if st.Layers == 0 {
			continue
		}
		if !prof.RefusalPerWorker {
			// The whole model's groups against the smallest worker's memory.
			s, st = -1, Stage{BytesPerBlock: c.whole}
		}
		avail := e.KVCacheMemoryBytes
		if e.NumGPUBlocksOverride > 0 && prof.RefusalOverride {
			avail = int64(e.NumGPUBlocksOverride) * st.BytesPerBlock
		}
		if prof.NullBlock {
			avail -= st.BytesPerBlock
		}
		if c.need(s, e.MaxModelLen) <= avail {
			continue
		}
		est := estimateMaxLen(func(maxLen int) int64 { return c.need(s, maxLen) }, avail, e.MaxModelLen)
		if prof.NullBlock {
			avail += st.BytesPerBlock // the message names the memory, not what the check compared
		}
		needed := c.need(s, e.MaxModelLen)
		return &RefusalError{
			Version: prof.Name, MaxModelLen: e.MaxModelLen, NeededBytes: needed, AvailableBytes: avail,
			EstimatedMaxLen: est, Rule: prof.Refusal,
			Message: prof.RefusalMessage(e.MaxModelLen, float64(needed)/gib, float64(avail)/gib, est),
		}
	}
	return nil
}

// estimateMaxLen is vLLM's estimate_max_model_len: a binary search for the
// longest max_model_len whose request fits, 0 when not even one token does.
func estimateMaxLen(need func(int) int64, avail int64, hi int) int {
	if need(1) > avail {
		return 0
	}
	lo, best := 1, 1
	for lo <= hi {
		mid := lo + (hi-lo)/2
		if need(mid) <= avail {
			best, lo = mid, mid+1
		} else {
			hi = mid - 1
		}
	}
	return best
}

// need is what one request of maxLen tokens needs on the worker of
// pipeline stage s (s < 0: the whole model), by the version's rule.
func (c *call) need(s, maxLen int) int64 {
	r := c.r
	blocks := c.blocks()
	if maxLen != c.lim.MaxModelLen {
		lim := kvspec.Limits{MaxModelLen: maxLen, InFlightTokens: c.lim.InFlightTokens}
		var buf [16]int64
		blocks = buf[:0]
		for i := range r.classes {
			blocks = append(blocks, r.classes[i].MaxBlocks(lim))
		}
	}
	all := s < 0 || c.nstage == 1
	bpb := c.whole
	if s >= 0 {
		bpb = c.stages()[s].BytesPerBlock
	}
	switch c.prof.Refusal {
	case vllm.RefusalLayers:
		var total int64
		for li, cl := range r.class {
			if all || c.stageOf(li) == s {
				total += blocks[cl] * r.pages[cl]
			}
		}
		return total
	case vllm.RefusalGroup0:
		return bpb * c.groupBlocks(blocks, 0, 0, s, all)
	}
	var total int64
	for j := range r.buckets {
		for i := 0; i < c.cuts()[j].n; i++ {
			total += c.groupBlocks(blocks, j, i, s, all)
		}
	}
	return bpb * total
}

// groupBlocks is the worst-case blocks per request of group i of bucket
// j, given each class's: the largest among its layers on stage s (every
// stage when all is set; all equal unless the group is uniform-type).
func (c *call) groupBlocks(blocks []int64, j, i, s int, all bool) int64 {
	r := c.r
	b, n := r.buckets[j], c.cuts()[j].n
	var most int64
	for k := i; k < len(b); k += n {
		if all || c.stageOf(b[k]) == s {
			most = max(most, blocks[r.class[b[k]]])
		}
	}
	return most
}
