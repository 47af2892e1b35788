package xfer

import (
	"fmt"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// TestPairsAreCountedFirst: both paths size every rank pair's slice to
// its exact number of pairs before writing them (BenchmarkPairs depends
// on it: nothing grows or is copied).
func TestPairsAreCountedFirst(t *testing.T) {
	seed := seedModel(t)
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	nemotron := modeltest.Load(t, "nvidia__NVIDIA-Nemotron-Nano-9B-v2")
	engine := func(tp, spec, block int) plan.Engine {
		return plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: tp, NumSpeculativeTokens: spec, BlockSize: block, MaxModelLen: 8192}
	}
	tests := []struct {
		name  string
		setup Setup
		path  Path
	}{
		{"group pairs of pages that do not divide, Qwen3.6 + DFlash TP2 to TP4", Setup{Model: seed, P: engine(2, 7, 0), D: engine(4, 7, 0), Plans: IndependentPlans}, GroupPairPath},
		{"group pairs of pages that divide, Qwen3.6 + DFlash TP4 to TP2", Setup{Model: seed, P: engine(4, 7, 0), D: engine(2, 7, 0), Plans: InvariantPlans}, GroupPairPath},
		{"group pairs with a sliding window, gpt-oss-20b block 16 to 48", Setup{Model: gpt, P: engine(1, 0, 16), D: engine(2, 0, 48), Plans: IndependentPlans}, GroupPairPath},
		{"vLLM's path with attention only, gpt-oss-20b TP2 to TP4", Setup{Model: gpt, P: engine(2, 0, 0), D: engine(4, 0, 0), Plans: InvariantPlans}, VLLMPath},
		{"vLLM's path with Mamba state, Nemotron TP4 to TP2", Setup{Model: nemotron, P: engine(4, 0, 0), D: engine(2, 0, 0), Plans: InvariantPlans}, VLLMPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.setup.Connector, _ = ParseConnector("nixl")
			r, err := Prepare(tt.setup)
			if err != nil {
				t.Fatal(err)
			}
			x, err := r.Compute(Request{PromptTokens: 1000, PrefixHitTokens: 96}, true)
			if err != nil || x.Rejection != nil {
				t.Fatal(err, x.Rejection)
			}
			if x.Path != tt.path {
				t.Fatalf("path %s, want %s", x.Path, tt.path)
			}
			for _, rp := range x.RankPairs {
				if len(rp.Pairs) == 0 || cap(rp.Pairs) != len(rp.Pairs) {
					t.Errorf("P %d -> D %d: %d pairs in a slice of capacity %d", rp.P, rp.D, len(rp.Pairs), cap(rp.Pairs))
				}
			}
		})
	}
}

