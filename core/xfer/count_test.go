package xfer

import (
	"fmt"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// TestCountOnlyMatchesPairs: counting a transfer's descriptors without
// writing them gives every rank pair's count and the total a full
// computation gives, on vLLM's path and on the group-pair path, for
// attention, sliding-window, state and draft layers, pull and push.
func TestCountOnlyMatchesPairs(t *testing.T) {
	qwen := modeltest.Seed(t)
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	for _, tc := range []struct {
		name      string
		m         bool // qwen
		p, d      plan.Engine
		connector string
		prompt    int
	}{
		{"gpt-oss vLLM path TP2->4", false, plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 4}, "nixl", 1100},
		{"gpt-oss group pairs TP2->4", false, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, BlockSize: 48}, "nixl", 1100},
		{"gpt-oss push TP4->2", false, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, BlockSize: 32}, "nixl-push", 777},
		{"qwen+dflash group pairs TP2->4", true, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7}, "nixl", 4096},
		{"qwen+dflash vLLM path TP4->4", true, plan.Engine{VLLMVersion: "0.33.0", TensorParallelSize: 4, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: "0.33.0", TensorParallelSize: 4, NumSpeculativeTokens: 7}, "nixl", 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := gpt
			if tc.m {
				m = qwen
			}
			pp, err1 := plan.New(m, tc.p)
			dp, err2 := plan.New(m, tc.d)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			c, _ := ParseConnector(tc.connector)
			req := Request{PromptTokens: tc.prompt}
			full, err := Compute(m, pp, dp, req, Options{Connector: c})
			if err != nil || full.Rejection != nil {
				t.Fatal(err, full.Rejection)
			}
			count, err := Compute(m, pp, dp, req, Options{Connector: c, CountOnly: true})
			if err != nil || count.Rejection != nil {
				t.Fatal(err, count.Rejection)
			}
			if count.Descs != full.Descs || count.Path != full.Path || count.Descs == 0 || len(count.RankPairs) != len(full.RankPairs) {
				t.Fatalf("count-only: %d descriptors on %s in %d rank pairs; full: %d on %s in %d", count.Descs, count.Path, len(count.RankPairs), full.Descs, full.Path, len(full.RankPairs))
			}
			if fmt.Sprint(count.Handshake.Checks) != fmt.Sprint(full.Handshake.Checks) || count.Handshake.Matched != full.Handshake.Matched {
				t.Errorf("handshake checks: count-only %v, full %v", count.Handshake.Checks, full.Handshake.Checks)
			}
			for i, rp := range count.RankPairs {
				f := full.RankPairs[i]
				if rp.P != f.P || rp.D != f.D || rp.Descs != f.Descs || rp.Op != f.Op || rp.Pairs != nil {
					t.Errorf("rank pair %d: %d->%d %s %d descs; full %d->%d %s %d", i, rp.P, rp.D, rp.Op, rp.Descs, f.P, f.D, f.Op, f.Descs)
				}
			}
			t.Logf("%s: %d descriptors, path %s", tc.name, full.Descs, full.Path)
		})
	}
}

// TestTalliedInBatchesMatchesKeptPairs: a transfer whose pairs are not
// kept is tallied foldAt pairs at a time as it is made (a long prompt's
// pairs never all exist at once); its totals — per rank pair descriptors,
// merged descriptors and bytes, and every group pair — equal those of the
// same transfer with every pair kept and tallied at the end, and those
// recounted from the kept pairs. The prompts are long enough that runs and
// group pairs cross the batches' edges.
func TestTalliedInBatchesMatchesKeptPairs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		model  string
		p, d   plan.Engine
		prompt int
	}{
		{"Qwen3-0.6B vLLM path TP1->1", "Qwen__Qwen3-0.6B", plan.Engine{TensorParallelSize: 1, MaxModelLen: 1 << 18}, plan.Engine{TensorParallelSize: 1, MaxModelLen: 1 << 18}, 200_000},
		{"gpt-oss vLLM path TP2->4", "openai__gpt-oss-20b", plan.Engine{TensorParallelSize: 2, MaxModelLen: 1 << 17}, plan.Engine{TensorParallelSize: 4, MaxModelLen: 1 << 17}, 100_003},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := modeltest.Load(t, tc.model)
			pp, err1 := plan.New(m, tc.p)
			dp, err2 := plan.New(m, tc.d)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			req := Request{PromptTokens: tc.prompt}
			kept, err := Compute(m, pp, dp, req, Options{KeepPairs: true})
			if err != nil || kept.Rejection != nil {
				t.Fatal(err, kept.Rejection)
			}
			folded, err := Compute(m, pp, dp, req, Options{})
			if err != nil || folded.Rejection != nil {
				t.Fatal(err, folded.Rejection)
			}
			most := 0
			for _, rp := range kept.RankPairs {
				most = max(most, len(rp.Pairs))
			}
			if most < 2*foldAt {
				t.Fatalf("the largest rank pair has %d pairs: too few to be tallied in batches of %d", most, foldAt)
			}
			if folded.Descs != kept.Descs || folded.Merged != kept.Merged || folded.Bytes != kept.Bytes || folded.Path != kept.Path {
				t.Fatalf("in batches: %d descriptors, %d merged, %d bytes on %s; kept: %d, %d, %d on %s",
					folded.Descs, folded.Merged, folded.Bytes, folded.Path, kept.Descs, kept.Merged, kept.Bytes, kept.Path)
			}
			for i, rp := range folded.RankPairs {
				k := kept.RankPairs[i]
				if rp.P != k.P || rp.D != k.D || rp.Descs != k.Descs || rp.Merged != k.Merged || rp.Bytes != k.Bytes || rp.Pairs != nil {
					t.Errorf("rank pair %d->%d in batches: %d descs, %d merged, %d bytes; kept %d, %d, %d", rp.P, rp.D, rp.Descs, rp.Merged, rp.Bytes, k.Descs, k.Merged, k.Bytes)
				}
				if n := MergedCount(k.Pairs); n != k.Merged || len(k.Pairs) != k.Descs {
					t.Errorf("rank pair %d->%d kept: %d pairs, %d merged recounted; its totals %d, %d", k.P, k.D, len(k.Pairs), n, k.Descs, k.Merged)
				}
			}
			if fmt.Sprint(folded.GroupPairs) != fmt.Sprint(kept.GroupPairs) || len(kept.GroupPairs) == 0 {
				t.Errorf("group pairs in batches %v, kept %v", folded.GroupPairs, kept.GroupPairs)
			}
			t.Logf("%d descriptors (%d merged) in %d rank pairs, the largest %d pairs", kept.Descs, kept.Merged, len(kept.RankPairs), most)
		})
	}
}
