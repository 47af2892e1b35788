package xfer

import (
	"fmt"
	"slices"

	"github.com/kvscope/kvscope/core/model"
)

// This file is vLLM's own path for matched plans (worker.py and
// transfer_plan.py at commit 0016029b): per-group block ids, clipped for
// sliding windows and trimmed to D's unhit suffix, flattened over
// attention groups and broadcast over every region; descriptor id =
// region*num_blocks + block, state descriptors after all attention ones.

// vllmGroupPages lists each group's pages the way vLLM's scheduler and
// worker do: P's pages for the tokens it computed (sliding windows clipped
// to their last ceil(W/block)+1, one block for state); D's pages that are
// not prefix-cache hits, clipped the same way; P's list trimmed to the
// suffix D asks for.
func (t *Transfer) vllmGroupPages(opt Options) error {
	pp, dp := t.PRegs[0].plan, t.DRegs[0].plan
	loaded := t.PComputed // D loads what P computed (N, or N-1 with state)
	var pa, da allocator
	for gi, g := range dp.Groups {
		pg := pp.Groups[gi]
		bs := g.BlockSize
		total := ceilDiv(loaded, bs)
		var pFirst, dFirst int
		pCount, dCount := total, total-t.Request.PrefixHitTokens/bs
		switch {
		case g.Kind.IsState():
			pFirst, dFirst, pCount, dCount = 0, 0, 1, 1
		case g.Kind == model.Sliding:
			reg, _ := t.DRegs[0].Layer(g.Layers[0])
			keep := ceilDiv(reg.Window, bs) + 1
			pCount = min(pCount, keep)
			dCount = min(dCount, keep)
		}
		pCount = min(pCount, dCount) // remote trimmed to the local suffix
		if !g.Kind.IsState() {
			pFirst, dFirst = total-pCount, total-dCount
		}
		t.PPages = append(t.PPages, Pages{BlockSize: pg.BlockSize, First: pFirst, IDs: pick(opt, P, gi, pa.take(pCount))})
		t.DPages = append(t.DPages, Pages{BlockSize: bs, First: dFirst, IDs: pick(opt, D, gi, da.take(dCount))})
	}
	return nil
}

// pick returns the override block ids for a group when the options give
// them, else the allocated ones.
func pick(opt Options, side Side, group int, ids []int) []int {
	if o := opt.Blocks[side]; group < len(o) && len(o[group]) == len(ids) {
		return append([]int(nil), o[group]...)
	}
	return ids
}

// vregion is one of vLLM's virtual attention regions: a physical region,
// or the K or V half of a blocks-first one.
type vregion struct {
	phys int
	half int // 0: K (or whole), 1: V half of a blocks-first block
	seg  SegName
}

func vregions(r *Registration) []vregion {
	var out []vregion
	for _, reg := range r.Regions {
		if !tensorIsAttention(r, reg.Tensor) {
			continue
		}
		switch {
		case r.Layout == BlocksFirst && !tensorIsMLA(r, reg.Tensor):
			out = append(out, vregion{reg.Index, 0, SegK}, vregion{reg.Index, 1, SegV})
		case reg.Half != "":
			out = append(out, vregion{reg.Index, 0, reg.Half})
		default:
			out = append(out, vregion{reg.Index, 0, SegLatent})
		}
	}
	return out
}

// stateRegions are vLLM's SSM sub-regions: every physical region times the
// state layout's sub-projections (conv parts, then the SSM state).
type sregion struct {
	phys int
	sub  int
}

func stateRegions(r *Registration) ([]sregion, int) {
	subs := 0
	for _, l := range r.Layers {
		if l.Kind.IsState() {
			subs = len(l.Segments)
			break
		}
	}
	if subs == 0 {
		return nil, 0
	}
	var out []sregion
	for _, reg := range r.Regions {
		for k := 0; k < subs; k++ {
			out = append(out, sregion{reg.Index, k})
		}
	}
	return out, subs
}

// stateTemplate is a rank's state page layout (every state layer of a rank
// has the same); vLLM's state sub-descriptors use it for every slot, padding
// slots included.
func stateTemplate(r *Registration) []Segment {
	for _, l := range r.Layers {
		if l.Kind.IsState() {
			return l.Segments
		}
	}
	return nil
}

