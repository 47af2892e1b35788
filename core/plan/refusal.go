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
// the needed bytes sized as the engine's version sizes them:
//   - layers (before 0.14): the sum of every layer's worst case, no padding;
//   - first-group (0.14 to 0.17): slots * page * blocks of group 0 only;
//   - all-groups (0.19 on): bytes per block * blocks per request.
//
// From 0.21 a --num-gpu-blocks-override replaces the memory by the blocks
// it forces; from 0.29 the check holds back one block (the null block).
// With pipeline parallelism every stage's worker checks its own layers
// against its own memory (from 0.17; 0.14 to 0.16 held the whole model's
// groups against the smallest worker's memory).
func (p *Plan) startupCheck() error {
	return startupCheck(p.Engine, &p.Profile, p.Stages, p.wholeBytesPerBlock(), p.neededBytes)
}

// startupCheck is the check on a plan's figures: its resolved engine, its
// stages, the bytes per block of the whole model, and need, the bytes one
// request of maxLen tokens needs on the worker of stage s (s < 0: the
// whole model).
func startupCheck(e Engine, prof *vllm.Profile, stages []Stage, whole int64, need func(s, maxLen int) int64) error {
	for s := range stages {
		st := stages[s]
		if st.Layers == 0 {
			continue
		}
		if !prof.RefusalPerWorker {
			// The whole model's groups against the smallest worker's memory.
			s, st = -1, Stage{BytesPerBlock: whole}
		}
		avail := e.KVCacheMemoryBytes
		if e.NumGPUBlocksOverride > 0 && prof.RefusalOverride {
			avail = int64(e.NumGPUBlocksOverride) * st.BytesPerBlock
		}
		if prof.NullBlock {
			avail -= st.BytesPerBlock
		}
		if need(s, e.MaxModelLen) <= avail {
			continue
		}
		stage := s
		est := estimateMaxLen(func(maxLen int) int64 { return need(stage, maxLen) }, avail, e.MaxModelLen)
		if prof.NullBlock {
			avail += st.BytesPerBlock // the message names the memory, not what the check compared
		}
		needed := need(s, e.MaxModelLen)
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

// neededBytes is what one request of maxLen tokens needs on the worker of
// pipeline stage s, by the version's rule.
func (p *Plan) neededBytes(s, maxLen int) int64 {
	lim := kvspec.Limits{MaxModelLen: maxLen, InFlightTokens: p.Engine.inFlight(p.Profile)}
	bpb := p.wholeBytesPerBlock()
	if s >= 0 {
		bpb = p.Stages[s].BytesPerBlock
	}
	switch p.Profile.Refusal {
	case vllm.RefusalLayers:
		var total int64
		for _, l := range p.Layers {
			if l.Stage == s || s < 0 || len(p.Stages) == 1 {
				total += l.Spec.MaxMemoryBytes(lim)
			}
		}
		return total
	case vllm.RefusalGroup0:
		return bpb * p.groupBlocks(0, s, lim)
	}
	var blocks int64
	for g := range p.Groups {
		blocks += p.groupBlocks(g, s, lim)
	}
	return bpb * blocks
}

// wholeBytesPerBlock is one block id's bytes over the whole model (every
// pipeline stage's layers together): the largest group's page bytes.
func (p *Plan) wholeBytesPerBlock() int64 {
	bytes := make([]int64, len(p.Groups))
	var most int64
	for _, l := range p.Layers {
		if p.Groups[l.Group].UniformType {
			bytes[l.Group] += l.Page
		} else {
			bytes[l.Group] += p.Groups[l.Group].PageBytes
		}
		most = max(most, bytes[l.Group])
	}
	return most
}

// groupBlocks is group g's worst-case blocks per request at lim, counting
// only groups with a layer on stage s (every stage when s < 0): the
// largest of its layers' worst cases (all equal unless the group is
// uniform-type).
func (p *Plan) groupBlocks(g, s int, lim kvspec.Limits) int64 {
	var blocks int64
	for _, l := range p.Layers {
		if l.Group == g && (l.Stage == s || s < 0 || len(p.Stages) == 1) {
			blocks = max(blocks, l.Spec.MaxBlocks(lim))
		}
	}
	return blocks
}
