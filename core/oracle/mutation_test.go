package oracle

import (
	"github.com/kvscope/kvscope/core/model/modeltest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// The oracle must catch a misplaced descriptor and say where: these tests
// move one descriptor by one head, by one token, or onto another layer, and
// expect "wrong" at the D rank, layer, head and token that descriptor fills.
func TestMutationsAreCaught(t *testing.T) {
	cases := pathCases(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := transfer(t, c.m, c.p, c.d, c.req, "nixl")
			rpi, pi := pickAttentionPair(t, x)
			rp := x.RankPairs[rpi]
			orig := rp.Pairs[pi]
			dl, _ := x.DRegs[rp.D].Layer(orig.Layer)
			var seg xfer.Segment
			for _, s := range dl.Segments {
				if s.Name == orig.Seg {
					seg = s
				}
			}
			otherRegion := -1
			for _, q := range rp.Pairs {
				if q.Layer != orig.Layer && q.Layer != "" && q.Src.Region != orig.Src.Region {
					otherRegion = q.Src.Region
					break
				}
			}
			mutations := []struct {
				name  string
				apply func(p *xfer.Pair)
				head  bool // the mismatch must name the pair's first head
			}{
				{"shifted by one head", func(p *xfer.Pair) { p.Src.Offset += seg.IndexBytes }, true},
				{"shifted by one token", func(p *xfer.Pair) { p.Src.Offset += seg.RowBytes }, true},
				{"moved onto another layer", func(p *xfer.Pair) { p.Src.Region = otherRegion }, true},
				{"written one token late in D", func(p *xfer.Pair) { p.Dst.Offset += seg.RowBytes }, false},
			}
			for _, mu := range mutations {
				t.Run(mu.name, func(t *testing.T) {
					if mu.name == "moved onto another layer" && otherRegion < 0 {
						t.Skip("no other layer in this rank pair")
					}
					y := *x
					y.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
					y.RankPairs[rpi].Pairs = append([]xfer.Pair(nil), rp.Pairs...)
					mu.apply(&y.RankPairs[rpi].Pairs[pi])
					res, err := Check(c.m, &y)
					if err != nil {
						t.Fatal(err)
					}
					if res.Verdict != Wrong {
						t.Fatalf("verdict %s, want wrong", res.Verdict)
					}
					mm := res.Mismatch
					if mm.DRank != rp.D {
						t.Errorf("mismatch on D rank %d, want %d: %s", mm.DRank, rp.D, mm)
					}
					if mu.head && (mm.Layer != orig.Layer || mm.Segment != string(orig.Seg) || mm.Index != orig.Lo || mm.Token != orig.Tokens.Lo) {
						t.Errorf("mismatch at %s, want layer %s %s index %d token %d", mm, orig.Layer, orig.Seg, orig.Lo, orig.Tokens.Lo)
					}
				})
			}
		})
	}
}

// pickAttentionPair finds a K pair of a layer that D needs, away from the
// request's first token.
func pickAttentionPair(t *testing.T, x *xfer.Transfer) (int, int) {
	for i, rp := range x.RankPairs {
		for j, p := range rp.Pairs {
			if p.Seg == xfer.SegK && p.Layer != "" && p.Tokens.Lo > 0 {
				dl, _ := x.DRegs[rp.D].Layer(p.Layer)
				need := xfer.Need(dl.Kind, dl.Window, dl.Chunk, x.Request.PromptTokens, x.Request.PrefixHitTokens)
				if need.Lo <= p.Tokens.Lo && p.Tokens.Lo < need.Hi {
					return i, j
				}
			}
		}
	}
	t.Fatal("no attention pair to mutate")
	return 0, 0
}

func TestRejectedIsAVerdict(t *testing.T) {
	m := modeltest.Load(t, "deepseek-ai__DeepSeek-V2-Lite")
	x := transfer(t, m, plan.Engine{BlockSize: 16}, plan.Engine{BlockSize: 32}, xfer.Request{PromptTokens: 100}, "nixl")
	res, err := Check(m, x)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != Rejected || res.Reason == "" {
		t.Errorf("verdict %s %q, want rejected with a reason", res.Verdict, res.Reason)
	}
}

