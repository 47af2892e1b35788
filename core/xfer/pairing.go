package xfer

import (
	"cmp"
	"fmt"
	"slices"
)

// pairing is what the group-pair path needs of two sides' registrations
// whatever the request: D's layers in the order their pairs are written
// (by P group, D group, then D's order), every rank's registration of
// each, which layers share token runs (one set per P group, D group and
// block sizes), and the jobs: each D rank's layer segments split into runs
// of the P ranks that supply them, with the rank pairs in first use. A
// prepared deployment makes it once for all its requests; it is read only.
type pairing struct {
	items            []gpItem
	pLayers, dLayers []*LayerReg // [rank*len(items) + item]
	setOf            []int       // per item: its set of token runs, -1 for a state layer
	setItem          []int       // per set: its first item
	jobs             []gpJob     // nil when made for counting only
	order            [][2]int    // (P rank, D rank) in first use, with the jobs
	jobsOf           [][]int32   // per rank pair (P rank * D's TP + D rank): its jobs in order, with the jobs
}

// newPairing makes the pairing of two sides' registrations; withJobs says
// whether to list the jobs (counting alone walks them instead: eachRun).
func newPairing(pRegs, dRegs []*Registration, withJobs bool) (*pairing, error) {
	p := &pairing{items: make([]gpItem, 0, len(dRegs[0].Layers))}
	for _, dl := range dRegs[0].Layers {
		pl, _ := pRegs[0].Layer(dl.Name)
		p.items = append(p.items, gpItem{dl.Name, pl.Group, dl.Group})
	}
	slices.SortStableFunc(p.items, func(a, b gpItem) int { return cmp.Or(cmp.Compare(a.pg, b.pg), cmp.Compare(a.dg, b.dg)) })
	nItems, pTP, dTP := len(p.items), len(pRegs), len(dRegs)
	p.pLayers = make([]*LayerReg, pTP*nItems)
	p.dLayers = make([]*LayerReg, dTP*nItems)
	for i, it := range p.items {
		for r, reg := range pRegs {
			p.pLayers[r*nItems+i], _ = reg.Layer(it.name)
		}
		for j, reg := range dRegs {
			p.dLayers[j*nItems+i], _ = reg.Layer(it.name)
		}
	}
	// Consecutive attention layers of one (P group, D group) and block
	// sizes share their token runs: the same pages and D's span.
	p.setOf = make([]int, nItems)
	for i, it := range p.items {
		p.setOf[i] = -1
		pl, dl := p.pLayers[i], p.dLayers[i]
		if dl.Kind.IsState() {
			continue
		}
		if n := len(p.setItem); n > 0 && i > 0 && p.setOf[i-1] == n-1 && p.items[i-1].pg == it.pg && p.items[i-1].dg == it.dg &&
			p.pLayers[i-1].BlockSize == pl.BlockSize && p.dLayers[i-1].BlockSize == dl.BlockSize {
			p.setOf[i] = n - 1
			continue
		}
		p.setOf[i] = len(p.setItem)
		p.setItem = append(p.setItem, i)
	}
	if !withJobs {
		return p, nil
	}
	// A job per P rank that supplies a D rank's layer segment: one each
	// where D's TP is a multiple of P's, P/D where P's is of D's (others
	// grow).
	segs := 0
	for i := range p.items {
		segs += len(p.dLayers[i].Segments)
	}
	p.jobs = make([]gpJob, 0, segs*dTP*max(1, pTP/dTP))
	var err error
	if p.order, err = p.eachRun(pTP, dTP, func(j, i, si int, _ *Segment, run indexRun) {
		p.jobs = append(p.jobs, gpJob{d: j, item: i, seg: si, run: run})
	}); err != nil {
		return nil, err
	}
	for ji := range p.jobs {
		jb := &p.jobs[ji]
		pl, dl := p.pLayers[jb.run.Rank*nItems+jb.item], p.dLayers[jb.d*nItems+jb.item]
		ps, ds := &pl.Segments[jb.seg], &dl.Segments[jb.seg]
		jb.at = placeJob(p.items[jb.item], string(dl.Kind), ps, ds, &pRegs[jb.run.Rank].Regions[ps.Region], &dRegs[jb.d].Regions[ds.Region], jb.run)
	}
	p.jobsOf = make([][]int32, pTP*dTP)
	for ji := range p.jobs {
		k := p.jobs[ji].run.Rank*dTP + p.jobs[ji].d
		p.jobsOf[k] = append(p.jobsOf[k], int32(ji))
	}
	return p, nil
}

