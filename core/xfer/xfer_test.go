package xfer

import (
	"github.com/kvscope/kvscope/core/vllm"
	"reflect"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

func seedModel(t testing.TB) *model.Model {
	m := modeltest.Seed(t)
	return m
}

func TestTPMapping(t *testing.T) {
	ratios := []struct{ p, d, want int }{{2, 4, 2}, {4, 2, -2}, {1, 8, 8}, {8, 1, -8}, {3, 2, 0}, {2, 3, 0}, {4, 4, 1}}
	for _, r := range ratios {
		if got := TPRatio(r.p, r.d); got != r.want {
			t.Errorf("TPRatio(P %d, D %d) = %d, want %d", r.p, r.d, got, r.want)
		}
	}
	heads := []struct{ kv, tp, rank, lo, hi int }{
		{8, 4, 1, 2, 4}, // an even share
		{8, 2, 1, 4, 8},
		{2, 4, 3, 1, 2}, // replicated: ranks 2 and 3 hold head 1
		{2, 4, 2, 1, 2},
		{2, 8, 3, 0, 1},
		{1, 4, 3, 0, 1},
	}
	for _, h := range heads {
		if lo, hi := HeadRange(h.kv, h.tp, h.rank); lo != h.lo || hi != h.hi {
			t.Errorf("HeadRange(%d heads, TP %d, rank %d) = [%d,%d), want [%d,%d)", h.kv, h.tp, h.rank, lo, hi, h.lo, h.hi)
		}
	}
	maps := []struct {
		name          string
		kv, p, d, j   int
		mla           bool
		ranks         []int
		factor, reads int
	}{
		{"D >= P reads one rank at slot j%ratio", 8, 2, 4, 3, false, []int{1}, 1, 1},
		{"P > D reads k ranks", 8, 4, 2, 1, false, []int{2, 3}, 0, 2},
		{"D replicates heads: slot from head positions", 2, 2, 4, 3, false, []int{1}, 0, 1},
		{"P > D with replicated P heads dedupes to one rank per head", 2, 8, 2, 1, false, []int{4}, 0, 1},
		{"MLA reads one rank, P > D", 1, 4, 2, 1, true, []int{2}, 0, 1},
		{"MLA reads one rank, D > P", 1, 2, 8, 5, true, []int{1}, 0, 1},
	}
	for _, m := range maps {
		t.Run(m.name, func(t *testing.T) {
			got := newVLLMMapping(m.kv, m.p, m.d, m.j, m.mla)
			if !reflect.DeepEqual(got.Ranks, m.ranks) || got.Factor != m.factor || got.NumReads != m.reads {
				t.Errorf("mapping %+v, want ranks %v factor %d reads %d", got, m.ranks, m.factor, m.reads)
			}
		})
	}
}

func TestConnectorRule(t *testing.T) {
	gqa, mla := modeltest.Load(t, "openai__gpt-oss-20b"), modeltest.Load(t, "deepseek-ai__DeepSeek-V2-Lite")
	tests := []struct {
		conn     string
		gqa, mla bool
	}{
		{"nixl", false, true},
		{"nixl-push", true, true},
		{"offloading", false, false},
		{"simple-cpu-offload", false, false},
		{"multi:nixl+offloading", false, true},
		{"multi:offloading+nixl-push", true, true},
	}
	for _, tt := range tests {
		c, err := ParseConnector(tt.conn)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.NeedsMatchingGroups(gqa); got != tt.gqa {
			t.Errorf("%s on a GQA model: needs matching %v, want %v", tt.conn, got, tt.gqa)
		}
		if got := c.NeedsMatchingGroups(mla); got != tt.mla {
			t.Errorf("%s on an MLA model: needs matching %v, want %v", tt.conn, got, tt.mla)
		}
	}
	for _, bad := range []string{"nccl", "multi:", "multi:nixl+p2p"} {
		if _, err := ParseConnector(bad); err == nil {
			t.Errorf("ParseConnector(%q) accepted", bad)
		}
	}
	// No transport: nothing moves.
	c, _ := ParseConnector("offloading")
	r, err := Run(Setup{Model: gqa, Connector: c, Request: Request{PromptTokens: 100}})
	if err != nil || r.Transfer != nil || !strings.Contains(r.Note, "nothing moves") {
		t.Errorf("offloading: %v, transfer %v, note %q", err, r.Transfer, r.Note)
	}
}

func TestBlockSizeAdvice(t *testing.T) {
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	tests := []struct {
		name    string
		m       *model.Model
		p, d    plan.Engine
		divide  bool
		suggest int
	}{
		{"16 and 48 divide", gpt, plan.Engine{}, plan.Engine{BlockSize: 48}, true, 0},
		{"32 and 48 do not: 48 on both", gpt, plan.Engine{BlockSize: 32}, plan.Engine{BlockSize: 48}, false, 48},
		// P TP2 doubles the target's full block to 1184 next to the drafter;
		// D TP4 plans 304. The block aligned at TP1, 592, makes P 1184 and
		// D 592, which divide.
		{"the seed deployment at TP2 and TP4: 592", seedModel(t), plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7}, false, 592},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pp, err := plan.New(tt.m, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			dp, err := plan.New(tt.m, tt.d)
			if err != nil {
				t.Fatal(err)
			}
			a := BlockSizeAdvice(tt.m, tt.p, tt.d, pp, dp)
			if a.Divide != tt.divide || a.BlockSize != tt.suggest {
				t.Errorf("advice %+v, want divide %v, block size %d", a, tt.divide, tt.suggest)
			}
			if !tt.divide && !strings.Contains(a.Log, "--block-size") {
				t.Errorf("log %q names no --block-size", a.Log)
			}
		})
	}
}

