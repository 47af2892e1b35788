package xfer

import (
	"slices"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// The worked example of reference/nixl-connector.md §8: 4 layers (L0 full,
// L1 sliding W=32, L2 full, L3 sliding), 8 KV heads of 128, bf16, block 16,
// P TP2 -> D TP4, 100 tokens; P has 1000 blocks per rank, D 2000.
func workedModel(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.Parse([]byte(`{"model_type":"gpt_oss","num_hidden_layers":4,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,
		"sliding_window":32,"layer_types":["full_attention","sliding_attention","full_attention","sliding_attention"],"torch_dtype":"bfloat16","max_position_embeddings":4096}`))
	if err != nil {
		t.Fatal(err)
	}
	m.Name = "worked-example"
	return m
}

func workedBases(side Side, rank, tensor int, _ uint64) uint64 {
	if side == P {
		return uint64(tensor+1) * 0x10000000
	}
	return uint64(tensor+3) * 0x10000000
}

func workedTransfer(t *testing.T, pTP, dTP int, e func(*plan.Engine), layout CacheLayout) *Transfer {
	t.Helper()
	m := workedModel(t)
	pe := plan.Engine{TensorParallelSize: pTP, NumGPUBlocksOverride: 1000, Selector: plan.Classic}
	de := plan.Engine{TensorParallelSize: dTP, NumGPUBlocksOverride: 2000, Selector: plan.Classic}
	if e != nil {
		e(&pe)
		e(&de)
	}
	pp, err := plan.New(m, pe)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := plan.New(m, de)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[Side][][]int{
		P: {{10, 11, 12, 13, 14, 15, 16}, {40, 41, 42}},
		D: {{100, 101, 102, 103, 104, 105, 106}, {200, 201, 202}},
	}
	conn, _ := ParseConnector("nixl")
	x, err := Compute(m, pp, dp, Request{PromptTokens: 100}, Options{Connector: conn, Bases: workedBases, Blocks: blocks, Output: KeepPairs, PLayout: layout, DLayout: layout})
	if err != nil {
		t.Fatal(err)
	}
	if x.Rejection != nil {
		t.Fatalf("rejected: %v", x.Rejection)
	}
	return x
}

func TestWorkedExampleRegions(t *testing.T) {
	x := workedTransfer(t, 2, 4, nil, "")
	if x.Path != VLLMPath {
		t.Fatalf("path %s (%s), want vLLM's", x.Path, x.PathReason)
	}
	wantP := []uint64{0x10000000, 0x10FA0000, 0x20000000, 0x20FA0000}
	wantD := []uint64{0x30000000, 0x30FA0000, 0x40000000, 0x40FA0000}
	for r := range x.PRegs {
		md := x.Handshake.P[r]
		if !slices.Equal(md.BaseAddrs, wantP) || md.NumBlocks != 1000 || md.BlockSize != 16 {
			t.Errorf("P rank %d advertises %#x, %d blocks, block %d", r, md.BaseAddrs, md.NumBlocks, md.BlockSize)
		}
		for _, bl := range md.BlockLens {
			if bl != 16384 {
				t.Errorf("P block_len %d, want 16384", bl)
			}
		}
	}
	for r := range x.DRegs {
		md := x.Handshake.D[r]
		if !slices.Equal(md.BaseAddrs, wantD) || md.NumBlocks != 2000 || md.BlockLens[0] != 8192 {
			t.Errorf("D rank %d advertises %#x, %d blocks, block_len %d", r, md.BaseAddrs, md.NumBlocks, md.BlockLens[0])
		}
	}
	// Region members: T0 is shared by L0 (group 0) and L1 (group 1). The
	// newest release speaks version 12, which names a region's layers and
	// nothing more.
	if x.Handshake.Protocol.Version != 12 || x.Handshake.P[0].Version != 12 || x.Handshake.P[0].Members != nil {
		t.Errorf("protocol version %d, P rank 0 advertises version %d with members %+v; want vLLM's 12 and names only", x.Handshake.Protocol.Version, x.Handshake.P[0].Version, x.Handshake.P[0].Members)
	}
	if m := x.Handshake.P[0].MemberNames[0]; !slices.Equal(m, []string{"L0", "L1"}) {
		t.Errorf("P rank 0 region 0 member names %q, want L0 L1", m)
	}
	// kvscope's own version 15 adds each member's group, heads and tokens
	// per page.
	reg := x.DRegs[3]
	md := MetadataOf(reg)
	if md.Version != HandshakeVersion || md.MemberNames != nil {
		t.Errorf("kvscope's metadata: version %d, names %q", md.Version, md.MemberNames)
	}
	if m := MetadataOf(x.PRegs[0]).Members[0]; len(m) != 2 || m[0].Layer != "L0" || m[1].Layer != "L1" || m[0].HeadLo != 0 || m[0].HeadHi != 4 {
		t.Errorf("P rank 0 region 0 members %+v", m)
	}
	if m := md.Members[2]; m[0].Layer != "L2" || m[0].HeadLo != 6 || m[0].HeadHi != 8 || m[0].TokensPerPage != 16 {
		t.Errorf("D rank 3 region 2 members %+v", m)
	}
}

func TestWorkedExampleDescriptors(t *testing.T) {
	x := workedTransfer(t, 2, 4, nil, "")
	rp := findRankPair(t, x, 0, 1)
	if len(rp.Pairs) != 40 || rp.Bytes != 327680 || rp.Op != "READ" || rp.Notif != "req-0:4" {
		t.Fatalf("D1 <- P0: %d pairs, %d bytes, %s %q; want 40, 327680, READ", len(rp.Pairs), rp.Bytes, rp.Op, rp.Notif)
	}
	// §8.7: region-major, block ids flattened over groups.
	var local, remote []int
	for _, p := range rp.Pairs {
		local = append(local, p.DstID)
		remote = append(remote, p.SrcID)
		if p.Len != 8192 {
			t.Fatalf("pair length %d, want 8192", p.Len)
		}
	}
	wantLocal := []int{100, 101, 102, 103, 104, 105, 106, 200, 201, 202}
	wantRemote := []int{10, 11, 12, 13, 14, 15, 16, 40, 41, 42}
	for vr := 0; vr < 4; vr++ {
		for i := range wantLocal {
			if local[vr*10+i] != vr*2000+wantLocal[i] || remote[vr*10+i] != vr*1000+wantRemote[i] {
				t.Fatalf("region %d pair %d: ids %d <- %d, want %d <- %d", vr, i, local[vr*10+i], remote[vr*10+i], vr*2000+wantLocal[i], vr*1000+wantRemote[i])
			}
		}
	}
	// §8.8: byte addresses.
	d1, p0 := x.DRegs[1], x.PRegs[0]
	checks := []struct {
		i          int
		dst, src   uint64
		layer      string
		seg        SegName
		lo, hi     int
		tokLo, tok int
	}{
		{0, 0x300C8000, 0x1002A000, "L0", SegK, 2, 4, 0, 16},
		{10, 0x31068000, 0x10FCA000, "L0", SegV, 2, 4, 0, 16},
		{27, 0x40190000, 0x200A2000, "L3", SegK, 2, 4, 64, 80},
	}
	for _, c := range checks {
		p := rp.Pairs[c.i]
		if d1.Addr(p.Dst) != c.dst || p0.Addr(p.Src) != c.src || p.Layer != c.layer || p.Seg != c.seg || p.Lo != c.lo || p.Hi != c.hi || p.Tokens.Lo != c.tokLo || p.Tokens.Hi != c.tok {
			t.Errorf("pair %d: %#x <- %#x %s %s heads [%d,%d) tokens %v; want %#x <- %#x %s %s [%d,%d) [%d,%d)",
				c.i, d1.Addr(p.Dst), p0.Addr(p.Src), p.Layer, p.Seg, p.Lo, p.Hi, p.Tokens, c.dst, c.src, c.layer, c.seg, c.lo, c.hi, c.tokLo, c.tok)
		}
	}
	// D rank 0 uses the same ids at remote offset 0.
	if p := findRankPair(t, x, 0, 0).Pairs[0]; p0.Addr(p.Src) != 0x10028000 {
		t.Errorf("D0 pair 0 reads %#x, want 0x10028000", p0.Addr(p.Src))
	}
	// §8.7 cross-check: 4 D ranks x 327,680 B.
	if x.Bytes != 1310720 || len(x.RankPairs) != 4 {
		t.Errorf("total %d B over %d rank pairs, want 1,310,720 over 4", x.Bytes, len(x.RankPairs))
	}
	// vLLM's descriptor lists: D holds 4 regions x 2000 = 8000, P 4 x 1000.
	if n := len(vregions(x.DRegs[1])) * int(x.DRegs[1].NumBlocks); n != 8000 {
		t.Errorf("D local descriptors %d, want 8000", n)
	}
	if n := len(vregions(x.PRegs[0])) * int(x.PRegs[0].NumBlocks); n != 4000 {
		t.Errorf("P remote descriptors %d, want 4000", n)
	}
}

func TestWorkedExampleVariants(t *testing.T) {
	t.Run("HMA disabled moves 8 regions x 7 blocks per D rank", func(t *testing.T) {
		x := workedTransfer(t, 2, 4, func(e *plan.Engine) { e.DisableHybrid = true }, "")
		rp := findRankPair(t, x, 0, 1)
		if len(rp.Pairs) != 56 || rp.Bytes != 458752 {
			t.Errorf("%d pairs, %d B; want 56, 458,752", len(rp.Pairs), rp.Bytes)
		}
	})
	t.Run("P TP4 to D TP2 reads two P ranks into split halves", func(t *testing.T) {
		x := workedTransfer(t, 4, 2, nil, "")
		for _, pr := range []int{0, 1} {
			rp := findRankPair(t, x, pr, 0)
			if len(rp.Pairs) != 40 {
				t.Fatalf("D0 <- P%d: %d pairs, want 40", pr, len(rp.Pairs))
			}
			p := rp.Pairs[0]
			// D block_len 16384 split in two 8192-byte halves; P offset 0.
			if p.Len != 8192 || p.Dst.Offset != 100*16384+int64(pr)*8192 || p.Src.Offset != 10*8192 {
				t.Errorf("D0 <- P%d pair 0: %+v", pr, p)
			}
		}
	})
	t.Run("blocks-first puts V at half a page plus the head slot", func(t *testing.T) {
		x := workedTransfer(t, 2, 4, nil, BlocksFirst)
		rp := findRankPair(t, x, 0, 1)
		v := rp.Pairs[10] // first V pair (virtual region 1)
		if v.Seg != SegV || v.Src.Offset != 10*32768+16384+8192 || v.Dst.Offset != 100*16384+8192 {
			t.Errorf("V pair %+v", v)
		}
	})
}

func findRankPair(t *testing.T, x *Transfer, p, d int) RankPair {
	t.Helper()
	for _, rp := range x.RankPairs {
		if rp.P == p && rp.D == d {
			return rp
		}
	}
	t.Fatalf("no rank pair P%d -> D%d", p, d)
	return RankPair{}
}
