package xfer

import (
	"fmt"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// Side names an engine of the P/D pair.
type Side string

// The two sides.
const (
	P Side = "P"
	D Side = "D"
)

// CacheLayout is how an attention layer's cache tensor is laid out.
type CacheLayout string

// The layouts.
const (
	// SplitKV is FlashAttention's [2, num_blocks, heads, block, head_dim]
	// in HND order: a K region and a V region per tensor.
	SplitKV CacheLayout = "split"
	// BlocksFirst is [num_blocks, 2, heads, block, head_dim] (FlashInfer,
	// and every attention layer of a model with Mamba/GDN layers): one
	// region per tensor, K and V halves inside each block.
	BlocksFirst CacheLayout = "blocks-first"
)

// SegName names one part of a layer's page.
type SegName string

// The segment names. Conv segments are the conv state's sub-projections in
// vLLM's DS layout (channel-major): q, k, v for gated delta net; x, B, C
// for Mamba2; x for Mamba1.
const (
	SegK      SegName = "K"
	SegV      SegName = "V"
	SegLatent SegName = "latent"
	SegConvQ  SegName = "conv.q"
	SegConvK  SegName = "conv.k"
	SegConvV  SegName = "conv.v"
	SegConvX  SegName = "conv.x"
	SegConvB  SegName = "conv.B"
	SegConvC  SegName = "conv.C"
	SegSSM    SegName = "ssm"
)

// Region is one registered memory region of a rank.
type Region struct {
	Index     int     `json:"index"`
	Tensor    int     `json:"tensor"` // the slot tensor it belongs to
	Half      SegName `json:"half"`   // K or V for split layouts, "" for a whole page per block
	Base      uint64  `json:"base_addr"`
	BlockLen  int64   `json:"block_len"` // bytes of one block in this region (its stride)
	NumBlocks int64   `json:"num_blocks"`
}

// Bytes is the region's registered size.
func (r Region) Bytes() int64 { return r.BlockLen * r.NumBlocks }

// Segment is one contiguous part of a layer's page on one rank: K or V
// heads, the MLA latent, a conv sub-projection or the SSM state. Its bytes
// are Hi-Lo global indices (heads or channels) of IndexBytes each; an
// attention index holds Rows token rows of RowBytes.
type Segment struct {
	Name       SegName `json:"name"`
	Region     int     `json:"region"`
	Offset     int64   `json:"offset"` // within the region's block
	Lo         int     `json:"lo"`     // global index range on this rank
	Hi         int     `json:"hi"`
	IndexBytes int64   `json:"index_bytes"`
	Rows       int     `json:"rows"` // token rows per index (attention: the block size); 1 for state
	RowBytes   int64   `json:"row_bytes"`
}

// Bytes is the segment's size within one block.
func (s Segment) Bytes() int64 { return int64(s.Hi-s.Lo) * s.IndexBytes }

// IsAttention reports whether the segment holds per-token rows.
func (s Segment) IsAttention() bool { return s.Name == SegK || s.Name == SegV || s.Name == SegLatent }

// LayerReg places one layer in a rank's registration.
type LayerReg struct {
	Name      string     `json:"name"`
	Kind      model.Kind `json:"kind"`
	Group     int        `json:"group"`
	Slot      int        `json:"slot"`
	Tensor    int        `json:"tensor"`
	BlockSize int        `json:"tokens_per_page"`
	Window    int        `json:"window,omitempty"`
	Chunk     int        `json:"chunk,omitempty"`
	Segments  []Segment  `json:"segments"`
	kvHeads   int        // the model layer's KV heads (all ranks)
}

// Registration is what one rank registers with NIXL, derived from its plan.
type Registration struct {
	Side      Side        `json:"side"`
	Rank      int         `json:"rank"`
	TP        int         `json:"tp_size"`
	Layout    CacheLayout `json:"layout"`
	NumBlocks int64       `json:"num_blocks"`
	Regions   []Region    `json:"regions"`
	Layers    []LayerReg  `json:"layers"`
	// TensorPages is each slot tensor's page (bytes per block).
	TensorPages []int64 `json:"tensor_pages"`
	// TensorGroups lists, per tensor, the layer of each group in it ("" for
	// a padding slot).
	TensorMembers [][]string `json:"tensor_members"`

	plan   *plan.Plan
	model  *model.Model
	byName map[string]int

	// What a registration built into a reused one takes over: its
	// segments' array, the model's layer index, and whether byName,
	// TensorPages and TensorMembers are its own (rank 0's) or another
	// rank's, shared.
	slab      []Segment
	modelIdx  map[string]*model.Layer
	ownsIndex bool
}

// Bases assigns a tensor's base address. The default spaces sides, ranks and
// tensors apart deterministically.
type Bases func(side Side, rank, tensor int, offset uint64) uint64

// DefaultBases puts side P at 1<<60 and D at 2<<60, each rank 1<<50 apart,
// and tensors one after another from there (2 MiB aligned).
func DefaultBases(side Side, rank, tensor int, offset uint64) uint64 {
	s := uint64(1)
	if side == D {
		s = 2
	}
	return s<<60 + uint64(rank)<<50 + offset
}

// Register builds one rank's registration from its plan.
func Register(m *model.Model, p *plan.Plan, side Side, rank int, layout CacheLayout, bases Bases) (*Registration, error) {
	return register(nil, m, layerIndex(m), p, side, rank, layout, bases, nil)
}

// layerIndex maps layer names to the model's layers, once per model.
func layerIndex(m *model.Model) map[string]*model.Layer {
	out := make(map[string]*model.Layer, len(m.Layers))
	for i := range m.Layers {
		out[m.Layers[i].Name] = &m.Layers[i]
	}
	return out
}

// register builds one rank's registration, into r when it is not nil (a
// registration no longer in use: its memory is taken over). like, when not
// nil, is another rank's registration of the same plan: what does not
// depend on the rank (the layer index, tensor pages and members) is shared
// with it, read-only.
func register(r *Registration, m *model.Model, layersByName map[string]*model.Layer, p *plan.Plan, side Side, rank int, layout CacheLayout, bases Bases, like *Registration) (*Registration, error) {
	if bases == nil {
		bases = DefaultBases
	}
	tp := p.Engine.TensorParallelSize
	if rank < 0 || rank >= tp {
		return nil, fmt.Errorf("xfer: %s rank %d outside TP size %d", side, rank, tp)
	}
	hasState := false
	for _, l := range p.Layers {
		hasState = hasState || l.Kind.IsState()
	}
	if hasState {
		layout = BlocksFirst // vLLM transposes attention to blocks-first next to Mamba state
	}
	if layout == "" {
		layout = SplitKV
	}
	old := r
	if old == nil {
		old = &Registration{}
	}
	r = &Registration{Side: side, Rank: rank, TP: tp, Layout: layout, NumBlocks: p.NumBlocks, plan: p, model: m}

	// Slot tensors: one per slot, shared by one layer of each group; a
	// uniform-type group has one tensor per layer.
	type member struct {
		lp    *plan.LayerPlan
		group int
	}
	var tensors [][]member
	if len(p.Groups) == 1 && p.Groups[0].UniformType {
		tensors = make([][]member, 0, len(p.Layers))
		for i := range p.Layers {
			tensors = append(tensors, []member{{&p.Layers[i], p.Layers[i].Group}})
		}
	} else {
		tensors = make([][]member, p.Slots)
		for i := range p.Layers {
			lp := &p.Layers[i]
			if tensors[lp.Slot] == nil {
				tensors[lp.Slot] = make([]member, 0, len(p.Groups))
			}
			tensors[lp.Slot] = append(tensors[lp.Slot], member{lp, lp.Group})
		}
	}
	r.Layers = emptied(old.Layers, len(p.Layers))
	r.Regions = emptied(old.Regions, 2*len(tensors))
	shared := like != nil && like.plan == p
	switch {
	case shared:
		r.byName, r.TensorPages, r.TensorMembers = like.byName, like.TensorPages, like.TensorMembers
	case old.ownsIndex:
		clear(old.byName)
		r.byName, r.TensorPages, r.TensorMembers, r.ownsIndex = old.byName, emptied(old.TensorPages, len(tensors)), emptied(old.TensorMembers, len(tensors)), true
	default:
		r.byName = make(map[string]int, len(p.Layers))
		r.TensorPages = make([]int64, 0, len(tensors))
		r.TensorMembers = make([][]string, 0, len(tensors))
		r.ownsIndex = true
	}
	// One array holds every layer's segments (at most four each).
	slab := emptied(old.slab, 4*len(p.Layers))
	var offset uint64
	for ti, members := range tensors {
		page := members[0].lp.Page
		base := bases(side, rank, ti, offset)
		if !shared {
			names := make([]string, len(p.Groups))
			for _, mb := range members {
				if mb.group < len(names) {
					names[mb.group] = mb.lp.Name
				}
			}
			r.TensorPages = append(r.TensorPages, page)
			r.TensorMembers = append(r.TensorMembers, names)
		}
		mla := members[0].lp.Kind == model.MLA
		var kRegion, vRegion int
		if layout == SplitKV && !mla && members[0].lp.Kind.IsAttention() {
			half := page / 2
			kRegion = len(r.Regions)
			r.Regions = append(r.Regions, Region{Index: kRegion, Tensor: ti, Half: SegK, Base: base, BlockLen: half, NumBlocks: p.NumBlocks})
			vRegion = len(r.Regions)
			r.Regions = append(r.Regions, Region{Index: vRegion, Tensor: ti, Half: SegV, Base: base + uint64(half*p.NumBlocks), BlockLen: half, NumBlocks: p.NumBlocks})
		} else {
			kRegion = len(r.Regions)
			vRegion = kRegion
			r.Regions = append(r.Regions, Region{Index: kRegion, Tensor: ti, Base: base, BlockLen: page, NumBlocks: p.NumBlocks})
		}
		size := uint64(page * p.NumBlocks)
		offset += (size + (2<<20 - 1)) &^ (2<<20 - 1)
		for _, mb := range members {
			l, ok := layersByName[mb.lp.Name]
			if !ok {
				return nil, fmt.Errorf("xfer: the plan's layer %s is not in model %s", mb.lp.Name, m.Name)
			}
			start := len(slab)
			var err error
			if slab, err = segments(slab, l, &mb.lp.Spec, tp, rank, layout, kRegion, vRegion); err != nil {
				return nil, err
			}
			if !shared {
				r.byName[mb.lp.Name] = len(r.Layers)
			}
			r.Layers = append(r.Layers, LayerReg{
				Name: mb.lp.Name, Kind: mb.lp.Kind, Group: mb.group, Slot: mb.lp.Slot, Tensor: ti,
				BlockSize: mb.lp.Block, Window: l.Window, Chunk: l.Chunk, Segments: slab[start:len(slab):len(slab)], kvHeads: l.KVHeads,
			})
		}
	}
	r.slab, r.modelIdx = slab, layersByName
	return r, nil
}

// emptied is s emptied when it has room for n elements, else a new empty
// slice with room for n (plan's reuse, by contrast, returns n zeroed).
func emptied[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:0]
	}
	return make([]T, 0, n)
}

