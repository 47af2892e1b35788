package xfer_test

import (
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// TestEstimateCostBounds: the cost estimate, made from the plans alone,
// is never below what the transfer then builds (descriptor pairs,
// registered regions), and not wildly above it.
func TestEstimateCostBounds(t *testing.T) {
	cases := []struct {
		name, model string
		pTP, dTP    int
		version     string
		prompt, hit int
		connector   string
	}{
		{"sliding window TP2 to TP4", "openai__gpt-oss-20b", 2, 4, "", 1000, 256, "nixl"},
		{"push TP4 to TP2", "openai__gpt-oss-20b", 4, 2, "", 777, 0, "nixl-push"},
		{"gated delta net TP1 to TP2", "Qwen__Qwen3.5-0.8B", 1, 2, "", 600, 0, "nixl"},
		{"MLA TP2 to TP1", "deepseek-ai__DeepSeek-V2-Lite", 2, 1, "", 200, 0, "nixl"},
		{"Mamba2, group pairs", "ibm-granite__granite-4.0-h-1b", 1, 2, "pr58207", 450, 0, "nixl"},
		{"full attention TP1 to TP8", "Qwen__Qwen3-0.6B", 1, 8, "", 3000, 0, "nixl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := modeltest.Load(t, tc.model)
			conn, err := xfer.ParseConnector(tc.connector)
			if err != nil {
				t.Fatal(err)
			}
			e := func(tp int) plan.Engine {
				return plan.Engine{VLLMVersion: tc.version, TensorParallelSize: tp, KVCacheMemoryBytes: 512 << 20, MaxModelLen: 4096}
			}
			pd, err := xfer.Run(xfer.Setup{Model: m, P: e(tc.pTP), D: e(tc.dTP), Connector: conn, Plans: xfer.IndependentPlans,
				Request: xfer.Request{PromptTokens: tc.prompt, PrefixHitTokens: tc.hit}, KeepPairs: true})
			if err != nil {
				t.Fatal(err)
			}
			x := pd.Transfer
			if x.Rejection != nil {
				t.Fatalf("rejected: %v", x.Rejection)
			}
			pp, dp := pd.UsedPlans()
			c := xfer.EstimateCost(m, pp, dp, x.Request)
			regions := 0
			for _, r := range append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...) {
				regions += len(r.Regions)
			}
			if int64(x.Descs) > c.Pairs || int64(regions) > c.Regions || c.Ranks != int64(tc.pTP+tc.dTP) {
				t.Fatalf("estimate %+v below the transfer: %d pairs, %d regions", c, x.Descs, regions)
			}
			if c.Pairs > 64*int64(x.Descs)+4096 {
				t.Errorf("estimate of %d pairs for %d: too loose to admit work by", c.Pairs, x.Descs)
			}
			if c.OracleBytes < x.Bytes {
				t.Errorf("estimate of %d oracle bytes below the %d bytes moved", c.OracleBytes, x.Bytes)
			}
			pages, slots, maxPage := touched(x)
			if pages > c.Pages || slots > c.PageSlots || maxPage > c.MaxPage {
				t.Errorf("estimate of %d pages, %d page slots, largest page %d B below the transfer's %d, %d, %d B", c.Pages, c.PageSlots, c.MaxPage, pages, slots, maxPage)
			}
			t.Logf("pairs %d (estimate %d), regions %d (%d), bytes moved %d (oracle estimate %d)", x.Descs, c.Pairs, regions, c.Regions, x.Bytes, c.OracleBytes)
		})
	}
}

// touched counts what the byte oracle works with in a transfer: the pages
// its pairs read and write and the pages D allocated for the request (on
// every rank), its page tables' slots (each rank's regions times the
// block ids its side's request pages take) and the largest region block.
func touched(x *xfer.Transfer) (pages, slots, maxPage int64) {
	type page struct {
		side         xfer.Side
		rank, region int
		block        int64
	}
	seen := map[page]bool{}
	add := func(reg *xfer.Registration, at xfer.Loc, n int64) {
		bl := reg.Regions[at.Region].BlockLen
		for b := at.Offset / bl; b*bl < at.Offset+n; b++ {
			seen[page{reg.Side, reg.Rank, at.Region, b}] = true
		}
	}
	for _, rp := range x.RankPairs {
		for _, p := range rp.Pairs {
			add(x.PRegs[rp.P], p.Src, p.Len)
			add(x.DRegs[rp.D], p.Dst, p.Len)
		}
	}
	for _, reg := range x.DRegs {
		for _, l := range reg.Layers {
			for _, s := range l.Segments {
				for _, id := range x.DPages[l.Group].IDs {
					seen[page{reg.Side, reg.Rank, s.Region, int64(id)}] = true
				}
			}
		}
	}
	width := func(groups []xfer.Pages) int64 {
		w := 0
		for _, g := range groups {
			for _, id := range g.IDs {
				w = max(w, id+1)
			}
		}
		return int64(w)
	}
	for _, side := range []struct {
		regs  []*xfer.Registration
		width int64
	}{{x.PRegs, width(x.PPages)}, {x.DRegs, width(x.DPages)}} {
		for _, reg := range side.regs {
			slots += int64(len(reg.Regions)) * side.width
			for _, r := range reg.Regions {
				maxPage = max(maxPage, r.BlockLen)
			}
		}
	}
	return int64(len(seen)), slots, maxPage
}
