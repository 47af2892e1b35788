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
	// OracleBytes bounds the pages the byte oracle materialises: on every
	// rank, each group's blocks of the request times its layers' pages.
	OracleBytes int64 `json:"oracle_bytes"`
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
	perRank := func(p *plan.Plan) (pairs, bytes int64) {
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
		}
		return pairs, bytes
	}
	pPairs, pBytes := perRank(pp)
	dPairs, dBytes := perRank(dp)
	// Every rank pair that moves bytes: at most max(P, D) ranks times the
	// fan-in of the larger side (each D rank reads from P/D ranks, or each
	// P rank's heads reach D/P ranks).
	fan := max(pr, dr) / max(1, min(pr, dr))
	c.Pairs = SatMul(SatMul(max(pr, dr), fan), max(pPairs, dPairs))
	c.OracleBytes = SatAdd(SatMul(pr, pBytes), SatMul(dr, dBytes))
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