// TestAttnPairsTally: an attention job's tally (descriptors, bytes,
// descriptors left after NIXL's merging), taken from its set's without
// writing a pair, equals a plain recount of the pairs attnPairs writes
// (MergedCount), job by job and joined across consecutive jobs of one rank
// pair: one head or several a run, whole pages or not, latent rows, and a
// job in another region (both sides', or P's alone) whose first pair
// starts at the offset where the last job's ended (it must not merge), and
// jobs that share a set's runs under different geometries.
func TestAttnPairsTally(t *testing.T) {
	// One head's block is 4 rows of 64 B; two pages of 4 rows on each side.
	whole := []tokenRun{
		{lo: 0, hi: 4, pBlock: 1, dBlock: 1, rows: 4, whole: true},
		{lo: 4, hi: 8, pBlock: 2, dBlock: 2, rows: 4, whole: true},
	}
	// P pages of 4 rows, D pages of 2: runs of 2 rows.
	split := []tokenRun{
		{lo: 0, hi: 2, pBlock: 1, dBlock: 1, pRow: 0, dRow: 0, rows: 2},
		{lo: 2, hi: 4, pBlock: 1, dBlock: 2, pRow: 2, dRow: 0, rows: 2},
		{lo: 4, hi: 6, pBlock: 2, dBlock: 3, pRow: 0, dRow: 0, rows: 2},
	}
	seg := func(name SegName, region, heads int) Segment {
		return Segment{Name: name, Region: region, Lo: 0, Hi: heads, IndexBytes: 256, Rows: 4, RowBytes: 64}
	}
	type job struct {
		name     string
		ps, ds   Segment
		pr, dr   Region
		run      indexRun
		runs     []tokenRun
		expected int // pairs
	}
	// A region whose block is one head's: whole pages of consecutive
	// blocks are contiguous, and so are heads in a page.
	one := Region{Index: 0, BlockLen: 256, NumBlocks: 8}
	other := Region{Index: 1, BlockLen: 256, NumBlocks: 8}
	two := Region{Index: 0, BlockLen: 512, NumBlocks: 8}
	for _, tc := range []struct {
		name string
		jobs []job
	}{
		{"one head, whole pages, then the next region at the same offset", []job{
			{"a", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, whole, 2},
			{"b", seg(SegK, 1, 1), seg(SegK, 1, 1), other, other, indexRun{0, 0, 1}, []tokenRun{{lo: 0, hi: 4, pBlock: 3, dBlock: 3, rows: 4, whole: true}}, 1},
		}},
		{"one head, whole pages, then the same region where the last ended", []job{
			{"a", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, whole, 2},
			{"b", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, []tokenRun{{lo: 8, hi: 12, pBlock: 3, dBlock: 3, rows: 4, whole: true}}, 1},
		}},
		{"one head, then from another P region where the last ended", []job{
			{"a", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, whole[:1], 1},
			{"b", seg(SegK, 1, 1), seg(SegK, 0, 1), other, one, indexRun{0, 0, 1}, whole[1:], 1},
		}},
		{"one head, P continuing but not D", []job{
			{"a", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, whole[:1], 1},
			{"b", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, []tokenRun{{lo: 4, hi: 8, pBlock: 2, dBlock: 3, rows: 4, whole: true}}, 1},
		}},
		{"one head, the same runs under two geometries", []job{
			{"a", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, split, 3},
			{"b", seg(SegK, 0, 1), seg(SegK, 0, 1), two, two, indexRun{0, 0, 1}, split, 3},
			{"c", seg(SegK, 0, 1), seg(SegK, 0, 1), one, one, indexRun{0, 0, 1}, split, 3},
		}},
		{"one head, the second of two, then the first where it ended: they merge", []job{
			{"a", seg(SegK, 0, 2), seg(SegK, 0, 2), two, two, indexRun{0, 1, 2}, []tokenRun{{lo: 0, hi: 4, pBlock: 1, dBlock: 1, rows: 4, whole: true}}, 1},
			{"b", seg(SegK, 0, 2), seg(SegK, 0, 2), two, two, indexRun{0, 0, 1}, []tokenRun{{lo: 4, hi: 8, pBlock: 2, dBlock: 2, rows: 4, whole: true}}, 1},
		}},
		{"one head, pages split", []job{
			{"a", seg(SegV, 0, 1), seg(SegV, 0, 1), one, one, indexRun{0, 0, 1}, split, 3},
		}},
		{"two heads, pages split, then whole", []job{
			{"a", seg(SegK, 0, 2), seg(SegK, 0, 2), two, two, indexRun{0, 0, 2}, split, 6},
			{"b", seg(SegK, 0, 2), seg(SegK, 0, 2), two, two, indexRun{0, 0, 2}, whole, 2},
		}},
		{"two heads, every row of a head's page but not whole pages: heads merge", []job{
			{"a", seg(SegK, 0, 2), seg(SegK, 0, 2), two, two, indexRun{0, 0, 2}, []tokenRun{{lo: 0, hi: 4, pBlock: 1, dBlock: 2, rows: 4}, {lo: 4, hi: 8, pBlock: 3, dBlock: 3, rows: 4}}, 4},
		}},
		{"latent, then from another P region where the last ended", []job{
			{"a", seg(SegLatent, 0, 1), seg(SegLatent, 0, 1), one, one, indexRun{0, 0, 1}, whole[:1], 1},
			{"b", seg(SegLatent, 1, 1), seg(SegLatent, 0, 1), other, one, indexRun{0, 0, 1}, whole[1:], 1},
		}},
		{"latent", []job{
			{"a", seg(SegLatent, 0, 1), seg(SegLatent, 0, 1), one, one, indexRun{0, 0, 1}, split, 3},
			{"b", seg(SegLatent, 0, 1), seg(SegLatent, 0, 1), one, one, indexRun{0, 0, 1}, whole, 2},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c tally
			var all []Pair
			sets := map[*tokenRun]*tokenRuns{} // jobs over the same runs share their set, as a layer's K and V do
			for _, j := range tc.jobs {
				set := sets[&j.runs[0]]
				if set == nil {
					set = &tokenRuns{runs: j.runs}
					for _, r := range j.runs {
						if r.whole {
							set.whole++
						}
					}
					sets[&j.runs[0]] = set
				}
				out := make([]Pair, j.expected)
				at := placeJob(gpItem{name: j.name}, "full", &j.ps, &j.ds, &j.pr, &j.dr, j.run)
				if n := pairsOver(set, true, j.ds.Name == SegLatent, j.run.Hi-j.run.Lo); n != j.expected {
					t.Fatalf("job %s: %d pairs counted, want %d", j.name, n, j.expected)
				}
				// The job's tally, taken from its set's before any pair is
				// written (as for a caller that keeps no pairs), is that of
				// the pairs then written: its descriptors, merged ones and
				// bytes, and its first and last pairs (a tally joined to
				// another reads them).
				own := attnTally(&at, set)
				attnPairs(out, &at, set)
				var bytes int64
				for _, p := range out {
					bytes += p.Len
				}
				if own.descs != len(out) || own.merged != MergedCount(out) || own.bytes != bytes ||
					len(out) > 0 && (own.first != pairEnd{out[0].Src, out[0].Dst, out[0].Len} || own.last != pairEnd{out[len(out)-1].Src, out[len(out)-1].Dst, out[len(out)-1].Len}) {
					t.Errorf("job %s: tally %+v; its pairs: %d, %d merged, %d B, first %+v, last %+v", j.name, own, len(out), MergedCount(out), bytes, out[0], out[len(out)-1])
				}
				c.join(&own)
				all = append(all, out...)
				// Each pair where the geometry puts it, whatever the set holds:
				// its run's block and row, from its head's place in a block.
				pHead, dHead := int64(j.run.Lo-j.ps.Lo)*j.ps.IndexBytes, int64(j.run.Lo-j.ds.Lo)*j.ds.IndexBytes
				for k, p := range out {
					r := j.runs[k%len(j.runs)]
					src, dst := pHead+r.pBlock*j.pr.BlockLen+r.pRow*j.ps.RowBytes, dHead+r.dBlock*j.dr.BlockLen+r.dRow*j.ds.RowBytes
					if j.run.Hi-j.run.Lo == 1 && j.ds.Name != SegLatent && (p.Src.Offset != src || p.Dst.Offset != dst) {
						t.Errorf("job %s pair %d at P %d, D %d; its run puts it at P %d, D %d", j.name, k, p.Src.Offset, p.Dst.Offset, src, dst)
					}
				}
			}
			var bytes int64
			for _, p := range all {
				bytes += p.Len
			}
			if c.descs != len(all) || c.merged != MergedCount(all) || c.bytes != bytes {
				t.Errorf("tally %d descriptors, %d merged, %d B; the pairs: %d, %d, %d", c.descs, c.merged, c.bytes, len(all), MergedCount(all), bytes)
			}
			t.Logf("%d pairs, %d after merging", len(all), MergedCount(all))
		})
	}
}

