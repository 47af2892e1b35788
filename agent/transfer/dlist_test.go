package transfer

import (
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// dlist is one side's layout and a request's indices into it.
type dlist struct {
	*dlistLayout
	idx []int32
}

// buildDlist lays out one side of pairs over regions of the given sizes
// and indexes the pairs.
func buildDlist(pairs []xfer.Pair, at func(*xfer.Pair) xfer.Loc, size func(region int) int64) (*dlist, error) {
	l, err := newLayout(nil, pairs, at, func(r int) (int64, error) { return size(r), nil })
	if err != nil {
		return nil, err
	}
	idx, err := l.indices(pairs, at)
	if err != nil {
		return nil, err
	}
	return &dlist{l, idx}, nil
}

// nixlRun is one run of a prepared list as NIXL v1.4 compresses it
// (nixlMemSection::populate): count entries of one length in one
// registered buffer, stride bytes apart, from list index start.
type nixlRun struct {
	region              int
	off, len, stride    int64
	start, count, limit int
}

// nixlRuns replays NIXL's greedy run detection over a list: an entry joins
// the current run if it has the run's length and buffer and, for a
// one-entry run, lies at a higher address (which sets the stride), else
// lies exactly one stride after the last entry.
func nixlRuns(d *dlist) []nixlRun {
	var runs []nixlRun
	for i := range d.off {
		if n := len(runs); n > 0 {
			r := &runs[n-1]
			prev := d.off[i-1]
			if d.len[i] == r.len && d.region[i] == r.region {
				if r.count == 1 && d.off[i] > prev {
					r.stride, r.count = d.off[i]-prev, 2
					continue
				}
				if r.count > 1 && d.off[i]-prev == r.stride {
					r.count++
					continue
				}
			}
		}
		runs = append(runs, nixlRun{region: d.region[i], off: d.off[i], len: d.len[i], stride: d.len[i], start: i, count: 1})
	}
	return runs
}

// nixlPosts replays makeXferReq's merge over two prepared lists: from each
// index pair it extends while both sides' runs are dense (stride == len,
// equal strides) and the next indices are consecutive, never past either
// run's end. It returns the number of descriptors posted.
func nixlPosts(local, remote *dlist) int {
	find := func(runs []nixlRun, idx int) nixlRun {
		for _, r := range runs {
			if idx >= r.start && idx < r.start+r.count {
				return r
			}
		}
		panic("index outside the list")
	}
	lr, rr := nixlRuns(local), nixlRuns(remote)
	n := 0
	for i := 0; i < len(local.idx); {
		li, ri := int(local.idx[i]), int(remote.idx[i])
		l, r := find(lr, li), find(rr, ri)
		seq := 1
		if l.stride == l.len && l.stride == r.stride {
			limit := min(l.start+l.count-li, r.start+r.count-ri, len(local.idx)-i)
			for seq < limit && int(local.idx[i+seq]) == li+seq && int(remote.idx[i+seq]) == ri+seq {
				seq++
			}
		}
		i += seq
		n++
	}
	return n
}

// checkDlist checks one side's list against its pairs: every pair's entry
// is its own descriptor, and every entry lies inside its region.
func checkDlist(t *testing.T, name string, pairs []xfer.Pair, d *dlist, at func(*xfer.Pair) xfer.Loc, regs *xfer.Registration) {
	t.Helper()
	for i := range pairs {
		p := &pairs[i]
		e, l := d.idx[i], at(p)
		if d.region[e] != l.Region || d.off[e] != l.Offset || d.len[e] != p.Len {
			t.Fatalf("%s: pair %d at region %d [%d, +%d) has entry %d = region %d [%d, +%d)", name, i, l.Region, l.Offset, p.Len, e, d.region[e], d.off[e], d.len[e])
		}
	}
	for e := range d.off {
		if regs != nil && (d.off[e] < 0 || d.off[e]+d.len[e] > regs.Regions[d.region[e]].Bytes()) {
			t.Fatalf("%s: entry %d [%d, +%d) outside region %d", name, e, d.off[e], d.len[e], d.region[e])
		}
	}
}

// TestDlistLetsNIXLMergeWhatKvscopeCounts lays out the lists of real
// transfers (equal and different plans, split heads, sliding windows,
// state, MLA, pull and push) and replays NIXL's run detection and merge:
// NIXL posts exactly xfer.MergedCount descriptors per rank pair.
func TestDlistLetsNIXLMergeWhatKvscopeCounts(t *testing.T) {
	cases := []struct {
		name, model    string
		pTP, dTP       int
		version        string
		pBlock, dBlock int
		mem            int64
		prompt         int
		connector      string
	}{
		{"gpt-oss TP2 to TP4 pull", "openai__gpt-oss-20b", 2, 4, "", 0, 0, 64 << 20, 700, "nixl"},
		{"gpt-oss TP4 to TP2 push", "openai__gpt-oss-20b", 4, 2, "", 0, 0, 64 << 20, 777, "nixl-push"},
		{"gpt-oss different plans 16 to 32", "openai__gpt-oss-20b", 2, 2, "pr58207", 16, 32, 64 << 20, 700, "nixl"},
		{"gpt-oss different plans 32 to 16 push", "openai__gpt-oss-20b", 2, 4, "pr58207", 32, 16, 64 << 20, 500, "nixl-push"},
		{"Qwen3.5 GDN TP1 to TP2", "Qwen__Qwen3.5-0.8B", 1, 2, "", 0, 0, 128 << 20, 600, "nixl"},
		{"Qwen3.5 GDN TP2 to TP1 push", "Qwen__Qwen3.5-0.8B", 2, 1, "", 0, 0, 128 << 20, 600, "nixl-push"},
		{"granite Mamba2 group pairs", "ibm-granite__granite-4.0-h-1b", 1, 2, "pr58207", 0, 0, 128 << 20, 450, "nixl"},
		{"DeepSeek-V2-Lite MLA", "deepseek-ai__DeepSeek-V2-Lite", 2, 1, "", 0, 0, 64 << 20, 200, "nixl"},
		{"Qwen3 TP1 to TP8", "Qwen__Qwen3-0.6B", 1, 8, "", 0, 0, 256 << 20, 300, "nixl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := modeltest.Load(t, tc.model)
			conn, err := xfer.ParseConnector(tc.connector)
			if err != nil {
				t.Fatal(err)
			}
			e := func(tp, block int) plan.Engine {
				return plan.Engine{VLLMVersion: tc.version, TensorParallelSize: tp, BlockSize: block, KVCacheMemoryBytes: tc.mem / int64(tp), MaxModelLen: 1024}
			}
			pd, err := xfer.Run(xfer.Setup{Model: m, P: e(tc.pTP, tc.pBlock), D: e(tc.dTP, tc.dBlock), Connector: conn, Plans: xfer.IndependentPlans,
				Request: xfer.Request{PromptTokens: tc.prompt}, KeepPairs: true})
			if err != nil {
				t.Fatal(err)
			}
			x := pd.Transfer
			if x.Rejection != nil {
				t.Fatalf("rejected: %v", x.Rejection)
			}
			for _, rp := range x.RankPairs {
				if len(rp.Pairs) == 0 {
					continue
				}
				src := func(p *xfer.Pair) xfer.Loc { return p.Src }
				dst := func(p *xfer.Pair) xfer.Loc { return p.Dst }
				pl, err := buildDlist(rp.Pairs, src, func(r int) int64 { return x.PRegs[rp.P].Regions[r].Bytes() })
				if err != nil {
					t.Fatal(err)
				}
				dl, err := buildDlist(rp.Pairs, dst, func(r int) int64 { return x.DRegs[rp.D].Regions[r].Bytes() })
				if err != nil {
					t.Fatal(err)
				}
				checkDlist(t, "P", rp.Pairs, pl, src, x.PRegs[rp.P])
				checkDlist(t, "D", rp.Pairs, dl, dst, x.DRegs[rp.D])
				want := xfer.MergedCount(rp.Pairs)
				if got := nixlPosts(dl, pl); got != want {
					t.Errorf("P%d→D%d: NIXL would post %d descriptors, kvscope counts %d", rp.P, rp.D, got, want)
				}
			}
		})
	}
}

