package xfer

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// TestConnectorRulesByRelease: each release refuses what its NixlConnector
// refuses, names the rule, the release that lifts it and its pull
// request, and quotes vLLM's error where its text is known. The release
// boundaries are the table's (vLLM's compatibility page and the PRs named
// there); the pairs are chosen so that exactly one rule decides.
func TestConnectorRulesByRelease(t *testing.T) {
	gdn := modeltest.Load(t, "Qwen__Qwen3.5-0.8B")
	mamba2 := modeltest.Load(t, "nvidia__NVIDIA-Nemotron-Nano-9B-v2")
	dense := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	kimi := modeltest.Load(t, "moonshotai__Kimi-Linear-48B-A3B-Instruct")
	// A small Mamba1 model: 4 Mamba layers.
	mamba1, err := model.Parse([]byte(`{"model_type":"mamba","num_hidden_layers":4,"hidden_size":256,"state_size":16,"conv_kernel":4,"expand":2}`))
	if err != nil {
		t.Fatal(err)
	}
	qwenDFlash, err := modeltest.Load(t, "Qwen__Qwen3.6-35B-A3B-FP8").WithDraft(modeltest.Load(t, "z-lab__Qwen3.6-35B-A3B-DFlash"))
	if err != nil {
		t.Fatal(err)
	}
	// spec is the DFlash deployment at one TP: TP 2 and TP 4 align the
	// attention block to different state pages (1104 and 560 tokens).
	spec := func(tp int, prefix string) plan.Engine {
		return plan.Engine{TensorParallelSize: tp, NumSpeculativeTokens: 7, MaxModelLen: 8192, PrefixCaching: prefix}
	}
	pull, _ := ParseConnector("nixl")
	push, _ := ParseConnector("nixl-push")
	tests := []struct {
		name      string
		m         *model.Model
		version   string
		p, d      plan.Engine
		conn      Connector
		rule      string // "" accepted
		since     string // the release that accepts it ("" none)
		vllmError string
	}{
		{"GDN P TP1 -> D TP2 on 0.20.0", gdn, "0.20.0", plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2}, pull, "gdn-tp", "0.22.0", "require homogeneous TP"},
		{"GDN P TP1 -> D TP2 on 0.21.0", gdn, "0.21.0", plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2}, pull, "gdn-tp", "0.22.0", "require homogeneous TP"},
		{"GDN P TP1 -> D TP2 on 0.31.0", gdn, "0.31.0", plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2}, pull, "", "", ""},
		{"GDN at equal TP on 0.20.0", gdn, "0.20.0", plan.Engine{}, plan.Engine{}, pull, "", "", ""},
		{"Mamba2 P TP1 -> D TP2 on 0.19.0", mamba2, "0.19.0", plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2}, pull, "mamba2-tp", "0.20.0", "require homogeneous TP"},
		{"Mamba2 P TP1 -> D TP2 on 0.20.0", mamba2, "0.20.0", plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2}, pull, "", "", ""},
		{"Mamba1 on 0.24.0", mamba1, "0.24.0", plan.Engine{}, plan.Engine{}, pull, "mamba1-state", "0.25.0", ""},
		{"Mamba1 on 0.25.0", mamba1, "0.25.0", plan.Engine{}, plan.Engine{}, pull, "", "", ""},
		{"Mamba prefix caching on 0.22.0", mamba2, "0.22.0", plan.Engine{PrefixCaching: "on"}, plan.Engine{PrefixCaching: "on"}, pull, "mamba-prefix-caching", "0.23.0", ""},
		{"Mamba prefix caching on 0.23.0", mamba2, "0.23.0", plan.Engine{PrefixCaching: "on"}, plan.Engine{PrefixCaching: "on"}, pull, "", "", ""},
		{"a Mamba hybrid's two block sizes with prefix caching on 0.31.0", qwenDFlash, "0.31.0", spec(2, ""), spec(4, ""), pull, "mamba-prefix-block-size", "", ""},
		{"a Mamba hybrid's two block sizes without prefix caching on 0.31.0", qwenDFlash, "0.31.0", spec(2, "off"), spec(4, "off"), pull, "block-size-ratio", "", ""},
		{"a Mamba hybrid's two block sizes on 0.26.0", qwenDFlash, "0.26.0", spec(2, ""), spec(4, ""), pull, "hybrid-block-size", "0.27.0", "HMA does not support different remote block size yet"},
		{"KDA P TP1 -> D TP2 on 0.31.0 (no release read moves it)", kimi, "0.31.0", plan.Engine{TensorParallelSize: 1, BlockSize: 128, MaxModelLen: 32768}, plan.Engine{TensorParallelSize: 2, BlockSize: 128, MaxModelLen: 32768}, pull, "kda-tp", "", ""},
		{"KDA at equal TP on 0.31.0", kimi, "0.31.0", plan.Engine{MaxModelLen: 32768}, plan.Engine{MaxModelLen: 32768}, pull, "", "", ""},
		{"dense P TP2 -> D TP1 on 0.11.1", dense, "0.11.1", plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 1}, pull, "p-tp-greater", "0.12.0", "Decode TP cannot be smaller than prefill TP"},
		{"dense P TP2 -> D TP1 on 0.12.0", dense, "0.12.0", plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 1}, pull, "", "", ""},
		{"a hybrid with two block sizes on 0.26.0", gpt, "0.26.0", plan.Engine{}, plan.Engine{BlockSize: 32}, pull, "hybrid-block-size", "0.27.0", "HMA does not support different remote block size yet"},
		{"a hybrid with two block sizes on 0.31.0 takes vLLM's path", gpt, "0.31.0", plan.Engine{}, plan.Engine{BlockSize: 32}, pull, "block-size-ratio", "", ""},
		{"pull from pipeline stages on 0.31.0", dense, "0.31.0", plan.Engine{PipelineParallelSize: 2}, plan.Engine{}, pull, "pull-pp", "", "does not support PP-disaggregated KV transfer"},
		{"push from pipeline stages of a hybrid on 0.30.0", gpt, "0.30.0", plan.Engine{PipelineParallelSize: 2}, plan.Engine{}, push, "push-pp-hybrid", "0.31.0", ""},
		{"push from pipeline stages of a dense model on 0.24.0", dense, "0.24.0", plan.Engine{PipelineParallelSize: 2}, plan.Engine{}, push, "", "", ""},
		{"push from pipeline stages of a state model on 0.31.0", gdn, "0.31.0", plan.Engine{PipelineParallelSize: 2}, plan.Engine{}, push, "push-pp-state", "", "pipeline_parallel_size > 1 with Mamba"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.p.VLLMVersion, tt.d.VLLMVersion = tt.version, tt.version
			r, err := Run(Setup{Model: tt.m, P: tt.p, D: tt.d, Connector: tt.conn, Request: Request{PromptTokens: 100}})
			if err != nil {
				t.Fatal(err)
			}
			rej := r.Transfer.Rejection
			if tt.rule == "" {
				if rej != nil {
					t.Fatalf("rejected: %v", rej)
				}
				return
			}
			if rej == nil || rej.Rule != tt.rule {
				t.Fatalf("rejection %+v, want rule %s", rej, tt.rule)
			}
			if tt.rule == "block-size-ratio" { // kvscope's own: vLLM accepts it on a path kvscope does not model
				if !strings.Contains(rej.Detail, "#49612") || !strings.Contains(rej.Detail, "does not model") {
					t.Errorf("detail %q: want vLLM's path (#49612) named as not modelled", rej.Detail)
				}
				return
			}
			if rej.Since != tt.since || !strings.Contains(rej.VLLMError, tt.vllmError) || rej.Source == "" || !strings.Contains(rej.Detail, "vLLM "+tt.version) {
				t.Errorf("rejection %+v: want accepted from %q, vLLM's error naming %q, a source and the release", rej, tt.since, tt.vllmError)
			}
			if tt.since != "" && !strings.Contains(rej.Fix, "vLLM "+tt.since+" accepts it") {
				t.Errorf("fix %q does not name the release that accepts it", rej.Fix)
			}
		})
	}
}

