package xfer

import (
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