// Layer finds a layer's registration.
func (r *Registration) Layer(name string) (*LayerReg, bool) {
	i, ok := r.byName[name]
	if !ok {
		return nil, false
	}
	return &r.Layers[i], true
}

// Plan is the plan the registration was built from.
func (r *Registration) Plan() *plan.Plan { return r.plan }

// HeadRange is the global KV heads a rank holds: an even share when the TP
// size does not exceed the heads, else one head replicated on TP/heads ranks.
func HeadRange(kvHeads, tp, rank int) (lo, hi int) {
	if kvHeads >= tp {
		n := kvHeads / tp
		return rank * n, rank*n + n
	}
	h := rank * kvHeads / tp
	return h, h + 1
}

// shard is the global channel range of an evenly sharded dimension.
func shard(total, tp, rank int) (lo, hi int) {
	n := total / tp
	return rank * n, rank*n + n
}

// segments lays out one layer's page on one rank.
func segments(dst []Segment, l *model.Layer, s *kvspec.Spec, tp, rank int, layout CacheLayout, kRegion, vRegion int) ([]Segment, error) {
	switch {
	case l.Kind == model.MLA:
		row := int64(s.HeadSize * s.DTypeBytes)
		return append(dst, Segment{Name: SegLatent, Region: kRegion, Lo: 0, Hi: 1, IndexBytes: int64(s.BlockSize) * row, Rows: s.BlockSize, RowBytes: row}), nil
	case l.Kind.IsAttention() && s.HeadSizeV != s.HeadSize:
		// vLLM serves such layers with its DiffKV attention backend, whose
		// cache layout kvscope has not read.
		return dst, fmt.Errorf("xfer: layer %s: K heads of %d and V heads of %d: vLLM keeps K and V of different sizes in its DiffKV backend's layout, which kvscope's descriptor geometry does not model", l.Name, s.HeadSize, s.HeadSizeV)
	case l.Kind.IsAttention():
		lo, hi := HeadRange(l.KVHeads, tp, rank)
		kRow := int64(s.HeadSize * s.DTypeBytes)
		vRow := int64(s.HeadSizeV * s.DTypeBytes)
		k := Segment{Name: SegK, Region: kRegion, Lo: lo, Hi: hi, IndexBytes: int64(s.BlockSize) * kRow, Rows: s.BlockSize, RowBytes: kRow}
		v := Segment{Name: SegV, Region: vRegion, Lo: lo, Hi: hi, IndexBytes: int64(s.BlockSize) * vRow, Rows: s.BlockSize, RowBytes: vRow}
		if layout == BlocksFirst {
			v.Offset = k.Bytes()
		}
		return append(dst, k, v), nil
	case l.Kind.IsState():
		return stateSegments(dst, l, s, tp, rank, kRegion)
	}
	return dst, fmt.Errorf("xfer: layer %s: no layout for kind %s", l.Name, l.Kind)
}