// TestGroupTallyMerge: two workers' group-pair totals add up, and a layer
// either counted is counted once.
func TestGroupTallyMerge(t *testing.T) {
	a, b := newGroupTally(2, 2, 3), newGroupTally(2, 2, 3)
	a.add(0, 1, 0, "full", 3, 300)
	b.add(0, 1, 0, "full", 2, 200) // the same layer, another rank pair
	b.add(1, 0, 1, "sliding", 5, 50)
	b.add(0, 1, 2, "full", 1, 10) // a layer only b saw
	a.merge(b)
	got := a.pairs()
	want := []GroupPair{{PGroup: 0, DGroup: 1, Kind: "full", Layers: 2, Descs: 6, Bytes: 510}, {PGroup: 1, DGroup: 0, Kind: "sliding", Layers: 1, Descs: 5, Bytes: 50}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged %v, want %v", got, want)
	}
}

// TestRunCount holds runCount (which counting and the tune search use
// without listing runs) to tokenRuns and to a token-by-token walk: a new
// run starts wherever a token's P page or D page differs from the token
// before's, and a run is whole where it is one page of the same size on
// both sides.
func TestRunCount(t *testing.T) {
	sizes := []int{1, 3, 16, 48, 64, 96, 304, 592, 1184}
	for _, bsP := range sizes {
		for _, bsD := range sizes {
			for _, span := range []Span{{0, 0}, {5, 5}, {0, 1}, {0, 1000}, {17, 2400}, {591, 593}, {1183, 3553}, {96, 4096}, {2368, 2368 + 1184*2}} {
				wantRuns, wantWhole := 0, 0
				for lo := span.Lo; lo < span.Hi; {
					hi := lo + 1
					for hi < span.Hi && hi/bsP == lo/bsP && hi/bsD == lo/bsD {
						hi++
					}
					wantRuns++
					if hi-lo == bsP && bsP == bsD {
						wantWhole++
					}
					lo = hi
				}
				runs, whole := runCount(span, bsP, bsD)
				if runs != wantRuns || whole != wantWhole {
					t.Errorf("runCount(%v, %d, %d) = %d runs, %d whole; want %d, %d", span, bsP, bsD, runs, whole, wantRuns, wantWhole)
				}
				pages := func(bs int) Pages {
					first, n := pagesOf(span, bs, false)
					ids := make([]int, n)
					for i := range ids {
						ids[i] = 1 + i
					}
					return Pages{BlockSize: bs, First: first, IDs: ids}
				}
				x := &Transfer{PPages: []Pages{pages(bsP)}, DPages: []Pages{pages(bsD)}}
				if listed := x.tokenRuns(span, bsP, bsD, 0, 0); len(listed.runs) != runs || listed.whole != whole {
					t.Errorf("tokenRuns(%v, %d, %d) lists %d runs, %d whole; runCount says %d, %d", span, bsP, bsD, len(listed.runs), listed.whole, runs, whole)
				}
			}
		}
	}
}

