package oracle

import (
	"github.com/kvscope/kvscope/core/vllm"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// transfer plans both engines and computes one request's transfer. Engines
// that name no vLLM version run the group-pair profile, whose geometry
// these tests prove.
func transfer(t testing.TB, m *model.Model, pe, de plan.Engine, req xfer.Request, conn string) *xfer.Transfer {
	t.Helper()
	for _, e := range []*plan.Engine{&pe, &de} {
		if e.VLLMVersion == "" {
			e.VLLMVersion = vllm.Branch
		}
	}
	pp, err := plan.New(m, pe)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := plan.New(m, de)
	if err != nil {
		t.Fatal(err)
	}
	c, err := xfer.ParseConnector(conn)
	if err != nil {
		t.Fatal(err)
	}
	x, err := xfer.Compute(m, pp, dp, req, xfer.Options{Connector: c, Output: xfer.KeepPairs})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestExactCases(t *testing.T) {
	seed := modeltest.Seed(t)
	tests := []struct {
		name string
		m    *model.Model
		p, d plan.Engine
		req  xfer.Request
		path xfer.Path
	}{
		{"gpt-oss-20b TP2 to TP4 matched", modeltest.Load(t, "openai__gpt-oss-20b"), plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 4}, xfer.Request{PromptTokens: 300}, xfer.VLLMPath},
		{"gpt-oss-20b TP4 to TP2 with a prefix hit", modeltest.Load(t, "openai__gpt-oss-20b"), plan.Engine{TensorParallelSize: 4}, plan.Engine{TensorParallelSize: 2}, xfer.Request{PromptTokens: 300, PrefixHitTokens: 64}, xfer.VLLMPath},
		{"gpt-oss-20b block 16 to 32", modeltest.Load(t, "openai__gpt-oss-20b"), plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 2, BlockSize: 32}, xfer.Request{PromptTokens: 300}, xfer.GroupPairPath},
		{"gpt-oss-20b block 16 to 48 (no divide)", modeltest.Load(t, "openai__gpt-oss-20b"), plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2, BlockSize: 48}, xfer.Request{PromptTokens: 301, PrefixHitTokens: 96}, xfer.GroupPairPath},
		{"seed P TP2 to D TP4 independent", seed, plan.Engine{TensorParallelSize: 2, NumSpeculativeTokens: 7, MaxModelLen: 8192}, plan.Engine{TensorParallelSize: 4, NumSpeculativeTokens: 7, MaxModelLen: 8192}, xfer.Request{PromptTokens: 1500}, xfer.GroupPairPath},
		{"Nemotron TP1 to TP2", modeltest.Load(t, "nvidia__NVIDIA-Nemotron-Nano-9B-v2"), plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2}, xfer.Request{PromptTokens: 900}, ""},
		{"DeepSeek-V2-Lite TP2 to TP1", modeltest.Load(t, "deepseek-ai__DeepSeek-V2-Lite"), plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 1}, xfer.Request{PromptTokens: 200}, xfer.VLLMPath},
		// Same block sizes, different groups: whole pages on both sides,
		// one KV head a rank (one pair per page, no loop over heads), and
		// eight heads a rank.
		{"Qwen3.6 TP2 to TP2 grouped by 3 (one head a rank)", modeltest.Load(t, "Qwen__Qwen3.6-35B-A3B-FP8"), plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, GroupSize: 3}, xfer.Request{PromptTokens: 2000}, xfer.GroupPairPath},
		{"gpt-oss-20b TP8 to TP8 grouped by 3 (one head a rank)", modeltest.Load(t, "openai__gpt-oss-20b"), plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 8},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 8, GroupSize: 3}, xfer.Request{PromptTokens: 700}, xfer.GroupPairPath},
		{"gpt-oss-20b TP1 to TP1 grouped by 3 (eight heads a rank)", modeltest.Load(t, "openai__gpt-oss-20b"), plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 1},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 1, GroupSize: 3}, xfer.Request{PromptTokens: 700}, xfer.GroupPairPath},
		// KDA conv and recurrent states beside MLA pages, at equal TP (at
		// different TP sizes kvscope refuses KDA: core/xfer's kda-tp rule).
		{"Kimi-Linear KDA + MLA TP2 to TP2", modeltest.Load(t, "moonshotai__Kimi-Linear-48B-A3B-Instruct"), plan.Engine{TensorParallelSize: 2, MaxModelLen: 32768}, plan.Engine{TensorParallelSize: 2, MaxModelLen: 32768}, xfer.Request{PromptTokens: 1500}, ""},
		{"Llama-4 chunked TP2 to TP4", modeltest.Load(t, "meta-llama__Llama-4-Scout-17B-16E"), plan.Engine{TensorParallelSize: 2, MaxModelLen: 32768}, plan.Engine{TensorParallelSize: 4, MaxModelLen: 32768}, xfer.Request{PromptTokens: 9000}, xfer.GroupPairPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := transfer(t, tt.m, tt.p, tt.d, tt.req, "nixl")
			if x.Rejection != nil {
				t.Fatalf("rejected: %v", x.Rejection)
			}
			if tt.path != "" && x.Path != tt.path {
				t.Errorf("path %s (%s), want %s", x.Path, x.PathReason, tt.path)
			}
			res, err := Check(tt.m, x)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != Exact {
				t.Fatalf("verdict %s: %v", res.Verdict, res.Mismatch)
			}
			t.Logf("%s: %d pairs (%d merged), %d B moved, %d B checked", x.Path, x.Descs, x.Merged, res.Bytes, res.Checked)
		})
	}
}

