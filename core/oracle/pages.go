package oracle

import (
	"context"
	"fmt"
	"slices"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/xfer"
)

// This file holds a check's tables (which group and layer own each block,
// which pages are in play) and the materialisation of an agent's pages for
// a Prover.

type run struct {
	ctx     context.Context // nil: never stopped
	mem     Memory          // an agent's memory, or nil for pages of the run's own
	skipP   bool            // P's blocks live in another agent
	skipD   bool            // only P's blocks are prepared here
	m       *model.Model
	x       *xfer.Transfer
	layerID map[string]uint64
	p, d    []pageTable // per rank: the pages in play, numbered
	dPages  [][]byte    // a Prover's D pages, by number
	pOwn    owners      // which group and page each block serves on P (ids are per side)
	dOwn    owners
	pLayers []layerTable // per rank: the layer of each tensor and group
	dLayers []layerTable
	total   int64
	expect  []byte // the rows D's are compared with
	keys    []pageKey
	row     []byte // one row of P's (for a range that cuts a row)
}

// pageKey is one block of one region.
type pageKey struct {
	region int
	block  int
}

// pageTable numbers one rank's pages: in a slice indexed by region and
// block for the blocks the request's groups use (ids below width), in a
// map for any other block a pair names.
type pageTable struct {
	width int     // block ids below width are dense
	dense []int32 // region*width + block -> page number + 1, 0 for none
	more  map[pageKey]int32
}

func newPageTable(regions, width int) pageTable {
	return pageTable{width: width, dense: make([]int32, regions*width)}
}

func (t *pageTable) slot(k pageKey) int {
	if k.block >= 0 && k.block < t.width && k.region >= 0 && k.region*t.width < len(t.dense) {
		return k.region*t.width + k.block
	}
	return -1
}

// get is a page's number, or false when it has none.
func (t *pageTable) get(k pageKey) (int, bool) {
	var v int32
	if i := t.slot(k); i >= 0 {
		v = t.dense[i]
	} else {
		v = t.more[k]
	}
	return int(v) - 1, v > 0
}

// put numbers a page.
func (t *pageTable) put(k pageKey, n int) {
	if i := t.slot(k); i >= 0 {
		t.dense[i] = int32(n + 1)
		return
	}
	if t.more == nil {
		t.more = map[pageKey]int32{}
	}
	t.more[k] = int32(n + 1)
}

// keys lists the numbered pages by region, then block, in out's memory.
func (t *pageTable) keys(out []pageKey) []pageKey {
	out = out[:0]
	for i, v := range t.dense {
		if v > 0 {
			out = append(out, pageKey{i / t.width, i % t.width})
		}
	}
	if len(t.more) == 0 {
		return out
	}
	for k := range t.more {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b pageKey) int {
		if a.region != b.region {
			return a.region - b.region
		}
		return a.block - b.block
	})
	return out
}

// owner is which group (and page of the request) a block serves on a side.
type owner struct {
	group int // -1: none
	page  int
}

// owners maps a side's block ids to their owners, densely: ids come from
// one allocator per side.
type owners []owner

func newOwners(groups []xfer.Pages) owners {
	width := 0
	for _, pg := range groups {
		for _, id := range pg.IDs {
			width = max(width, id+1)
		}
	}
	out := make(owners, width)
	for i := range out {
		out[i].group = -1
	}
	for g, pg := range groups {
		for i, id := range pg.IDs {
			if id >= 0 {
				out[id] = owner{g, pg.First + i}
			}
		}
	}
	return out
}

func (o owners) of(block int) (owner, bool) {
	if block < 0 || block >= len(o) || o[block].group < 0 {
		return owner{}, false
	}
	return o[block], true
}

// layerAt is the layer a tensor holds for a group, with its tag id.
type layerAt struct {
	l   *xfer.LayerReg // nil for a padding slot
	lid uint64
}

// layerTable is one rank's layers by tensor and group.
type layerTable struct {
	groups int
	at     []layerAt // tensor*groups + group
}

func (o *run) newLayerTable(reg *xfer.Registration) layerTable {
	t := layerTable{}
	if len(reg.TensorMembers) > 0 {
		t.groups = len(reg.TensorMembers[0])
	}
	t.at = make([]layerAt, len(reg.TensorMembers)*t.groups)
	for ti, names := range reg.TensorMembers {
		for g, name := range names {
			if l, ok := reg.Layer(name); ok && g < t.groups {
				t.at[ti*t.groups+g] = layerAt{l, o.layerID[l.Name]}
			}
		}
	}
	return t
}

// layer is the layer that owns a block of a region on its rank, or nil.
func (t layerTable) layer(reg *xfer.Registration, region int, own owner) layerAt {
	return t.at[reg.Regions[region].Tensor*t.groups+own.group]
}