// TestChainJoin: a rank pair's tally joined from the tallies of any split
// of its pairs is the tally of all of them; a pair continuing the one
// before across the split is one merged descriptor, not two. The whole
// run's merged count is NIXL's rule, written out here pair by pair.
func TestChainJoin(t *testing.T) {
	// Runs of contiguous pairs on both sides, broken by a jump in P, in D,
	// in region, or by a shorter pair.
	var pairs []Pair
	src, dst := int64(0), int64(0)
	for i := range 40 {
		n := int64(64)
		switch i % 7 {
		case 2:
			src += 4096
		case 4:
			dst += 512
		case 5:
			n = 32
		}
		region := 0
		if i%11 == 10 {
			region = 1
		}
		pairs = append(pairs, Pair{Src: Loc{region, src}, Dst: Loc{0, dst}, Len: n})
		src, dst = src+n, dst+n
	}
	want := 0
	for i, p := range pairs {
		if i == 0 {
			want++
			continue
		}
		q := pairs[i-1]
		if q.Len != p.Len || q.Src.Region != p.Src.Region || q.Dst.Region != p.Dst.Region || q.Src.Offset+q.Len != p.Src.Offset || q.Dst.Offset+q.Len != p.Dst.Offset {
			want++
		}
	}
	var all tally
	for _, p := range pairs {
		all.add(p.Src, p.Dst, p.Len)
	}
	if all.merged != want || MergedCount(pairs) != want || all.descs != len(pairs) || all.first != (pairEnd{pairs[0].Src, pairs[0].Dst, pairs[0].Len}) {
		t.Fatalf("one tally: %d merged of %d (MergedCount %d), first %+v; NIXL's rule merges to %d of %d", all.merged, all.descs, MergedCount(pairs), all.first, want, len(pairs))
	}
	for _, cuts := range [][]int{{0}, {1}, {3}, {20}, {39}, {40}, {3, 4, 5, 6}, {1, 2, 3, 10, 11, 12, 30}} {
		var joined tally
		at := 0
		for _, cut := range append(cuts, len(pairs)) {
			var part tally
			for _, p := range pairs[at:cut] {
				part.add(p.Src, p.Dst, p.Len)
			}
			joined.join(&part)
			at = cut
		}
		if joined != all {
			t.Errorf("cut at %v: joined %+v, want %+v", cuts, joined, all)
		}
	}
}

