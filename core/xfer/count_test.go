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