// tables builds the owner and layer tables of both sides and empty page
// tables.
func (o *run) tables() {
	x := o.x
	o.pOwn, o.dOwn = newOwners(x.PPages), newOwners(x.DPages)
	o.p = make([]pageTable, len(x.PRegs))
	o.d = make([]pageTable, len(x.DRegs))
	o.pLayers = make([]layerTable, len(x.PRegs))
	o.dLayers = make([]layerTable, len(x.DRegs))
	for i, reg := range x.PRegs {
		o.p[i] = newPageTable(len(reg.Regions), len(o.pOwn))
		o.pLayers[i] = o.newLayerTable(reg)
	}
	for i, reg := range x.DRegs {
		o.d[i] = newPageTable(len(reg.Regions), len(o.dOwn))
		o.dLayers[i] = o.newLayerTable(reg)
	}
}

// number numbers every page in play, per side, in the order it first
// comes up: every page a pair reads (P) or writes (D), then every page D
// allocated for the request. added sees each new page once, numbered n;
// each, when not nil, each pair once its pages are numbered.
func (o *run) number(added func(reg *xfer.Registration, k pageKey, isP bool, n int) error, each func(rp *xfer.RankPair, p *xfer.Pair)) error {
	x := o.x
	var pCount, dCount int
	add := func(reg *xfer.Registration, pages *pageTable, k pageKey, isP bool) error {
		if _, ok := pages.get(k); ok {
			return nil
		}
		count := &dCount
		if isP {
			count = &pCount
		}
		n := *count
		*count++
		pages.put(k, n)
		return added(reg, k, isP, n)
	}
	// touch adds the pages a byte range spans.
	touch := func(reg *xfer.Registration, pages *pageTable, at xfer.Loc, n int64, isP bool) error {
		if at.Region < 0 || at.Region >= len(reg.Regions) || at.Offset < 0 || n <= 0 {
			return nil // the replay reports it
		}
		bl := reg.Regions[at.Region].BlockLen
		for b := at.Offset / bl; b*bl < at.Offset+n; b++ {
			if err := add(reg, pages, pageKey{at.Region, int(b)}, isP); err != nil {
				return err
			}
		}
		return nil
	}
	for ri := range x.RankPairs {
		rp := &x.RankPairs[ri]
		for i := range rp.Pairs {
			if i%256 == 0 {
				if err := o.stopped(); err != nil {
					return err
				}
			}
			p := &rp.Pairs[i]
			if !o.skipP {
				if err := touch(x.PRegs[rp.P], &o.p[rp.P], p.Src, p.Len, true); err != nil {
					return err
				}
			}
			if !o.skipD {
				if err := touch(x.DRegs[rp.D], &o.d[rp.D], p.Dst, p.Len, false); err != nil {
					return err
				}
			}
			if each != nil {
				each(rp, p)
			}
		}
	}
	if o.skipD {
		return nil
	}
	for j, reg := range x.DRegs {
		for _, l := range reg.Layers {
			if err := o.stopped(); err != nil {
				return err
			}
			for _, s := range l.Segments {
				for _, id := range x.DPages[l.Group].IDs {
					if err := add(reg, &o.d[j], pageKey{s.Region, id}, false); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// bound counts a page's bytes against MaxBytes.
func (o *run) bound(bl int64) error {
	o.total += bl
	if o.total > MaxBytes {
		return fmt.Errorf("oracle: the request touches more than %d MiB of pages; use a shorter --prompt-tokens", MaxBytes>>20)
	}
	return nil
}

// materialise finds every page in play in the agent's memory (or makes it,
// without one) and fills it: P's with tags, D's with the sentinel.
func (o *run) materialise() error {
	o.tables()
	return o.number(func(reg *xfer.Registration, k pageKey, isP bool, _ int) error {
		bl := reg.Regions[k.region].BlockLen
		var page []byte
		if o.mem != nil {
			if page = o.mem.Block(reg.Side, reg.Rank, k.region, k.block); int64(len(page)) != bl {
				return fmt.Errorf("oracle: %s rank %d region %d block %d is not in the agent's memory", reg.Side, reg.Rank, k.region, k.block)
			}
		} else {
			if err := o.bound(bl); err != nil {
				return err
			}
			page = make([]byte, bl)
		}
		if isP {
			o.pBytes(reg, k, 0, page)
		} else {
			fill(page, Sentinel)
			o.dPages = append(o.dPages, page)
		}
		return nil
	}, nil)
}

// fill sets every byte of b to v, doubling the filled prefix each step.
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for i := 1; i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
}
