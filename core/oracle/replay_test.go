package oracle

import (
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// hostMemory is every block of both sides in plain buffers, made on first
// use: the memory of a Prover whose copies the test performs itself.
type hostMemory struct {
	x      *xfer.Transfer
	blocks map[[4]int][]byte
}

func (h *hostMemory) Block(side xfer.Side, rank, region, block int) []byte {
	s := 0
	regs := h.x.PRegs
	if side == xfer.D {
		s, regs = 1, h.x.DRegs
	}
	k := [4]int{s, rank, region, block}
	if h.blocks[k] == nil {
		h.blocks[k] = make([]byte, regs[rank].Regions[region].BlockLen)
	}
	return h.blocks[k]
}

// copyPairs moves every pair's bytes from P's blocks to D's, block by
// block: what an agent does between NewProver and Verify.
func (h *hostMemory) copyPairs() {
	for _, rp := range h.x.RankPairs {
		for _, p := range rp.Pairs {
			pbl := h.x.PRegs[rp.P].Regions[p.Src.Region].BlockLen
			dbl := h.x.DRegs[rp.D].Regions[p.Dst.Region].BlockLen
			src, dst, left := p.Src.Offset, p.Dst.Offset, p.Len
			for left > 0 {
				n := min(left, pbl-src%pbl, dbl-dst%dbl)
				sp := h.Block(xfer.P, rp.P, p.Src.Region, int(src/pbl))
				dp := h.Block(xfer.D, rp.D, p.Dst.Region, int(dst/dbl))
				copy(dp[dst%dbl:dst%dbl+n], sp[src%pbl:src%pbl+n])
				src, dst, left = src+n, dst+n, left-n
			}
		}
	}
}

// TestCheckAgreesWithCopies: Check, which writes P's bytes straight into
// one D page at a time, reaches the same result as tagging whole P
// blocks, copying every pair between real buffers and reading D back (a
// Prover), on exact transfers and on transfers with a misplaced pair.
func TestCheckAgreesWithCopies(t *testing.T) {
	cases := pathCases(t)
	cases = append(cases, pathCase{"vLLM path, gpt-oss-20b TP4 to TP2 with a prefix hit", cases[0].m,
		plan.Engine{TensorParallelSize: 4}, plan.Engine{TensorParallelSize: 2}, xfer.Request{PromptTokens: 300, PrefixHitTokens: 64}})
	for _, c := range cases {
		x := transfer(t, c.m, c.p, c.d, c.req, "nixl")
		rpi, pi := pickAttentionPair(t, x)
		mutations := []struct {
			name  string
			apply func(p *xfer.Pair)
		}{
			{"as computed", func(p *xfer.Pair) {}},
			{"shifted by 8 bytes", func(p *xfer.Pair) { p.Src.Offset += 8 }},
			{"written 8 bytes late", func(p *xfer.Pair) { p.Dst.Offset += 8 }},
			{"1 byte short", func(p *xfer.Pair) { p.Len-- }},
			{"8 bytes long", func(p *xfer.Pair) { p.Len += 8 }},
			{"onto the next D block", func(p *xfer.Pair) { p.Dst.Offset += x.DRegs[x.RankPairs[rpi].D].Regions[p.Dst.Region].BlockLen }},
		}
		for _, mu := range mutations {
			t.Run(c.name+", "+mu.name, func(t *testing.T) {
				y := *x
				y.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
				y.RankPairs[rpi].Pairs = append([]xfer.Pair(nil), x.RankPairs[rpi].Pairs...)
				mu.apply(&y.RankPairs[rpi].Pairs[pi])
				got, err := Check(c.m, &y)
				if err != nil {
					t.Fatal(err)
				}
				mem := &hostMemory{x: &y, blocks: map[[4]int][]byte{}}
				prover, err := NewProver(c.m, &y, mem, false)
				if err != nil {
					t.Fatal(err)
				}
				mem.copyPairs()
				want := prover.Verify()
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Check: %+v %v\ncopies: %+v %v", got, got.Mismatch, want, want.Mismatch)
				}
				if (mu.name == "as computed") != (got.Verdict == Exact) {
					t.Errorf("verdict %s: %v", got.Verdict, got.Mismatch)
				}
			})
		}
	}
}