func tensorIsAttention(r *Registration, tensor int) bool {
	for _, name := range r.TensorMembers[tensor] {
		if l, ok := r.Layer(name); ok && l.Kind.IsAttention() {
			return true
		}
	}
	return r.Layout == BlocksFirst // a pure-state tensor still has virtual attention halves in vLLM's count
}

func tensorIsMLA(r *Registration, tensor int) bool {
	for _, name := range r.TensorMembers[tensor] {
		if l, ok := r.Layer(name); ok {
			return l.Kind == model.MLA
		}
	}
	return false
}

// vllmPath builds vLLM's descriptor pairs for matched plans.
func (t *Transfer) vllmPath(opt Options) error {
	if err := t.vllmGroupPages(opt); err != nil {
		return err
	}
	pTP, dTP := len(t.PRegs), len(t.DRegs)
	kv, _ := modelKVHeads(t.model)
	mla := t.model.HasKind(model.MLA)
	rps := t.newRankPairs()
	for j, dReg := range t.DRegs {
		amp := newVLLMMapping(kv, pTP, dTP, j, mla)
		smp := stateMapping(pTP, dTP, j)
		dv := vregions(dReg)
		ds, _ := stateRegions(dReg)
		pv := vregions(t.PRegs[0])
		if len(pv) != len(dv) {
			return fmt.Errorf("xfer: vLLM path: P has %d attention regions, D %d", len(pv), len(dv))
		}
		// One READ per source rank; the pairs are vLLM's id lists in order.
		sources := amp.Ranks
		if len(smp.Ranks) > len(sources) {
			sources = smp.Ranks
		}
		for _, src := range sources {
			if err := canceled(opt.Ctx); err != nil {
				return err
			}
			rp := rps.get(src, j)
			count := t.vllmCount(dReg, len(dv), len(ds), slices.Contains(amp.Ranks, src), slices.Contains(smp.Ranks, src))
			switch opt.Output {
			case CountPairs:
				rp.Descs = count
				continue
			case KeepPairs:
				rp.Pairs = make([]Pair, 0, count)
			default:
				rp.Pairs = make([]Pair, 0, min(count, 2*foldAt)) // tallied as they come (foldPairs)
			}
			pReg := t.PRegs[src]
			emitAttn := func(group int) error {
				slotA := slices.Index(amp.Ranks, src)
				if slotA < 0 {
					return nil
				}
				for vi, v := range dv {
					if err := canceled(opt.Ctx); err != nil {
						return err
					}
					if err := t.foldPairs(opt, rp); err != nil {
						return err
					}
					for pi, dBlock := range t.DPages[group].IDs {
						pBlock := t.PPages[group].IDs[pi]
						page := t.DPages[group].First + pi
						rp.Pairs = append(rp.Pairs, t.attnPair(dReg, pReg, v, pv[vi], vi, group, dBlock, pBlock, page, amp, slotA))
					}
				}
				return nil
			}
			emitState := func(group int) {
				slotS := slices.Index(smp.Ranks, src)
				if slotS < 0 {
					return
				}
				nFA := len(dv)
				for si, s := range ds {
					dBlock, pBlock := t.DPages[group].IDs[0], t.PPages[group].IDs[0]
					rp.Pairs = append(rp.Pairs, t.statePair(dReg, pReg, s, si, nFA, group, dBlock, pBlock, smp, slotS))
				}
			}
			hasState := len(ds) > 0
			if !hasState {
				// All attention: flatten the groups' ids, broadcast over regions.
				slotA := slices.Index(amp.Ranks, src)
				if slotA < 0 {
					continue
				}
				for vi, v := range dv {
					if err := canceled(opt.Ctx); err != nil {
						return err
					}
					if err := t.foldPairs(opt, rp); err != nil {
						return err
					}
					for g := range t.DPages {
						for pi, dBlock := range t.DPages[g].IDs {
							pBlock := t.PPages[g].IDs[pi]
							page := t.DPages[g].First + pi
							rp.Pairs = append(rp.Pairs, t.attnPair(dReg, pReg, v, pv[vi], vi, g, dBlock, pBlock, page, amp, slotA))
						}
					}
				}
				continue
			}
			for g, grp := range dReg.plan.Groups {
				if grp.Kind.IsState() {
					emitState(g)
				} else if err := emitAttn(g); err != nil {
					return err
				}
			}
			if err := canceled(opt.Ctx); err != nil {
				return err
			}
		}
	}
	rps.store()
	return nil
}