// TestDlistEdgeCases covers layouts where a naive list would let NIXL's
// greedy run detection join the wrong entries.
func TestDlistEdgeCases(t *testing.T) {
	pair := func(sr int, so int64, dr int, do, n int64) xfer.Pair {
		return xfer.Pair{Src: xfer.Loc{Region: sr, Offset: so}, Dst: xfer.Loc{Region: dr, Offset: do}, Len: n}
	}
	tests := []struct {
		name  string
		pairs []xfer.Pair
		want  int
	}{
		{"one back-to-back run", []xfer.Pair{pair(0, 0, 0, 0, 8), pair(0, 8, 0, 8, 8), pair(0, 16, 0, 16, 8)}, 1},
		// A lone descriptor, then a run of the same length on another grid:
		// a list of the used descriptors would make NIXL stretch the lone
		// one's run over the run's first entry.
		{"lone entry before a run on another grid", []xfer.Pair{pair(0, 3, 0, 3, 8), pair(0, 16, 0, 16, 8), pair(0, 24, 0, 24, 8)}, 2},
		// A gap: blocks 0 and 9, then 10: 9 and 10 merge, 0 does not.
		{"gap then run", []xfer.Pair{pair(0, 0, 0, 0, 8), pair(0, 72, 0, 72, 8), pair(0, 80, 0, 80, 8)}, 2},
		// Back to back but of different lengths: NIXL never merges them.
		{"different lengths", []xfer.Pair{pair(0, 0, 0, 0, 8), pair(0, 8, 0, 8, 16)}, 2},
		// Contiguous on P, not on D.
		{"contiguous on one side", []xfer.Pair{pair(0, 0, 0, 0, 8), pair(0, 8, 0, 24, 8)}, 2},
		// Another region.
		{"region change", []xfer.Pair{pair(0, 0, 0, 0, 8), pair(1, 8, 0, 8, 8)}, 2},
		// Descending blocks: consecutive in memory only backwards.
		{"descending", []xfer.Pair{pair(0, 16, 0, 16, 8), pair(0, 8, 0, 8, 8)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := xfer.MergedCount(tt.pairs); got != tt.want {
				t.Fatalf("MergedCount = %d, want %d", got, tt.want)
			}
			src := func(p *xfer.Pair) xfer.Loc { return p.Src }
			dst := func(p *xfer.Pair) xfer.Loc { return p.Dst }
			size := func(int) int64 { return 256 }
			pl, err := buildDlist(tt.pairs, src, size)
			if err != nil {
				t.Fatal(err)
			}
			dl, err := buildDlist(tt.pairs, dst, size)
			if err != nil {
				t.Fatal(err)
			}
			checkDlist(t, "P", tt.pairs, pl, src, nil)
			checkDlist(t, "D", tt.pairs, dl, dst, nil)
			if got := nixlPosts(dl, pl); got != tt.want {
				t.Errorf("NIXL would post %d descriptors, want %d", got, tt.want)
			}
		})
	}
	at := func(p *xfer.Pair) xfer.Loc { return p.Src }
	if _, err := buildDlist([]xfer.Pair{pair(0, 0, 0, 0, 0)}, at, func(int) int64 { return 256 }); err == nil {
		t.Error("a zero-length pair was laid out")
	}
	if _, err := buildDlist([]xfer.Pair{pair(0, 252, 0, 0, 8)}, at, func(int) int64 { return 256 }); err == nil {
		t.Error("a pair past its region's end was indexed")
	}
	// A layout a later request outgrows keeps its classes.
	l, err := newLayout(nil, []xfer.Pair{pair(0, 0, 0, 0, 8)}, at, func(int) (int64, error) { return 64, nil })
	if err != nil {
		t.Fatal(err)
	}
	more := []xfer.Pair{pair(0, 0, 0, 0, 8), pair(0, 3, 0, 0, 8)}
	out := make([]int32, len(more))
	if i, err := l.index(more, at, out); i != 1 || err != nil {
		t.Fatalf("a layout lacking the second pair's class: index says %d, %v; want 1", i, err)
	}
	if _, err := l.indices(more, at); err == nil {
		t.Fatal("indices of a class the layout lacks")
	}
	l2, err := newLayout(l, more, at, func(int) (int64, error) { return 64, nil })
	if err != nil || len(l2.off) != 8+7 {
		t.Fatalf("grown layout: %d entries, %v", len(l2.off), err)
	}
	for _, q := range [][]xfer.Pair{more, {pair(0, 56, 0, 0, 8)}} {
		if i, err := l2.index(q, at, out); i != -1 || err != nil {
			t.Fatalf("grown layout lacks a class of %v: %d, %v", q, i, err)
		}
	}
}