// stateSegments lays out a Mamba/GDN/KDA state page: the conv state in vLLM's DS
// layout (channel-major, one channel's rows contiguous), split into its
// sub-projections, then the SSM state (head-major).
func stateSegments(dst []Segment, l *model.Layer, s *kvspec.Spec, tp, rank, region int) ([]Segment, error) {
	st := l.State
	rows := s.Shapes[0][0]
	conv := int64(rows * s.StateDTypeBytes[0])
	ssmBytes := int64(s.StateDTypeBytes[1])
	type part struct {
		name   SegName
		lo, hi int
	}
	var parts [3]part
	n := 0
	var ssm Segment
	switch l.Kind {
	case model.GatedDeltaNet:
		qlo, qhi := shard(st.KeyHeads*st.KeyHeadDim, tp, rank)
		vlo, vhi := shard(st.ValueHeads*st.ValueHeadDim, tp, rank)
		parts, n = [3]part{{SegConvQ, qlo, qhi}, {SegConvK, qlo, qhi}, {SegConvV, vlo, vhi}}, 3
		hlo, hhi := shard(st.ValueHeads, tp, rank)
		ssm = Segment{Name: SegSSM, Lo: hlo, Hi: hhi, IndexBytes: int64(st.ValueHeadDim*st.KeyHeadDim) * ssmBytes}
	case model.KDA:
		// q, k and v conv states, each heads*head_dim channels sharded by
		// rank, then the recurrent state, head-major (kvspec.StateShapes).
		lo, hi := shard(st.Heads*st.HeadDim, tp, rank)
		parts, n = [3]part{{SegConvQ, lo, hi}, {SegConvK, lo, hi}, {SegConvV, lo, hi}}, 3
		hlo, hhi := shard(st.Heads, tp, rank)
		ssm = Segment{Name: SegSSM, Lo: hlo, Hi: hhi, IndexBytes: int64(st.HeadDim*st.HeadDim) * ssmBytes}
	case model.Mamba2:
		xlo, xhi := shard(st.Intermediate, tp, rank)
		blo, bhi := shard(st.Groups*st.StateSize, tp, rank)
		if st.Groups%tp != 0 { // one group, replicated on every rank
			blo, bhi = 0, st.StateSize
		}
		parts, n = [3]part{{SegConvX, xlo, xhi}, {SegConvB, blo, bhi}, {SegConvC, blo, bhi}}, 3
		hlo, hhi := shard(st.Heads, tp, rank)
		ssm = Segment{Name: SegSSM, Lo: hlo, Hi: hhi, IndexBytes: int64(st.HeadDim*st.StateSize) * ssmBytes}
	case model.Mamba1:
		xlo, xhi := shard(st.Intermediate, tp, rank)
		parts[0], n = part{SegConvX, xlo, xhi}, 1
		ssm = Segment{Name: SegSSM, Lo: xlo, Hi: xhi, IndexBytes: int64(st.StateSize) * ssmBytes}
	}
	var off int64
	for _, p := range parts[:n] {
		seg := Segment{Name: p.name, Region: region, Offset: off, Lo: p.lo, Hi: p.hi, IndexBytes: conv, Rows: 1, RowBytes: conv}
		off += seg.Bytes()
		dst = append(dst, seg)
	}
	ssm.Region, ssm.Offset, ssm.Rows, ssm.RowBytes = region, off, 1, ssm.IndexBytes
	off += ssm.Bytes()
	dst = append(dst, ssm)
	if off != s.RealPageBytes() {
		return dst, fmt.Errorf("xfer: layer %s: state segments take %d B, the spec's page is %d B", l.Name, off, s.RealPageBytes())
	}
	return dst, nil
}

// Addr is the virtual address of a location in this rank's regions.
func (r *Registration) Addr(l Loc) uint64 { return r.Regions[l.Region].Base + uint64(l.Offset) }
