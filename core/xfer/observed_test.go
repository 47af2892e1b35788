package xfer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// qwenRank is what a Qwen3-0.6B engine (28 layers, 8 KV heads of 128,
// bfloat16) advertises for one rank at TP tp with blocks of 16 tokens and
// 1 GiB of KV cache memory, derived by hand from vLLM's register_kv_caches
// (nixl-connector.md §1.3) rather than from kvscope: FlashAttention splits
// each layer into a K and a V region (56 regions), a block of a region is
// 16 tokens x 8/tp heads x 128 x 2 bytes, and num_blocks is the memory
// over 28 layers' K+V pages.
func qwenRank(rank, tp int, hash string, version int) Advertised {
	blockLen := int64(16 * (8 / tp) * 128 * 2)
	lens := make([]int64, 56)
	members := make([][]string, 56)
	for i := range lens {
		lens[i] = blockLen
		members[i] = []string{fmt.Sprintf("model.layers.%d.self_attn.attn", i/2)}
	}
	a := Advertised{Rank: rank, EngineID: "engine", CompatHash: hash, Handshake: version, BlockSize: 16, NumBlocks: (1 << 30) / (28 * 2 * blockLen),
		Regions: 56, BlockLens: lens, Layout: "HND", Backend: "FLASH_ATTN"}
	if version >= 4 {
		a.SSMSizes = []int64{0, 0}
	}
	if version >= 12 {
		a.Members = members
	}
	return a
}

func observedSide(side Side, tp int, hash string, version int, change func(*Advertised)) Observed {
	o := Observed{Side: side, Addr: "127.0.0.1:5600"}
	for r := range tp {
		a := qwenRank(r, tp, hash, version)
		if change != nil {
			change(&a)
		}
		o.Ranks = append(o.Ranks, a)
	}
	return o
}