// vllmCount is how many pairs vLLM's path lists for one source rank of one
// D rank: every attention region times every page of every attention group
// (when the rank supplies attention), and every state sub-region per state
// group (when it supplies state).
func (t *Transfer) vllmCount(dReg *Registration, attnRegions, stateRegions int, attn, state bool) int {
	n := 0
	for g, grp := range dReg.plan.Groups {
		switch {
		case stateRegions == 0:
			if attn {
				n += attnRegions * len(t.DPages[g].IDs)
			}
		case grp.Kind.IsState():
			if state {
				n += stateRegions
			}
		case attn:
			n += attnRegions * len(t.DPages[g].IDs)
		}
	}
	return n
}

// attnPair is one attention descriptor pair on vLLM's path: D's local
// descriptor vr*NB+b (split by the source slot when P > D) and P's remote
// descriptor at the rank offset.
func (t *Transfer) attnPair(dReg, pReg *Registration, dv, pv vregion, vi, group, dBlock, pBlock, page int, mp vllmMapping, slot int) Pair {
	dr, pr := dReg.Regions[dv.phys], pReg.Regions[pv.phys]
	dKV, pKV := dr.BlockLen, pr.BlockLen
	if dReg.Layout == BlocksFirst && dv.seg != SegLatent {
		dKV, pKV = dKV/2, pKV/2
	}
	dOff := int64(dBlock)*dr.BlockLen + int64(dv.half)*dKV
	pOff := int64(pBlock)*pr.BlockLen + int64(pv.half)*pKV
	n := int64(mp.NumReads)
	length := dKV / n
	if mp.TPRatio > 0 || mp.MLA {
		pOff += int64(mp.Factor) * dKV
	} else {
		dOff += int64(slot) * dKV / n
	}
	layer := dReg.TensorMembers[dr.Tensor][group]
	p := Pair{
		Src: Loc{pr.Index, pOff}, Dst: Loc{dr.Index, dOff}, Len: length,
		SrcID: vi*int(pReg.NumBlocks) + pBlock, DstID: vi*int(dReg.NumBlocks) + dBlock,
		Layer: layer, Seg: dv.seg, PGroup: group, DGroup: group,
		Tokens: Span{page * t.DPages[group].BlockSize, (page + 1) * t.DPages[group].BlockSize},
	}
	if l, ok := dReg.Layer(layer); ok {
		seg := l.Segments[0]
		p.Lo, p.Hi = seg.Lo, seg.Hi
		if mp.TPRatio < 0 && !mp.MLA {
			pl, _ := pReg.Layer(layer)
			p.Lo, p.Hi = pl.Segments[0].Lo, pl.Segments[0].Hi
		}
	}
	return p
}

// statePair is one state sub-descriptor pair on vLLM's path.
func (t *Transfer) statePair(dReg, pReg *Registration, s sregion, si, nFA, group, dBlock, pBlock int, mp vllmMapping, slot int) Pair {
	dr, pr := dReg.Regions[s.phys], pReg.Regions[s.phys]
	layer := dReg.TensorMembers[dr.Tensor][group]
	dSeg, pSeg := stateTemplate(dReg)[s.sub], stateTemplate(pReg)[s.sub]
	dOff := int64(dBlock)*dr.BlockLen + dSeg.Offset
	pOff := int64(pBlock)*pr.BlockLen + pSeg.Offset
	length := dSeg.Bytes()
	lo, hi := dSeg.Lo, dSeg.Hi
	if mp.TPRatio > 0 {
		pOff += int64(mp.Factor) * length
	} else {
		n := int64(mp.NumReads)
		length /= n
		dOff += int64(slot) * length
		lo, hi = pSeg.Lo, pSeg.Hi
	}
	return Pair{
		Src: Loc{pr.Index, pOff}, Dst: Loc{dr.Index, dOff}, Len: length,
		SrcID: nFA*int(pReg.NumBlocks) + si*int(pReg.NumBlocks) + pBlock,
		DstID: nFA*int(dReg.NumBlocks) + si*int(dReg.NumBlocks) + dBlock,
		Layer: layer, Seg: dSeg.Name, Lo: lo, Hi: hi, PGroup: group, DGroup: group,
	}
}