func TestRejections(t *testing.T) {
	br := func(e plan.Engine) plan.Engine { e.VLLMVersion = vllm.Branch; return e }
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	ds := modeltest.Load(t, "deepseek-ai__DeepSeek-V2-Lite")
	dense := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	tests := []struct {
		name   string
		m      *model.Model
		p, d   plan.Engine
		conn   string
		plans  PlanChoice
		prompt int
		rule   string
	}{
		{"different KV cache dtypes", gpt, plan.Engine{}, plan.Engine{KVCacheDType: "fp8"}, "nixl", "", 100, "compatibility-hash"},
		{"TP 2 to TP 1 is accepted", modeltest.Load(t, "Qwen__Qwen3-0.6B"), plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 1}, "nixl", "", 100, ""},
		{"P and D on different vLLM versions", gpt, plan.Engine{VLLMVersion: "0.28.0"}, plan.Engine{VLLMVersion: "0.27.0"}, "nixl", "", 100, "vllm-version"},
		{"a hybrid's block sizes must match before 0.27 (HMA)", gpt, plan.Engine{VLLMVersion: "0.26.0", TensorParallelSize: 2, BlockSize: 32}, plan.Engine{VLLMVersion: "0.26.0", TensorParallelSize: 2, BlockSize: 64}, "nixl", "", 100, "hybrid-block-size"},
		{"a hybrid pushes with one block size too before 0.27", gpt, plan.Engine{VLLMVersion: "0.26.0", TensorParallelSize: 2}, plan.Engine{VLLMVersion: "0.26.0", TensorParallelSize: 2, BlockSize: 32}, "nixl-push", "", 100, "hybrid-block-size"},
		{"a hybrid's block sizes take #49612's path from 0.27", gpt, plan.Engine{TensorParallelSize: 2, BlockSize: 32}, plan.Engine{TensorParallelSize: 2, BlockSize: 64}, "nixl", "", 100, "block-size-ratio"},
		{"a release's block_size_ratio path is named, not modelled", dense, plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 2, BlockSize: 32}, "nixl", "", 100, "block-size-ratio"},
		{"P blocks larger than D's", dense, plan.Engine{BlockSize: 32}, plan.Engine{BlockSize: 16}, "nixl", "", 100, "p-block-larger"},
		{"different block sizes with P TP > D TP", dense, plan.Engine{TensorParallelSize: 2}, plan.Engine{BlockSize: 32}, "nixl", "", 100, "block-size-tp"},
		{"a release's push raises on different layouts", dense, plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 2, BlockSize: 32}, "nixl-push", "", 100, "matching-groups"},
		{"a release does not pull from pipeline stages", dense, plan.Engine{PipelineParallelSize: 2}, plan.Engine{}, "nixl", "", 100, "pull-pp"},
		{"a release has no invariant plans to fall back on", ds, plan.Engine{BlockSize: 32}, plan.Engine{BlockSize: 48}, "nixl", "", 100, "matching-groups"},
		{"MLA with another block size", ds, br(plan.Engine{BlockSize: 16}), br(plan.Engine{BlockSize: 32}), "nixl", IndependentPlans, 100, "mla-plan"},
		{"the group-pair profile pushes between different plans", gpt, br(plan.Engine{TensorParallelSize: 2}), br(plan.Engine{TensorParallelSize: 2, BlockSize: 32}), "nixl-push", IndependentPlans, 100, ""},
		{"a pipeline-parallel push producer with another plan", gpt, br(plan.Engine{PipelineParallelSize: 2}), br(plan.Engine{BlockSize: 32}), "nixl-push", IndependentPlans, 100, "pp-push-plan"},
		{"other speculative conv rows", modeltest.Load(t, "Qwen__Qwen3.5-0.8B"), br(plan.Engine{NumSpeculativeTokens: 2}), br(plan.Engine{}), "nixl", "", 100, "layer-shapes"},
		{"D needs tokens P's sliding window freed", gpt, br(plan.Engine{}), br(plan.Engine{DisableHybrid: true}), "nixl", "", 1000, "window-missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := ParseConnector(tt.conn)
			r, err := Run(Setup{Model: tt.m, P: tt.p, D: tt.d, Connector: c, Plans: tt.plans, Request: Request{PromptTokens: tt.prompt}})
			if err != nil {
				t.Fatal(err)
			}
			if tt.rule == "" {
				if r.Transfer.Rejection != nil {
					t.Fatalf("rejected: %v", r.Transfer.Rejection)
				}
				return
			}
			rej := r.Transfer.Rejection
			if rej == nil || rej.Rule != tt.rule || rej.Detail == "" || rej.Fix == "" {
				t.Fatalf("rejection %+v, want rule %s with a detail and a fix", rej, tt.rule)
			}
		})
	}
	// TP 3 against 2: the planner refuses TP 3 for 16 heads? Qwen3-0.6B
	// has 16 heads and 8 KV heads, so TP 3 cannot even plan; the tp-ratio
	// rule is reached with TP sizes that plan but do not divide.
	m, _ := model.Parse([]byte(`{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":12,"num_key_value_heads":12,"head_dim":64}`))
	c, _ := ParseConnector("nixl")
	r, err := Run(Setup{Model: m, P: plan.Engine{TensorParallelSize: 3}, D: plan.Engine{TensorParallelSize: 2}, Connector: c, Request: Request{PromptTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if rej := r.Transfer.Rejection; rej == nil || rej.Rule != "tp-ratio" {
		t.Errorf("TP 3 -> 2: %+v, want tp-ratio", rej)
	}
}

func TestConnectorsByVersion(t *testing.T) {
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	qwen := modeltest.Load(t, "Qwen__Qwen3.5-0.8B")
	push, _ := ParseConnector("nixl-push")
	pull, _ := ParseConnector("nixl")
	at := func(v string) plan.Engine { return plan.Engine{VLLMVersion: v} }
	t.Run("NixlPushConnector came with 0.24", func(t *testing.T) {
		if _, err := Run(Setup{Model: gpt, P: at("0.23.0"), D: at("0.23.0"), Connector: push, Request: Request{PromptTokens: 100}}); err == nil || !strings.Contains(err.Error(), "no NixlPushConnector") {
			t.Errorf("0.23 push: %v", err)
		}
		if r, err := Run(Setup{Model: gpt, P: at("0.24.0"), D: at("0.24.0"), Connector: push, Request: Request{PromptTokens: 100}}); err != nil || r.Transfer.Rejection != nil {
			t.Errorf("0.24 push: %v", err)
		}
	})
	t.Run("before 0.23 a KV connector turns the hybrid manager off", func(t *testing.T) {
		r, err := Run(Setup{Model: gpt, P: at("0.22.1"), D: at("0.22.1"), Connector: pull, Request: Request{PromptTokens: 100}})
		if err != nil {
			t.Fatal(err)
		}
		pp, _ := r.UsedPlans()
		if pp.NumGroups != 1 || !strings.Contains(r.Note, "full attention") {
			t.Errorf("0.22.1: %d groups, note %q; want one group of full attention", pp.NumGroups, r.Note)
		}
		r, err = Run(Setup{Model: gpt, P: at("0.23.0"), D: at("0.23.0"), Connector: pull, Request: Request{PromptTokens: 100}})
		if pp, _ := r.UsedPlans(); err != nil || pp.NumGroups != 2 {
			t.Errorf("0.23: %v; want gpt-oss's two groups", err)
		}
	})
	t.Run("state layers need the NixlConnector's hybrid support (0.18)", func(t *testing.T) {
		if _, err := Run(Setup{Model: qwen, P: at("0.17.0"), D: at("0.17.0"), Connector: pull, Request: Request{PromptTokens: 100}}); err == nil || !strings.Contains(err.Error(), "cannot move Mamba/GDN state") {
			t.Errorf("0.17 state model: %v", err)
		}
	})
}

func TestBadRequests(t *testing.T) {
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	c, _ := ParseConnector("nixl")
	for _, req := range []Request{{PromptTokens: 1}, {PromptTokens: 100, PrefixHitTokens: -1}, {PromptTokens: 1 << 30}} {
		if _, err := Run(Setup{Model: gpt, Connector: c, Request: req}); err == nil {
			t.Errorf("request %+v accepted", req)
		}
	}
}