// TestPreflightObserved: two running engines' advertised metadata is
// judged on its own (the rules the values decide) and against kvscope's
// plan of each side; the plan's verdict holds only for engines that run
// it.
func TestPreflightObserved(t *testing.T) {
	m := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	pull, _ := ParseConnector("nixl")
	eng := func(tp int) plan.Engine {
		return plan.Engine{VLLMVersion: "0.31.0", TensorParallelSize: tp, MaxModelLen: 4096, KVCacheMemoryBytes: 1 << 30}
	}
	r, err := Run(Setup{Model: m, P: eng(1), D: eng(2), Connector: pull, Request: Request{PromptTokens: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	r.Preflight = r.PreflightOf(r.Transfer)
	if r.Preflight.Verdict != "ok" {
		t.Fatalf("the plans' preflight: %s", r.Preflight.Sentence)
	}
	tests := []struct {
		name      string
		p, d      Observed
		verdict   string
		rule      string   // the rejection's rule
		sentence  string   // in the sentence
		diffs     []string // side and field of every difference
		asPlanned bool
	}{
		{"engines that run the plans", observedSide(P, 1, "h", 12, nil), observedSide(D, 2, "h", 12, nil),
			"ok", "", "advertise what kvscope plans for them", nil, true},
		{"only the block count differs from the plan", observedSide(P, 1, "h", 12, func(a *Advertised) { a.NumBlocks = 4000 }), observedSide(D, 2, "h", 12, nil),
			"ok", "", "kvscope's preflight holds", []string{"P num_blocks"}, true},
		{"hashes differ", observedSide(P, 1, "h1", 12, nil), observedSide(D, 2, "h2", 12, nil),
			"rejected", "compatibility-hash", "P's compatibility hash h1 differs from D's h2", nil, true},
		{"a version 3 P and a version 12 D", observedSide(P, 1, "h1", 3, nil), observedSide(D, 2, "h2", 12, nil),
			"rejected", "compatibility-hash", "the handshake versions their members imply (v3 and v12) differ", []string{"P nixl_connector_version"}, false},
		{"an unwrapped P and a wrapped D", observedSide(P, 1, "", 0, nil), observedSide(D, 2, "h", 12, nil),
			"rejected", "handshake-payload", "P sends the bare metadata", []string{"P nixl_connector_version"}, false},
		{"layouts differ", observedSide(P, 1, "h", 12, nil), observedSide(D, 2, "h", 12, func(a *Advertised) { a.Layout = "NHD" }),
			"rejected", "kv-cache-layout", "P's KV cache layout is HND, D's NHD", []string{"D kv_cache_layout"}, false},
		{"D blocks not a multiple of P's", observedSide(P, 1, "h", 12, nil), observedSide(D, 2, "h", 12, func(a *Advertised) { a.BlockSize = 24 }),
			"rejected", "block-size-ratio", "not a multiple of P's 16", []string{"D block_size"}, false},
		{"D blocks twice P's", observedSide(P, 1, "h", 12, nil), observedSide(D, 2, "h", 12, func(a *Advertised) { a.BlockSize = 32 }),
			"unverified", "", "differ from kvscope's plans in D block_size", []string{"D block_size"}, false},
		{"a region of other layers", observedSide(P, 1, "h", 12, func(a *Advertised) { a.Members[3] = []string{"model.layers.5.self_attn.attn"} }), observedSide(D, 2, "h", 12, nil),
			"unverified", "", "P region_members[3]", []string{"P region_members[3]"}, false},
		{"a region of other block length", observedSide(P, 1, "h", 12, func(a *Advertised) { a.BlockLens = slices.Clone(a.BlockLens); a.BlockLens[9] = 16384 }), observedSide(D, 2, "h", 12, nil),
			"unverified", "", "P block_lens[9]", []string{"P block_lens[9]"}, false},
		{"D's ranks of two engines", observedSide(P, 1, "h", 12, nil), observedSide(D, 2, "h", 12, func(a *Advertised) { a.EngineID = fmt.Sprint("engine-", a.Rank) }),
			"ok", "", "kvscope's preflight holds", []string{"D engine_id"}, true},
		{"state that does not split alike", observedSide(P, 1, "h", 12, func(a *Advertised) { a.SSMSizes = []int64{100, 400} }), observedSide(D, 2, "h", 12, func(a *Advertised) { a.SSMSizes = []int64{60, 200} }),
			"rejected", "state-sizes", "100 conv bytes per rank at TP 1, D's 60 at TP 2", []string{"P ssm_sizes", "D ssm_sizes"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := r.PreflightObserved(tt.p, tt.d)
			rule := ""
			if op.Rejection != nil {
				rule = op.Rejection.Rule
			}
			if op.Verdict != tt.verdict || rule != tt.rule || !strings.Contains(op.Sentence, tt.sentence) || op.AsPlanned != tt.asPlanned {
				t.Errorf("verdict %s, rule %q, as planned %v: %s\nwant %s, %q, %v, with %q", op.Verdict, rule, op.AsPlanned, op.Sentence, tt.verdict, tt.rule, tt.asPlanned, tt.sentence)
			}
			var diffs []string
			for _, df := range op.Differences {
				diffs = append(diffs, string(df.Side)+" "+df.Field)
			}
			if !slices.Equal(diffs, tt.diffs) {
				t.Errorf("differences %q, want %q: %+v", diffs, tt.diffs, op.Differences)
			}
		})
	}
}

// TestDiffObserved: each difference names the field, both values and
// where the observation was read; ranks that differ alike are one line,
// and vllm:cache_config_info is held against the plan too.
func TestDiffObserved(t *testing.T) {
	m := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	pull, _ := ParseConnector("nixl")
	e := plan.Engine{VLLMVersion: "0.31.0", TensorParallelSize: 2, MaxModelLen: 4096, KVCacheMemoryBytes: 1 << 30}
	r, err := Prepare(Setup{Model: m, P: e, D: e, Connector: pull})
	if err != nil {
		t.Fatal(err)
	}
	d := observedSide(D, 2, "h", 12, func(a *Advertised) { a.BlockSize = 32 })
	d.CacheConfig = map[string]string{"block_size": "32", "num_gpu_blocks": "1170", "cache_dtype": "fp8"}
	d.CacheSource = "http://127.0.0.1:8000/metrics"
	got := r.DiffObserved(d)
	want := []Difference{
		{Side: D, Field: "block_size", Observed: "32", Source: "side channel 127.0.0.1:5600 ranks 0, 1", Expected: "16", From: FromPlan, Rule: Validated},
		{Side: D, Field: "block_size", Observed: "32", Source: "vllm:cache_config_info http://127.0.0.1:8000/metrics", Expected: "16", From: FromPlan, Rule: Validated},
		{Side: D, Field: "cache_dtype", Observed: "fp8", Source: "vllm:cache_config_info http://127.0.0.1:8000/metrics", Expected: "auto", From: FromPlan, Rule: Hashed},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	f := d.Facts()
	if !f.Observed || f.TP != 2 || f.KVCacheDType != "fp8" || handshakeText(f) != "12 or later" {
		t.Errorf("facts %+v (handshake %q)", f, handshakeText(f))
	}
}
