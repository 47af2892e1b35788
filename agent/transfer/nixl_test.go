//go:build nixl && cgo

package transfer_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/agent/transfer/nixltest"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// These tests need NIXL with its UCX plugin installed (see NIXL.md); they
// run two NIXL agents in this process over host memory.

// nixlTransfer computes a real transfer of gpt-oss-20b between small
// engines, with every descriptor pair kept.
func nixlTransfer(t *testing.T, pTP, dTP int, connector string) (*model.Model, *xfer.Transfer) {
	t.Helper()
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	conn, err := xfer.ParseConnector(connector)
	if err != nil {
		t.Fatal(err)
	}
	engine := func(tp int) plan.Engine {
		return plan.Engine{TensorParallelSize: tp, KVCacheMemoryBytes: 32 << 20, MaxModelLen: 1024}
	}
	pd, err := xfer.Run(xfer.Setup{Model: m, P: engine(pTP), D: engine(dTP), Connector: conn,
		Request: xfer.Request{PromptTokens: 300}, KeepPairs: true})
	if err != nil {
		t.Fatal(err)
	}
	x := pd.Transfer
	if x.Rejection != nil {
		t.Fatalf("the transfer is rejected: %v", x.Rejection)
	}
	return m, x
}

// newNIXL makes a backend with the transfer's ranks registered and the
// metadata exchanged.
func newNIXL(t *testing.T, name string, m *model.Model, x *xfer.Transfer) transfer.Backend {
	t.Helper()
	kinds := map[string]string{}
	for _, l := range m.Layers {
		kinds[l.Name] = string(l.Kind)
	}
	b, err := transfer.NewNIXL(name, kinds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := b.Register(append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)); err != nil {
		t.Fatal(err)
	}
	md, err := b.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadRemote(md); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNIXLTransfersAreExact(t *testing.T) {
	tests := []struct {
		name      string
		pTP, dTP  int
		connector string
	}{
		{"D at TP 4 pulls from P at TP 2", 2, 4, "nixl"},
		{"P at TP 4 pushes to D at TP 2", 4, 2, "nixl-push"},
		{"D pulls from P at the same TP", 2, 2, "nixl"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, x := nixlTransfer(t, tt.pTP, tt.dTP, tt.connector)
			b := newNIXL(t, fmt.Sprintf("kvscope-test-%d", i), m, x)
			v, st := nixltest.Move(t, b, m, x, "req-1:done")
			if v != oracle.Exact {
				t.Fatalf("verdict %s", v)
			}
			if st.Bytes != x.Bytes || st.Descs != x.Descs || st.Merged != x.Merged {
				t.Errorf("stats bytes %d descs %d merged %d, want %d %d %d", st.Bytes, st.Descs, st.Merged, x.Bytes, x.Descs, x.Merged)
			}
			// The totals are NIXL's telemetry: measured, by NIXL.
			if st.Timing != event.Measured || st.Source != "nixl" || st.TransferUS <= 0 {
				t.Errorf("stats timing %q source %q transfer %.1f µs, want measured by nixl and > 0", st.Timing, st.Source, st.TransferUS)
			}
			var bytes int64
			descs := 0
			for _, bd := range st.Batches {
				bytes += bd.Bytes
				descs += bd.Descs
				if bd.Timing != event.Synthesized || bd.StartNS < 0 || bd.EndNS < bd.StartNS || float64(bd.EndNS) > st.TransferUS*1e3 {
					t.Fatalf("batch %+v: want synthesized, inside [0, %.0f ns]", bd, st.TransferUS*1e3)
				}
			}
			if bytes != x.Bytes || descs != x.Descs {
				t.Errorf("batches hold %d bytes in %d descs, want %d in %d", bytes, descs, x.Bytes, x.Descs)
			}

			want := 0
			for _, rp := range x.RankPairs {
				if len(rp.Pairs) > 0 {
					want++
				}
			}
			var got []string
			for deadline := time.Now().Add(10 * time.Second); len(got) < want && time.Now().Before(deadline); {
				got = append(got, b.Notifications()...)
				time.Sleep(time.Millisecond)
			}
			if len(got) != want {
				t.Fatalf("got %d notifications %q, want one per rank pair (%d)", len(got), got, want)
			}
			for _, g := range got {
				if g != "req-1:done" {
					t.Errorf("notification %q, want req-1:done", g)
				}
			}
		})
	}
}