// TestHeteroTPStateNeedsTheDSLayout: a state transfer between different
// TP sizes names the DS conv layout vLLM asserts on; one at equal TP on a
// release before GDN support says it is inferred.
func TestHeteroTPStateNeedsTheDSLayout(t *testing.T) {
	gdn := modeltest.Load(t, "Qwen__Qwen3.5-0.8B")
	pull, _ := ParseConnector("nixl")
	r, err := Run(Setup{Model: gdn, P: plan.Engine{TensorParallelSize: 1}, D: plan.Engine{TensorParallelSize: 2}, Connector: pull, Request: Request{PromptTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Transfer.Handshake.Checks, func(c Check) bool {
		return c.Rule == "ssm-conv-layout" && strings.Contains(c.Detail, "VLLM_SSM_CONV_STATE_LAYOUT=DS")
	}) {
		t.Errorf("checks %+v name no DS conv layout", r.Transfer.Handshake.Checks)
	}
	r, err = Run(Setup{Model: gdn, P: plan.Engine{VLLMVersion: "0.20.0"}, D: plan.Engine{VLLMVersion: "0.20.0"}, Connector: pull, Request: Request{PromptTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Transfer.Handshake.VLLMInferred, func(s string) bool { return strings.Contains(s, "#41869") }) {
		t.Errorf("inferred %q: the pre-#41869 GDN transfer is not marked inferred", r.Transfer.Handshake.VLLMInferred)
	}
}

// TestHandshakeOfEachRelease: pd's handshake is the release's: its
// NIXL_CONNECTOR_VERSION, members and hash; kvscope's version 15 and its
// per-member groups only in the branch profile.
func TestHandshakeOfEachRelease(t *testing.T) {
	gdn := modeltest.Load(t, "Qwen__Qwen3.5-0.8B")
	pull, _ := ParseConnector("nixl")
	tests := []struct {
		version     string
		want        int
		hash, names bool
	}{
		{"0.10.0", 0, false, false},
		{"0.20.0", 3, true, false},
		{"0.30.0", 11, true, false},
		{"0.31.0", 12, true, true},
		{vllm.Branch, 15, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			e := plan.Engine{VLLMVersion: tt.version}
			m := gdn
			if tt.version == "0.10.0" {
				m = modeltest.Load(t, "Qwen__Qwen3-0.6B") // no state transfer before 0.18
			}
			r, err := Run(Setup{Model: m, P: e, D: e, Connector: pull, Request: Request{PromptTokens: 100}})
			if err != nil {
				t.Fatal(err)
			}
			hs := r.Transfer.Handshake
			md := hs.P[0]
			if hs.Protocol.Version != tt.want || md.Version != tt.want || !strings.HasPrefix(hs.Summary(), "v"+strconv.Itoa(tt.want)+" ") {
				t.Errorf("protocol %d, metadata %d, summary %q; want version %d", hs.Protocol.Version, md.Version, hs.Summary(), tt.want)
			}
			if (md.CompatHash != "") != tt.hash {
				t.Errorf("hash %q, want one: %v", md.CompatHash, tt.hash)
			}
			if (md.MemberNames != nil) != tt.names || (md.Members != nil) != (tt.want == HandshakeVersion) {
				t.Errorf("member names %v, members %v", md.MemberNames != nil, md.Members != nil)
			}
		})
	}
}

// TestPushPrefixHitBefore48758: a push with a D prefix hit on a release
// before #48758 says that vLLM trimmed the head; from 0.26.0 it does not.
func TestPushPrefixHitBefore48758(t *testing.T) {
	dense := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	push, _ := ParseConnector("nixl-push")
	for _, tt := range []struct {
		version string
		warned  bool
	}{{"0.24.0", true}, {"0.25.1", true}, {"0.26.0", false}} {
		e := plan.Engine{VLLMVersion: tt.version}
		r, err := Run(Setup{Model: dense, P: e, D: e, Connector: push, Request: Request{PromptTokens: 400, PrefixHitTokens: 128}})
		if err != nil {
			t.Fatal(err)
		}
		warned := slices.ContainsFunc(r.Transfer.Inferred, func(s string) bool { return strings.Contains(s, "#48758") })
		if warned != tt.warned {
			t.Errorf("%s: warned %v (%q), want %v", tt.version, warned, r.Transfer.Inferred, tt.warned)
		}
	}
}

// TestKDATransferSaysItIsInferred: an accepted Kimi-Linear transfer (equal
// TP) says that whether vLLM's NixlConnector moves KDA state was not read.
func TestKDATransferSaysItIsInferred(t *testing.T) {
	kimi := modeltest.Load(t, "moonshotai__Kimi-Linear-48B-A3B-Instruct")
	pull, _ := ParseConnector("nixl")
	e := plan.Engine{VLLMVersion: "0.31.0", MaxModelLen: 32768}
	r, err := Run(Setup{Model: kimi, P: e, D: e, Connector: pull, Request: Request{PromptTokens: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Transfer.Rejection != nil {
		t.Fatalf("rejected: %v", r.Transfer.Rejection)
	}
	if !slices.ContainsFunc(r.Transfer.Inferred, func(s string) bool { return strings.Contains(s, "moves KDA state was not read") }) {
		t.Errorf("inferred %q does not say the KDA transfer is inferred", r.Transfer.Inferred)
	}
}

// TestDifferentKAndVHeadSizesAreRefused: MiMo-V2-Flash's layers keep K
// heads of 192 and V heads of 128 (vLLM's DiffKV backend, whose layout
// kvscope has not read): a transfer is an error naming the layer and both
// sizes, never a geometry that overruns the page.
func TestDifferentKAndVHeadSizesAreRefused(t *testing.T) {
	m, err := modeltest.LoadTestdata(t, "DERIVED__MiMo-V2-Flash")
	if err != nil {
		t.Fatal(err)
	}
	pull, _ := ParseConnector("nixl")
	e := plan.Engine{TensorParallelSize: 4, MaxModelLen: 32768}
	_, err = Run(Setup{Model: m, P: e, D: e, Connector: pull, Request: Request{PromptTokens: 100}})
	if err == nil || !strings.Contains(err.Error(), "layer L0: K heads of 192 and V heads of 128") || !strings.Contains(err.Error(), "DiffKV") {
		t.Errorf("error %v, want one naming layer L0, both head sizes and DiffKV", err)
	}
}
