package xfer

import (
	"math"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// Cost bounds what computing one request's transfer between two plans
// will take, from the plans alone: before any registration or descriptor
// pair exists. Each figure is an upper bound (a server refuses or queues
// work by it), not a prediction; saturating at math.MaxInt64.
type Cost struct {
	Ranks   int64 `json:"ranks"`   // P's and D's ranks
	Regions int64 `json:"regions"` // registered regions on every rank
	// Pairs bounds the descriptor pairs: on each rank pair, every layer's
	// segments (2 for attention, 4 for state) over every block the request
	// can touch.
	Pairs int64 `json:"pairs"`
	// OracleBytes bounds the bytes of the pages the request touches: on
	// every rank, each group's blocks of the request times its layers'
	// pages. An agent proving a transfer (oracle.NewProver) holds them
	// all; the oracle's own check holds one D page at a time (MaxPage).
	OracleBytes int64 `json:"oracle_bytes"`
	// Pages bounds the pages the request touches, on every rank of both
	// sides: each group's blocks times its layers' segments (a segment
	// lies in one region). The oracle keeps a few words per page.
	Pages int64 `json:"pages"`
	// PageSlots bounds the entries of the oracle's page tables, which are
	// dense by region and block id: on every rank, its regions (two a
	// layer at most) times the block ids the request's groups take (ids
	// come from one allocator per side, from 1).
	PageSlots int64 `json:"page_slots"`
	// MaxPage is the largest layer page of either side: the oracle builds
	// and reads back one D page at a time.
	MaxPage int64 `json:"max_page_bytes"`
}

// EstimateCost bounds the cost of req between plans pp and dp of model m.
func EstimateCost(m *model.Model, pp, dp *plan.Plan, req Request) Cost {
	ranks := func(p *plan.Plan) int64 {
		return int64(max(1, p.Engine.TensorParallelSize)) * int64(max(1, p.Engine.PipelineParallelSize))
	}
	pr, dr := ranks(pp), ranks(dp)
	var c Cost
	c.Ranks = SatAdd(pr, dr)
	layers := int64(len(m.Layers))
	c.Regions = SatMul(c.Ranks, SatMul(layers, 2))
	tokens := int64(max(req.PromptTokens, 1))
	// Per rank: pairs (each segment of each layer over each block; a
	// segment's page on that rank is one page), page bytes and block ids.
	perRank := func(p *plan.Plan) (pairs, bytes, ids int64) {
		ids = 1 // ids start at 1
		for _, g := range p.Groups {
			blocks := int64(2)
			if g.BlockSize > 0 && !g.Kind.IsState() {
				blocks = SatAdd(tokens/int64(g.BlockSize), 2)
			}
			segs := int64(2)
			if g.Kind.IsState() {
				segs = 4
			}
			n := int64(len(g.Layers))
			pairs = SatAdd(pairs, SatMul(SatMul(blocks, n), segs))
			bytes = SatAdd(bytes, SatMul(SatMul(blocks, n), g.PageBytes))
			ids = SatAdd(ids, blocks)
			c.MaxPage = max(c.MaxPage, g.PageBytes)
		}
		return pairs, bytes, ids
	}
	pPairs, pBytes, pIDs := perRank(pp)
	dPairs, dBytes, dIDs := perRank(dp)
	// Every rank pair that moves bytes: at most max(P, D) ranks times the
	// fan-in of the larger side (each D rank reads from P/D ranks, or each
	// P rank's heads reach D/P ranks).
	fan := max(pr, dr) / max(1, min(pr, dr))
	c.Pairs = SatMul(SatMul(max(pr, dr), fan), max(pPairs, dPairs))
	c.OracleBytes = SatAdd(SatMul(pr, pBytes), SatMul(dr, dBytes))
	c.Pages = SatAdd(SatMul(pr, pPairs), SatMul(dr, dPairs))
	c.PageSlots = SatMul(SatMul(layers, 2), SatAdd(SatMul(pr, pIDs), SatMul(dr, dIDs)))
	return c
}

// SatAdd is a + b for non-negative a and b, saturating at math.MaxInt64.
func SatAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// SatMul is a × b for non-negative a and b, saturating at math.MaxInt64.
func SatMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