func TestNIXLPrepareRejectsDescriptorsOutsideRegions(t *testing.T) {
	m, x := nixlTransfer(t, 2, 4, "nixl")
	b := newNIXL(t, "kvscope-test-range", m, x)
	tests := []struct {
		name   string
		mutate func(q *xfer.Pair, rp *xfer.RankPair)
		want   string
	}{
		{"a source offset past its region's end", func(q *xfer.Pair, rp *xfer.RankPair) {
			q.Src.Offset = x.PRegs[rp.P].Regions[q.Src.Region].Bytes() - q.Len + 1
		}, "outside its"},
		{"a negative destination offset", func(q *xfer.Pair, _ *xfer.RankPair) { q.Dst.Offset = -1 }, "outside its"},
		{"a region the rank does not have", func(q *xfer.Pair, rp *xfer.RankPair) {
			q.Dst.Region = len(x.DRegs[rp.D].Regions)
		}, "has no region"},
		{"a P rank that is not registered", func(_ *xfer.Pair, rp *xfer.RankPair) { rp.P = len(x.PRegs) }, "is not registered"},
		{"an empty descriptor", func(q *xfer.Pair, _ *xfer.RankPair) { q.Len = 0 }, "outside its"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := *x
			bad.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
			rp := &bad.RankPairs[len(bad.RankPairs)-1]
			rp.Pairs = append([]xfer.Pair(nil), rp.Pairs...)
			tt.mutate(&rp.Pairs[len(rp.Pairs)-1], rp)
			if _, err := b.Prepare(&bad); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Prepare: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	t.Run("the untouched transfer still prepares", func(t *testing.T) {
		if _, err := b.Prepare(x); err != nil {
			t.Fatal(err)
		}
	})
}

func TestNIXLNeedsTheMetadataExchange(t *testing.T) {
	_, x := nixlTransfer(t, 2, 2, "nixl")
	b, err := transfer.NewNIXL("kvscope-test-md", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Register(append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(x); err == nil || !strings.Contains(err.Error(), "LoadRemote") {
		t.Errorf("Prepare before LoadRemote: %v, want an error naming LoadRemote", err)
	}
	if err := b.LoadRemote([]byte(`[{"agent":"someone-else-P","side":"P","nixl_md":""}]`)); err == nil {
		t.Error("LoadRemote accepted another process's agent")
	}
	if err := b.LoadRemote([]byte("not json")); err == nil {
		t.Error("LoadRemote accepted metadata that is not JSON")
	}
}

// agreeCase is one deployment and request both backends move.
type agreeCase struct {
	name      string
	model     string
	draft     string // a draft model attached to the target ("": none)
	spec      int    // speculative tokens per step
	pTP, dTP  int
	version   string // "": the newest release; pr58207 plans each engine on its own and moves group pairs
	pBlock    int    // a block size on P (0: the planner's)
	dBlock    int    // a block size on D
	mem       int64  // KV cache memory of the whole model: each rank has mem / TP
	maxLen    int
	prompt    int
	connector string
	differ    bool      // P's and D's plans differ: some layer changes group, slot or block size
	path      xfer.Path // the descriptor path kvscope takes
	reject    string    // the rule kvscope rejects the transfer by ("": it moves)
}

// agreeVerdicts is what one backend made of a case: the oracle's verdict
// on the transfer and on the transfer with one descriptor shifted.
type agreeVerdicts struct {
	moved, shifted oracle.Verdict
}

// agreeMove registers x's ranks with b, moves x and then shifted through
// it, and checks the bytes and the merged descriptor count b reports
// against kvscope's (NIXL's are its telemetry's totalBytes and descCount).
func agreeMove(t *testing.T, b transfer.Backend, m *model.Model, x, shifted *xfer.Transfer) agreeVerdicts {
	t.Helper()
	var out agreeVerdicts
	var st *transfer.Stats
	out.moved, st = nixltest.Move(t, b, m, x, "req:done")
	if st.Bytes != x.Bytes || st.Merged != x.Merged {
		t.Errorf("%s: %d bytes in %d merged descriptors, kvscope computed %d in %d", b.Name(), st.Bytes, st.Merged, x.Bytes, x.Merged)
	}
	out.shifted, _ = nixltest.Move(t, b, m, shifted, "req:done")
	return out
}

// TestNIXLAndHostAgree moves the same requests through NIXL (two agents
// over UCX) and through the host backend: full attention, sliding window,
// gated delta net and Mamba2 state, MLA, pull and push, equal plans and
// different plans (group pairs, some with different group counts), TP
// pairs up to 8. Both get the same verdicts: exact, and wrong for the same
// corrupted descriptor. A deployment kvscope rejects (MLA between
// different plans) moves nothing on either.
//
// The backends run one after the other, so that only one holds the
// deployment's memory at a time (the largest, Qwen3.6-35B-A3B with its
// DFlash draft, registers 1.25 GiB).
func TestNIXLAndHostAgree(t *testing.T) {
	const vllm, pairs = xfer.VLLMPath, xfer.GroupPairPath
	cases := []agreeCase{
		{name: "full attention, D TP 8 pulls from P TP 1", model: "Qwen__Qwen3-0.6B", pTP: 1, dTP: 8, mem: 64 << 20, maxLen: 512, prompt: 300, connector: "nixl", path: vllm},
		{name: "full attention, P TP 8 pushes to D TP 2", model: "Qwen__Qwen3-0.6B", pTP: 8, dTP: 2, mem: 64 << 20, maxLen: 512, prompt: 257, connector: "nixl-push", path: vllm},
		{name: "sliding window, D TP 4 pulls from P TP 2", model: "openai__gpt-oss-20b", pTP: 2, dTP: 4, mem: 64 << 20, maxLen: 1024, prompt: 700, connector: "nixl", path: vllm},
		{name: "sliding window, different plans (block 16 to 32), pull", model: "openai__gpt-oss-20b", pTP: 2, dTP: 2, version: "pr58207", pBlock: 16, dBlock: 32,
			mem: 64 << 20, maxLen: 1024, prompt: 700, connector: "nixl", differ: true, path: pairs},
		{name: "sliding window, different plans (block 32 to 16), push", model: "openai__gpt-oss-20b", pTP: 2, dTP: 4, version: "pr58207", pBlock: 32, dBlock: 16,
			mem: 64 << 20, maxLen: 1024, prompt: 500, connector: "nixl-push", differ: true, path: pairs},
		{name: "gated delta net, D TP 2 pulls from P TP 1", model: "Qwen__Qwen3.5-0.8B", pTP: 1, dTP: 2, mem: 128 << 20, maxLen: 1024, prompt: 600, connector: "nixl", path: vllm},
		{name: "gated delta net, P TP 2 pushes to D TP 1", model: "Qwen__Qwen3.5-0.8B", pTP: 2, dTP: 1, mem: 128 << 20, maxLen: 1024, prompt: 600, connector: "nixl-push", path: vllm},
		{name: "gated delta net, different plans (block 288 to 144), D TP 4 pulls from P TP 2", model: "Qwen__Qwen3.5-0.8B", pTP: 2, dTP: 4, version: "pr58207",
			mem: 64 << 20, maxLen: 512, prompt: 300, connector: "nixl", differ: true, path: pairs},
		{name: "gated delta net, different plans (block 144 to 288), P TP 4 pushes to D TP 2", model: "Qwen__Qwen3.5-0.8B", pTP: 4, dTP: 2, version: "pr58207",
			mem: 64 << 20, maxLen: 512, prompt: 300, connector: "nixl-push", differ: true, path: pairs},
		{name: "gated delta net, different plans (block 144 to 80), D TP 8 pulls from P TP 4", model: "Qwen__Qwen3.5-0.8B", pTP: 4, dTP: 8, version: "pr58207",
			mem: 128 << 20, maxLen: 512, prompt: 300, connector: "nixl", differ: true, path: pairs},
		{name: "gated delta net with a DFlash draft, different plans (10 groups of 5 slots to 8 of 6), D TP 4 pulls from P TP 2", model: "Qwen__Qwen3.6-35B-A3B",
			draft: "z-lab__Qwen3.6-35B-A3B-DFlash", spec: 7, pTP: 2, dTP: 4, version: "pr58207", mem: 640 << 20, maxLen: 320, prompt: 300, connector: "nixl", differ: true, path: pairs},
		{name: "Mamba2, D TP 2 pulls from P TP 1 (group pairs: vLLM's head mapping misses the replicated B and C)", model: "ibm-granite__granite-4.0-h-1b", pTP: 1, dTP: 2, version: "pr58207",
			mem: 128 << 20, maxLen: 1024, prompt: 450, connector: "nixl", path: pairs},
		{name: "Mamba2, different plans (block 1072 to 544), P TP 2 pushes to D TP 4", model: "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", pTP: 2, dTP: 4, version: "pr58207",
			mem: 128 << 20, maxLen: 512, prompt: 300, connector: "nixl-push", differ: true, path: pairs},
		{name: "Mamba2, different plans (block 272 to 544), D TP 4 pulls from P TP 8", model: "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", pTP: 8, dTP: 4, version: "pr58207",
			mem: 128 << 20, maxLen: 512, prompt: 300, connector: "nixl", differ: true, path: pairs},
		{name: "MLA, D TP 1 pulls from P TP 2", model: "deepseek-ai__DeepSeek-V2-Lite", pTP: 2, dTP: 1, mem: 64 << 20, maxLen: 1024, prompt: 200, connector: "nixl", path: vllm},
		{name: "MLA, P TP 2 pushes to D TP 1", model: "deepseek-ai__DeepSeek-V2-Lite", pTP: 2, dTP: 1, mem: 64 << 20, maxLen: 1024, prompt: 200, connector: "nixl-push", path: vllm},
		{name: "MLA, equal plans under the group-pair profile, P TP 2 pushes to D TP 1", model: "deepseek-ai__DeepSeek-V2-Lite", pTP: 2, dTP: 1, version: "pr58207",
			mem: 64 << 20, maxLen: 1024, prompt: 300, connector: "nixl-push", path: vllm},
		// MLA moves one whole replicated block from one P rank: between
		// different plans there is no such block, and kvscope says so.
		{name: "MLA, different plans (block 16 to 32), push: rejected", model: "deepseek-ai__DeepSeek-V2-Lite", pTP: 2, dTP: 1, version: "pr58207", pBlock: 16, dBlock: 32,
			mem: 64 << 20, maxLen: 1024, prompt: 300, connector: "nixl-push", differ: true, reject: "mla-plan"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := modeltest.Load(t, tc.model)
			if tc.draft != "" {
				var err error
				if m, err = m.WithDraft(modeltest.Load(t, tc.draft)); err != nil {
					t.Fatal(err)
				}
			}
			conn, err := xfer.ParseConnector(tc.connector)
			if err != nil {
				t.Fatal(err)
			}
			e := func(tp, block int) plan.Engine {
				return plan.Engine{VLLMVersion: tc.version, TensorParallelSize: tp, BlockSize: block, KVCacheMemoryBytes: tc.mem / int64(tp),
					MaxModelLen: tc.maxLen, NumSpeculativeTokens: tc.spec}
			}
			pd, err := xfer.Run(xfer.Setup{Model: m, P: e(tc.pTP, tc.pBlock), D: e(tc.dTP, tc.dBlock), Connector: conn, Plans: xfer.IndependentPlans,
				Request: xfer.Request{PromptTokens: tc.prompt}, KeepPairs: true})
			if err != nil {
				t.Fatal(err)
			}
			if differ := len(pd.Diff.Changes) > 0; differ != tc.differ {
				t.Fatalf("the plans differ: %v (%d layers change), want %v", differ, len(pd.Diff.Changes), tc.differ)
			}
			x := pd.Transfer
			if tc.reject != "" {
				if x.Rejection == nil || x.Rejection.Rule != tc.reject {
					t.Fatalf("rejection %v, want rule %s", x.Rejection, tc.reject)
				}
				if len(x.RankPairs) != 0 || x.Descs != 0 {
					t.Fatalf("a rejected transfer lists %d rank pairs, %d descriptors: nothing must move", len(x.RankPairs), x.Descs)
				}
				return
			}
			if x.Rejection != nil {
				t.Fatalf("rejected: %v", x.Rejection)
			}
			if x.Path != tc.path {
				t.Fatalf("path %s, want %s", x.Path, tc.path)
			}
			// One descriptor moved one row late on D: both backends copy
			// it there, and the oracle says wrong for both.
			bad := *x
			bad.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
			rp := &bad.RankPairs[0]
			rp.Pairs = append([]xfer.Pair(nil), rp.Pairs...)
			q := &rp.Pairs[len(rp.Pairs)/2]
			q.Dst.Offset += 2
			if q.Dst.Offset+q.Len > x.DRegs[rp.D].Regions[q.Dst.Region].Bytes() {
				q.Dst.Offset -= 4
			}
			regs := append(append([]*xfer.Registration(nil), x.PRegs...), x.DRegs...)

			host := transfer.NewHost(2<<30, nil)
			if err := host.Register(regs); err != nil {
				t.Fatal(err)
			}
			byHost := agreeMove(t, host, m, x, &bad)
			if err := host.Close(); err != nil {
				t.Fatal(err)
			}
			byNIXL := agreeMove(t, newNIXL(t, fmt.Sprintf("kvscope-agree-%d", i), m, x), m, x, &bad)
			if want := (agreeVerdicts{oracle.Exact, oracle.Wrong}); byHost != want || byNIXL != want {
				t.Errorf("verdicts (transfer, shifted descriptor): host %v, nixl %v; want %v from both", byHost, byNIXL, want)
			}
		})
	}
}