// TestPushBetweenDifferentPlans: the push connector plans TP-invariantly,
// yet Qwen3.6-35B-A3B-FP8 + DFlash still differs between P TP 2 (the
// target's full layers at 1,184 tokens next to the drafter) and D TP 4
// (592): in the group-pair profile the layers move per group pair, and
// every byte is proven; a release's NixlPushConnector refuses the pair.
func TestPushBetweenDifferentPlans(t *testing.T) {
	target := modeltest.Load(t, "Qwen__Qwen3.6-35B-A3B-FP8")
	m, err := target.WithDraft(modeltest.Load(t, "z-lab__Qwen3.6-35B-A3B-DFlash"))
	if err != nil {
		t.Fatal(err)
	}
	push, _ := xfer.ParseConnector("nixl-push")
	for _, tt := range []struct {
		version string
		rule    string
	}{{vllm.Branch, ""}, {"0.28.0", "mamba-prefix-block-size"}} {
		e := func(tp int) plan.Engine {
			return plan.Engine{VLLMVersion: tt.version, TensorParallelSize: tp, NumSpeculativeTokens: 7, MaxModelLen: 8192}
		}
		r, err := xfer.Run(xfer.Setup{Model: m, P: e(2), D: e(4), Connector: push, KeepPairs: true, Request: xfer.Request{PromptTokens: 700}})
		if err != nil {
			t.Fatal(err)
		}
		x := r.Transfer
		if tt.rule != "" {
			if x.Rejection == nil || x.Rejection.Rule != tt.rule {
				t.Errorf("%s: %+v, want %s", tt.version, x.Rejection, tt.rule)
			}
			continue
		}
		if x.Rejection != nil || x.Path != xfer.GroupPairPath || x.Mode != xfer.Push || r.Diff.SameBlockSizes {
			t.Fatalf("%s: rejection %v, path %s, mode %s, same block sizes %v", tt.version, x.Rejection, x.Path, x.Mode, r.Diff.SameBlockSizes)
		}
		res, err := Check(m, x)
		if err != nil || res.Verdict != Exact {
			t.Errorf("%s: %v %+v", tt.version, err, res)
		}
	}
}