// eachRun calls fn with every D rank's layer segment's runs of the P ranks
// that supply them, in the order pairs are written: by D rank, then layer
// (items), segment and run; it returns the rank pairs (P rank, D rank)
// those runs make, in first use.
func (p *pairing) eachRun(pTP, dTP int, fn func(j, i, si int, ds *Segment, run indexRun)) ([][2]int, error) {
	nItems := len(p.items)
	var runs []indexRun
	var order [][2]int
	for j := range dTP {
		for i := range p.items {
			dl := p.dLayers[j*nItems+i]
			for si := range dl.Segments {
				ds := &dl.Segments[si]
				pSeg := func(r int) Segment { return p.pLayers[r*nItems+i].Segments[si] }
				var err error
				if runs, err = appendIndexRuns(runs[:0], *ds, pSeg, pTP, dTP, j); err != nil {
					return nil, fmt.Errorf("xfer: layer %s %s on D rank %d: %w", p.items[i].name, ds.Name, j, err)
				}
				for _, run := range runs {
					if !slices.Contains(order, [2]int{run.Rank, j}) {
						order = append(order, [2]int{run.Rank, j})
					}
					fn(j, i, si, ds, run)
				}
			}
		}
	}
	return order, nil
}

// gpItem is one D layer on the group-pair path: its name and the P and D
// groups it moves between.
type gpItem struct {
	name   string
	pg, dg int
}

// gpJob is one run of indices of one segment of one layer that one P rank
// supplies to one D rank: the unit the group-pair path writes pairs for.
type gpJob struct {
	d, item, seg int
	run          indexRun
	at           jobPlace // set once the jobs are listed
}

// jobPlace is what writing one job's pairs reads of both sides'
// registrations, gathered into the job once, so that a request's writer
// chases no pointers into the layers (after megabytes of pairs, each such
// read misses the cache).
type jobPlace struct {
	f        jobFields
	kind     string // the D layer's kind (the group pairs' tally)
	attn     bool   // an attention segment
	pAt, dAt int64  // the run's first head (or channel) in a block on each side
	shape    shape
}

// placeJob gathers what writing the pairs of item it's segment ps (on P,
// ds on D, in regions pr and dr) for run needs; kind is D's layer kind.
func placeJob(it gpItem, kind string, ps, ds *Segment, pr, dr *Region, run indexRun) jobPlace {
	return jobPlace{
		f:    it.fields(pr.Index, dr.Index, ds.Name, run),
		kind: kind, attn: ds.IsAttention(),
		pAt: ps.Offset + int64(run.Lo-ps.Lo)*ps.IndexBytes,
		dAt: ds.Offset + int64(run.Lo-ds.Lo)*ds.IndexBytes,
		shape: shape{
			pLen: pr.BlockLen, pRowB: ps.RowBytes, pIdxB: ps.IndexBytes,
			dLen: dr.BlockLen, dRowB: ds.RowBytes, dIdxB: ds.IndexBytes,
			heads: int64(run.Hi - run.Lo), latent: ds.Name == SegLatent,
		},
	}
}

// jobFields are the fields every pair of one job shares: the regions, the
// layer and segment, the heads (or channels) and the groups.
type jobFields struct {
	pIdx, dIdx     int
	layer          string
	seg            SegName
	lo, hi, pg, dg int
}

// fields are the fields the pairs of a job of it share: regions pIdx and
// dIdx, segment seg, the run's heads or channels.
func (it gpItem) fields(pIdx, dIdx int, seg SegName, run indexRun) jobFields {
	return jobFields{pIdx: pIdx, dIdx: dIdx, layer: it.name, seg: seg, lo: run.Lo, hi: run.Hi, pg: it.pg, dg: it.dg}
}
