package plan

import (
	"fmt"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
)

// Invariant is a TP-invariant plan for a prefill (P) and a decode (D)
// engine: one grouping and one block size that both sides use, whatever
// their tensor-parallel sizes and scheduler limits, with each side's cost
// next to the plan it would choose on its own.
//
// Inferred: vLLM has no such planner in the code kvscope could read (RFC
// #58638 is not public). The rule follows reference/planning.md §6 and
// padding-bytes-selector.md §4: bucket layers by global identity (role,
// kind, window or chunk, head layout, state dimensions) with no
// TP-dependent merging; run the P engine's selector on those buckets with
// costs in worst-case blocks at the shared block size, before page
// unification; impose the resulting layout on both sides.
type Invariant struct {
	BlockSize     int      `json:"block_size"` // the suggested --block-size both sides use
	BlockSizeRule string   `json:"block_size_rule"`
	Layout        *Layout  `json:"layout"`
	P             *Plan    `json:"p"`             // P with the invariant layout
	D             *Plan    `json:"d"`             // D with the invariant layout
	PIndependent  *Plan    `json:"p_independent"` // P on its own
	DIndependent  *Plan    `json:"d_independent"` // D on its own
	Inferred      bool     `json:"inferred"`
	Notes         []string `json:"notes,omitempty"`
}

// SuggestedBlockSize is the --block-size that lets P and D share pages: the
// largest block size either engine settles on at its own TP size or at TP
// 1 (for hybrid attention/state models, the attention block size aligned at
// TP 1, which is the largest aligned block size across TP sizes). Every
// value it is the maximum of is a multiple of the kernel alignment, so the
// result is too, and its attention page holds every side's state page.
func SuggestedBlockSize(m *model.Model, p, d Engine) (int, error) {
	best := 0
	for _, e := range []Engine{p, d} {
		e, prof, _, err := e.resolved(m.MaxModelLen, hasState(m), m.MambaAll == "supported")
		if err != nil {
			return 0, err
		}
		for _, tp := range []int{1, e.TensorParallelSize} {
			o := e.specOptions(prof)
			o.TensorParallelSize = max(tp, 1)
			r, err := kvspec.ForRank(m, o)
			if err != nil {
				if tp == 1 {
					continue // TP 1 may be invalid for options that need sharding; the engine's own TP decides
				}
				return 0, err
			}
			best = max(best, r.BlockSize)
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("plan: no block size fits both engines")
	}
	return best, nil
}

// identity is a layer's TP-independent bucket key.
type identity struct {
	role   model.Role
	kind   model.Kind
	window int
	chunk  int
	heads  int
	head   int
	headV  int
	state  model.StateDims
}

func identityOf(l model.Layer) identity {
	id := identity{role: l.Role, kind: l.Kind, window: l.Window, chunk: l.Chunk, heads: l.KVHeads, head: l.HeadDim, headV: l.HeadDimV}
	if l.Role == model.MTP {
		id.role = model.Draft
	}
	if l.State != nil {
		id.state = *l.State
	}
	return id
}

// NewInvariant plans P and D with one TP-invariant layout.
func NewInvariant(m *model.Model, p, d Engine) (*Invariant, error) {
	pi, err := New(m, p)
	if err != nil {
		return nil, fmt.Errorf("P: %w", err)
	}
	di, err := New(m, d)
	if err != nil {
		return nil, fmt.Errorf("D: %w", err)
	}
	bs, err := SuggestedBlockSize(m, p, d)
	if err != nil {
		return nil, err
	}
	inv := &Invariant{
		BlockSize:     bs,
		BlockSizeRule: "largest block size either engine settles on, at its own TP size or at TP 1",
		PIndependent:  pi,
		DIndependent:  di,
		Inferred:      true,
	}
	layout, notes, err := invariantLayout(m, pi, di, bs)
	if err != nil {
		return nil, err
	}
	inv.Layout, inv.Notes = layout, notes
	pe, de := p, d
	pe.BlockSize, de.BlockSize = bs, bs
	if inv.P, err = WithLayout(m, pe, layout); err != nil {
		return nil, fmt.Errorf("P with the invariant layout: %w", err)
	}
	if inv.D, err = WithLayout(m, de, layout); err != nil {
		return nil, fmt.Errorf("D with the invariant layout: %w", err)
	}
	for _, side := range []*Plan{inv.P, inv.D} {
		side.Selector = pi.Engine.Selector
		side.addInferred("TP-invariant plan: one layout for P and D, bucketed by global layer identity (reference/planning.md §6)")
	}
	return inv, nil
}

// invariantLayout buckets layers by identity and selects g with costs in
// worst-case blocks at block size bs, taking the larger of P's and D's
// limits.
func invariantLayout(m *model.Model, pp, dp *Plan, bs int) (*Layout, []string, error) {
	var notes []string
	p, d := pp.Engine, dp.Engine
	lim := kvspec.Limits{
		MaxModelLen:    max(p.MaxModelLen, d.MaxModelLen),
		InFlightTokens: max(p.inFlight(pp.Profile), d.inFlight(dp.Profile)),
	}
	o := p.specOptions(pp.Profile)
	o.TensorParallelSize = 1
	o.BlockSize = bs
	o.NumSpeculativeTokens = max(p.NumSpeculativeTokens, d.NumSpeculativeTokens)
	rank, err := kvspec.ForRank(m, o)
	if err != nil {
		// TP 1 can be impossible only through options, not the model; fall back to P's TP.
		o.TensorParallelSize = p.TensorParallelSize
		if rank, err = kvspec.ForRank(m, o); err != nil {
			return nil, nil, err
		}
	}
	type ibucket struct {
		id     identity
		names  []string
		blocks int64
	}
	var buckets []ibucket
	for _, ls := range rank.Layers {
		id := identityOf(ls.Layer)
		s := ls.Spec
		s.BlockSize = bs
		blocks := s.MaxBlocks(lim)
		found := false
		for i := range buckets {
			if buckets[i].id == id {
				buckets[i].names = append(buckets[i].names, ls.Layer.Name)
				buckets[i].blocks = max(buckets[i].blocks, blocks)
				found = true
				break
			}
		}
		if !found {
			buckets = append(buckets, ibucket{id: id, names: []string{ls.Layer.Name}, blocks: blocks})
		}
	}
	sizes := make([]int, len(buckets))
	costs := make([]int64, len(buckets))
	for j, b := range buckets {
		sizes[j], costs[j] = len(b.names), b.blocks
	}
	if p.Selector != d.Selector || p.GroupSize != d.GroupSize || p.MinGroupLayers != d.MinGroupLayers {
		notes = append(notes, "P and D select group sizes differently; the invariant plan uses P's selector settings")
	}
	g := chooseGroupSize(p, pp.Profile, sizes, costs)
	l := &Layout{GroupSize: g}
	for bi, b := range buckets {
		n := strided(len(b.names), g)
		for i := 0; i < n; i++ {
			var members []string
			for k := i; k < len(b.names); k += n {
				members = append(members, b.names[k])
			}
			l.Groups = append(l.Groups, members)
			l.Buckets = append(l.Buckets, bi)
		}
	}
	return l, notes, nil
}
