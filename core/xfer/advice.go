package xfer

import (
	"fmt"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// Advice is the --block-size that makes every layer's P and D pages divide
// (one holds a whole number of the other), so that descriptors follow whole
// pages instead of splitting at both sides' boundaries.
type Advice struct {
	Divide    bool   `json:"pages_divide"` // the plans' pages already divide
	Layer     string `json:"layer,omitempty"`
	PBlock    int    `json:"p_block_size,omitempty"`
	DBlock    int    `json:"d_block_size,omitempty"`
	BlockSize int    `json:"suggested_block_size,omitempty"` // 0 when none was found
	Log       string `json:"log"`
}

// divides reports whether every layer's block sizes on P and D divide.
func divides(p, d *plan.Plan) (string, int, int, bool) {
	for _, dl := range d.Layers {
		if dl.Kind.IsState() {
			continue
		}
		pl, ok := p.LayerByName(dl.Name)
		if !ok {
			continue
		}
		a, b := max(pl.Block, dl.Block), min(pl.Block, dl.Block)
		if b == 0 || a%b != 0 {
			return dl.Name, pl.Block, dl.Block, false
		}
	}
	return "", 0, 0, true
}

// BlockSizeAdvice checks whether P's and D's pages divide and, when they do
// not, names a --block-size for both engines that makes them divide: the
// suggested TP-invariant block size (plan.SuggestedBlockSize), or the
// first of its multiples up to 8x that works.
func BlockSizeAdvice(m *model.Model, pe, de plan.Engine, pp, dp *plan.Plan) Advice {
	layer, pb, db, ok := divides(pp, dp)
	if ok {
		return Advice{Divide: true, Log: "P and D pages divide: descriptors follow whole pages"}
	}
	a := Advice{Layer: layer, PBlock: pb, DBlock: db}
	base, err := plan.SuggestedBlockSize(m, pe, de)
	if err == nil {
		for k := 1; k <= 8 && a.BlockSize == 0; k++ {
			p2, d2 := pe, de
			p2.BlockSize, d2.BlockSize = base*k, base*k
			pq, err1 := plan.New(m, p2)
			dq, err2 := plan.New(m, d2)
			if err1 != nil || err2 != nil {
				continue
			}
			if _, _, _, ok := divides(pq, dq); ok {
				a.BlockSize = base * k
			}
		}
	}
	if a.BlockSize == 0 {
		a.Log = fmt.Sprintf("P and D pages do not divide (layer %s: P %d tokens, D %d) and no --block-size up to 8x %d makes them; descriptors split at both sides' page boundaries", layer, pb, db, base)
	} else {
		a.Log = fmt.Sprintf("P and D pages do not divide (layer %s: P %d tokens, D %d); --block-size %d on both engines makes them divide", layer, pb, db, a.BlockSize)
	}
	return a
}