// TestPBytesOfARange: any byte range of a P page holds the same bytes as
// that range of the whole page, however it cuts rows, indices, segments
// and padding.
func TestPBytesOfARange(t *testing.T) {
	seed := modeltest.Seed(t)
	for _, tc := range []struct {
		name string
		m    *model.Model
		p, d plan.Engine
	}{
		{"split K and V, gpt-oss-20b", modeltest.Load(t, "openai__gpt-oss-20b"), plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 4}},
		{"blocks-first with GDN state, Qwen3.6 + DFlash", seed, plan.Engine{TensorParallelSize: 2, NumSpeculativeTokens: 7, MaxModelLen: 8192}, plan.Engine{TensorParallelSize: 4, NumSpeculativeTokens: 7, MaxModelLen: 8192}},
		{"MLA latent, DeepSeek-V2-Lite", modeltest.Load(t, "deepseek-ai__DeepSeek-V2-Lite"), plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := transfer(t, tc.m, tc.p, tc.d, xfer.Request{PromptTokens: 300}, "nixl")
			o := newRun(tc.m, x, nil)
			o.tables()
			rng := rand.New(rand.NewPCG(1, 2))
			reg := x.PRegs[len(x.PRegs)-1]
			for region := range reg.Regions {
				for _, block := range []int{0, 1, 2, 1 << 20} { // the null block, owned blocks, one no group owns
					k := pageKey{region, block}
					whole := make([]byte, reg.Regions[region].BlockLen)
					o.pBytes(reg, k, 0, whole)
					for range 20 {
						lo := rng.Int64N(int64(len(whole)))
						hi := lo + rng.Int64N(int64(len(whole))-lo+1)
						part := make([]byte, hi-lo)
						o.pBytes(reg, k, lo, part)
						if string(part) != string(whole[lo:hi]) {
							t.Fatalf("region %d block %d bytes [%d, %d) differ from the whole page's", region, block, lo, hi)
						}
					}
				}
			}
		})
	}
}

// TestPutRows: putRows writes the documented bytes (each row's header the
// hash of its chunk's first row stepped per token, little-endian, cut to a
// short row; the rest the stream from its chunk's window on, rowBytes
// apart per token), rows of different
// coordinates differ at every byte but by chance, and matched counts the
// rows that hold them, stopping at the first row with any byte changed.
func TestPutRows(t *testing.T) {
	o := &run{}
	ix := index{layer: 3, seg: 2, idx: 5}
	for _, rowBytes := range []int{6, 8, 40, 128, 136, 1152, 3 << 17} {
		const rows, token = 37, 1230 // 1230 is 14 tokens into a chunk: three windows
		b := make([]byte, rows*rowBytes)
		putRows(b, rowBytes, ix, token)
		for r := range rows {
			row := b[r*rowBytes : (r+1)*rowBytes]
			first := (token + r) / chunkTokens * chunkTokens
			h := mix(rowKey(ix.layer, ix.seg, ix.idx, first))
			var head [8]byte
			binary.LittleEndian.PutUint64(head[:], h+uint64(token+r-first)*headerStep)
			if n := min(8, rowBytes); string(row[:n]) != string(head[:n]) {
				t.Fatalf("row bytes %d, row %d: header %x, want %x", rowBytes, r, row[:n], head[:n])
			}
			start := int(mix(h^windowSalt)%(streamBytes/8)) * 8
			for i := 8; i < rowBytes; i++ {
				if want := stream()[(start+(token+r-first)*rowBytes+i)%streamBytes]; row[i] != want {
					t.Fatalf("row bytes %d, row %d, byte %d: %#x, want the stream's %#x", rowBytes, r, i, row[i], want)
				}
			}
		}
		// Another token, index, segment or layer: other bytes, at every
		// 8-byte word but by chance (a few equal bytes are chance).
		for _, other := range []struct {
			ix    index
			token int
		}{{ix, token + 1}, {index{ix.layer, ix.seg, ix.idx + 1}, token}, {index{ix.layer, ix.seg + 1, ix.idx}, token}, {index{ix.layer + 1, ix.seg, ix.idx}, token}} {
			c := make([]byte, rowBytes)
			putRows(c, rowBytes, other.ix, other.token)
			for w := 0; w < rowBytes; w += 8 {
				if e := min(w+8, rowBytes); string(c[w:e]) == string(b[w:e]) {
					t.Errorf("row bytes %d: %+v token %d shares word %d with %+v token %d", rowBytes, other.ix, other.token, w/8, ix, token)
				}
			}
		}
		if rowBytes > 1<<12 {
			continue // the byte-by-byte walk below is for short rows
		}
		if n := o.matched(b, rowBytes, ix, token); n != rows {
			t.Errorf("row bytes %d: %d rows match, want %d", rowBytes, n, rows)
		}
		for at := range b {
			b[at] ^= 0x10
			if n := o.matched(b, rowBytes, ix, token); n != at/rowBytes {
				t.Fatalf("row bytes %d, byte %d changed: %d rows match, want %d", rowBytes, at, n, at/rowBytes)
			}
			b[at] ^= 0x10
		}
	}
}