// TestMergedCount: NIXL's merged descriptors for lists whose merging is
// worked out by hand.
func TestMergedCount(t *testing.T) {
	p := func(sr int, so int64, dr int, do, n int64) Pair {
		return Pair{Src: Loc{sr, so}, Dst: Loc{dr, do}, Len: n}
	}
	for _, tc := range []struct {
		name  string
		pairs []Pair
		want  int
	}{
		{"none", nil, 0},
		{"one", []Pair{p(0, 0, 0, 0, 64)}, 1},
		{"contiguous on both sides", []Pair{p(0, 0, 0, 100, 64), p(0, 64, 0, 164, 64), p(0, 128, 0, 228, 64)}, 1},
		{"contiguous on P only", []Pair{p(0, 0, 0, 0, 64), p(0, 64, 0, 128, 64)}, 2},
		{"contiguous on D only", []Pair{p(0, 0, 0, 0, 64), p(0, 128, 0, 64, 64)}, 2},
		{"contiguous offsets in another P region", []Pair{p(0, 0, 0, 0, 64), p(1, 64, 0, 64, 64)}, 2},
		{"contiguous offsets in another D region", []Pair{p(0, 0, 0, 0, 64), p(0, 64, 1, 64, 64)}, 2},
		{"contiguous but of another length", []Pair{p(0, 0, 0, 0, 64), p(0, 64, 0, 64, 32)}, 2},
		{"a break between two runs", []Pair{p(0, 0, 0, 0, 8), p(0, 8, 0, 8, 8), p(0, 100, 0, 100, 8), p(0, 108, 0, 108, 8)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MergedCount(tc.pairs); got != tc.want {
				t.Errorf("MergedCount = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestStateRunTallied: a state job tallied without writing (a caller that
// keeps no pairs) leaves the tally as written and names the same pair, the
// one the job's place puts in P's and D's blocks.
func TestStateRunTallied(t *testing.T) {
	ps := Segment{Name: SegSSM, Region: 0, Offset: 1024, Lo: 4, Hi: 12, IndexBytes: 96}
	ds := Segment{Name: SegSSM, Region: 0, Offset: 512, Lo: 8, Hi: 12, IndexBytes: 96}
	pr := Region{Index: 1, BlockLen: 8192, NumBlocks: 8}
	dr := Region{Index: 2, BlockLen: 4096, NumBlocks: 8}
	at := placeJob(gpItem{name: "mamba", pg: 1, dg: 2}, "mamba", &ps, &ds, &pr, &dr, indexRun{Rank: 0, Lo: 8, Hi: 12})
	var written, counted tally
	var q Pair
	stateRun(&q, &at, 3, 5, &written)
	stateRun(nil, &at, 3, 5, &counted)
	want := Pair{Src: Loc{1, 3*8192 + 1024 + 4*96}, Dst: Loc{2, 5*4096 + 512}, Len: 4 * 96, SrcID: -1, DstID: -1,
		Layer: "mamba", Seg: SegSSM, Lo: 8, Hi: 12, PGroup: 1, DGroup: 2}
	if q != want {
		t.Errorf("pair %+v, want %+v", q, want)
	}
	if written.first != (pairEnd{want.Src, want.Dst, want.Len}) || counted != written || written.descs != 1 || written.bytes != want.Len {
		t.Errorf("tally %+v, %+v tallied only; want the one pair %+v", written, counted, want)
	}
}