// The rows' headers catch a row moved whole; the rest of a row is cut from
// the pattern's stream at a place its coordinates pick, so a range that
// cuts rows is caught too: these tests shift a descriptor by 8 bytes and
// split one into its first row's header, the rest of that row copied from
// the next head, the next token or the next state index, and the rows
// after (no D byte written twice: the bytes alone must show it), and
// expect "wrong" at the row it spoils.
func TestRowPartMutationsAreCaught(t *testing.T) {
	cases := pathCases(t)
	for _, c := range cases {
		x := transfer(t, c.m, c.p, c.d, c.req, "nixl")
		type target struct {
			kind    string
			rpi, pi int
			token   int // the spoiled row's, -1 for state
		}
		rpi, pi := pickAttentionPair(t, x)
		targets := []target{{"attention", rpi, pi, x.RankPairs[rpi].Pairs[pi].Tokens.Lo}}
		if rpi, pi, ok := pickStatePair(x); ok {
			targets = append(targets, target{"state", rpi, pi, -1})
		}
		for _, tg := range targets {
			kind := tg.kind
			rp := x.RankPairs[tg.rpi]
			orig := rp.Pairs[tg.pi]
			dl, _ := x.DRegs[rp.D].Layer(orig.Layer)
			var seg xfer.Segment
			for _, s := range dl.Segments {
				if s.Name == orig.Seg {
					seg = s
				}
			}
			// rest replaces the pair by its first row's header, the rest of
			// that row copied from src bytes on, and the rows after it.
			rest := func(pairs []xfer.Pair, src int64) []xfer.Pair {
				head, row, tail := orig, orig, orig
				head.Len = 8
				row.Src.Offset, row.Dst.Offset, row.Len = orig.Src.Offset+src+8, orig.Dst.Offset+8, seg.RowBytes-8
				tail.Src.Offset, tail.Dst.Offset, tail.Len = orig.Src.Offset+seg.RowBytes, orig.Dst.Offset+seg.RowBytes, orig.Len-seg.RowBytes
				split := []xfer.Pair{head, row}
				if tail.Len > 0 {
					split = append(split, tail)
				}
				return slices.Replace(pairs, tg.pi, tg.pi+1, split...)
			}
			mutations := []struct {
				name  string
				state bool // applies to state rows too
				apply func(pairs []xfer.Pair) []xfer.Pair
			}{
				{"shifted by 8 bytes", true, func(pairs []xfer.Pair) []xfer.Pair { pairs[tg.pi].Src.Offset += 8; return pairs }},
				{"the rest of a row from the next index", true, func(pairs []xfer.Pair) []xfer.Pair { return rest(pairs, seg.IndexBytes) }},
				{"the rest of a row from the next token", false, func(pairs []xfer.Pair) []xfer.Pair { return rest(pairs, seg.RowBytes) }},
			}
			for _, mu := range mutations {
				if kind == "state" && !mu.state {
					continue
				}
				t.Run(c.name+", "+kind+", "+mu.name, func(t *testing.T) {
					y := *x
					y.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
					y.RankPairs[tg.rpi].Pairs = mu.apply(append([]xfer.Pair(nil), rp.Pairs...))
					res, err := Check(c.m, &y)
					if err != nil {
						t.Fatal(err)
					}
					if res.Verdict != Wrong {
						t.Fatalf("verdict %s, want wrong", res.Verdict)
					}
					if mm := res.Mismatch; mm.DRank != rp.D || mm.Layer != orig.Layer || mm.Segment != string(orig.Seg) || mm.Index != orig.Lo || mm.Token != tg.token {
						t.Errorf("mismatch at %s, want D rank %d layer %s %s index %d token %d", mm, rp.D, orig.Layer, orig.Seg, orig.Lo, tg.token)
					}
					if strings.Contains(res.Mismatch.What, "written twice") {
						t.Errorf("caught as a byte written twice, not by the bytes: %s", res.Mismatch)
					}
				})
			}
		}
	}
}

// TestOverlapsAreCaught: a descriptor listed twice, or one that runs a
// row past its end into bytes another descriptor writes, is wrong even
// where the bytes it writes would read back right (the same bytes twice;
// the next row of the same layout): the verdict names the descriptor that
// starts inside another's bytes. The agent's Prover reaches the same
// verdict as Check.
func TestOverlapsAreCaught(t *testing.T) {
	for _, c := range pathCases(t) {
		x := transfer(t, c.m, c.p, c.d, c.req, "nixl")
		rpi, pi := pickAttentionPair(t, x)
		rp := x.RankPairs[rpi]
		orig := rp.Pairs[pi]
		// next is the pair that starts where orig ends in D, if any.
		next := -1
		for j, q := range rp.Pairs {
			if q.Dst.Region == orig.Dst.Region && q.Dst.Offset == orig.Dst.Offset+orig.Len {
				next = j
			}
		}
		mutations := []struct {
			name  string
			apply func(pairs []xfer.Pair) []xfer.Pair
			want  xfer.Pair // the descriptor the verdict names
		}{
			{"listed twice", func(pairs []xfer.Pair) []xfer.Pair { return slices.Insert(pairs, pi+1, orig) }, orig},
		}
		if next >= 0 {
			mutations = append(mutations, struct {
				name  string
				apply func(pairs []xfer.Pair) []xfer.Pair
				want  xfer.Pair
			}{"8 bytes long, into the next descriptor's", func(pairs []xfer.Pair) []xfer.Pair { pairs[pi].Len += 8; return pairs }, rp.Pairs[next]})
		}
		for _, mu := range mutations {
			t.Run(c.name+", "+mu.name, func(t *testing.T) {
				y := *x
				y.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
				y.RankPairs[rpi].Pairs = mu.apply(append([]xfer.Pair(nil), rp.Pairs...))
				res, err := Check(c.m, &y)
				if err != nil {
					t.Fatal(err)
				}
				mm := res.Mismatch
				if res.Verdict != Wrong || !strings.Contains(mm.What, "written twice") {
					t.Fatalf("verdict %s (%v), want wrong: written twice", res.Verdict, mm)
				}
				if mm.DRank != rp.D || mm.Layer != mu.want.Layer || mm.Segment != string(mu.want.Seg) || mm.Index != mu.want.Lo || mm.Token != mu.want.Tokens.Lo {
					t.Errorf("names %s, want D rank %d layer %s %s index %d token %d", mm, rp.D, mu.want.Layer, mu.want.Seg, mu.want.Lo, mu.want.Tokens.Lo)
				}
				mem := &hostMemory{x: &y, blocks: map[[4]int][]byte{}}
				prover, err := NewProver(c.m, &y, mem, false)
				if err != nil {
					t.Fatal(err)
				}
				mem.copyPairs()
				if got := prover.Verify(); !reflect.DeepEqual(got, res) {
					t.Errorf("Prover: %+v %v; Check: %+v %v", got, got.Mismatch, res, mm)
				}
				t.Log(mm)
			})
		}
	}
}

// pickStatePair finds an SSM state pair of more than one index, if the
// transfer moves state.
func pickStatePair(x *xfer.Transfer) (int, int, bool) {
	for i, rp := range x.RankPairs {
		for j, p := range rp.Pairs {
			if p.Seg == xfer.SegSSM && p.Hi-p.Lo > 1 {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// pathCase is a transfer the oracle's tests check on both of its paths.
type pathCase struct {
	name string
	m    *model.Model
	p, d plan.Engine
	req  xfer.Request
}

// pathCases are the transfers the mutation tests spoil: the vLLM path, the
// group-pair path between block sizes, and the seed deployment (GDN state,
// attention and a drafter) between TP sizes.
func pathCases(t *testing.T) []pathCase {
	t.Helper()
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	seed := modeltest.Seed(t)
	return []pathCase{
		{"vLLM path, gpt-oss-20b TP2 to TP4", gpt, plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 4}, xfer.Request{PromptTokens: 300}},
		{"group-pair path, gpt-oss-20b block 16 to 48", gpt, plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2, BlockSize: 48}, xfer.Request{PromptTokens: 301}},
		{"group-pair path, Qwen3.6 + DFlash TP2 to TP4", seed, plan.Engine{TensorParallelSize: 2, NumSpeculativeTokens: 7, MaxModelLen: 8192}, plan.Engine{TensorParallelSize: 4, NumSpeculativeTokens: 7, MaxModelLen: 8192}, xfer.Request{PromptTokens: 700}},
	}
}
