package xfer

import (
	"fmt"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// This file is the NixlConnector's rules per release: which P/D pairs a
// release's connector refuses before any descriptor is built, per model
// kind (dense/MoE, MLA, Mamba2, gated delta net, Mamba1, KDA, MLA + Mamba),
// per block size, pipeline parallelism and mode. Each rule names the
// profile row (core/vllm) that lifted it, so a refusal can say from which
// release and pull request the pair would be accepted, and words the
// refusal as vLLM's error does where its text is known.

// connectorRule is one rule: when it applies to a pair, whether the
// profile allows it, and what vLLM says when it does not.
type connectorRule struct {
	name string
	// family and source find the profile row that lifts the rule; a rule
	// without a family is lifted by no release kvscope has read (source
	// then names the open pull request, if any).
	family, source string
	applies        func(c *ruleCase) bool
	allowed        func(p vllm.Profile) bool
	detail         func(c *ruleCase) string // the pair, in neutral words
	why            string                   // why a release without the rule refuses it
	vllmError      string                   // vLLM's own words where known
	fix            string
	// when says when vLLM refuses, where it is not WhenRefused.
	when string
}

// ruleCase is the pair a rule looks at.
type ruleCase struct {
	m        *model.Model
	pp, dp   *plan.Plan
	pTP, dTP int
	mode     Mode
	hybrid   bool // the hybrid KV cache manager plans more than one kind
}

func (c *ruleCase) has(k model.Kind) bool { return c.m.HasKind(k) }

// mambaPrefix: either engine keeps state for prefix caching.
func (c *ruleCase) mambaPrefix() bool {
	on := func(m string) bool { return m != "" && m != "none" }
	return on(c.pp.Engine.MambaCacheMode) || on(c.dp.Engine.MambaCacheMode)
}
func (c *ruleCase) state() bool {
	return c.has(model.Mamba1) || c.has(model.Mamba2) || c.has(model.GatedDeltaNet) || c.has(model.KDA)
}

var connectorRules = []connectorRule{
	{
		name: "p-tp-greater", family: "tp", source: "#27274",
		applies: func(c *ruleCase) bool { return c.pTP > c.dTP },
		allowed: func(p vllm.Profile) bool { return p.PGreaterTP },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("P TP %d > D TP %d", c.pTP, c.dTP)
		},
		why:       "its D ranks read from one P rank each",
		vllmError: "Decode TP cannot be smaller than prefill TP",
		fix:       "give D a TP size that is a multiple of P's",
	},
	{
		name: "mamba1-state", family: "mamba1", source: "#45019",
		applies: func(c *ruleCase) bool { return c.has(model.Mamba1) },
		allowed: func(p vllm.Profile) bool { return p.Mamba1Connector },
		detail: func(c *ruleCase) string {
			return "Mamba1 state"
		},
		why: "it does not move Mamba1 state",
		fix: "serve the model without P/D disaggregation, or on a release that moves Mamba1 state",
	},
	{
		name: "gdn-tp", family: "gdn", source: "#41869",
		applies: func(c *ruleCase) bool { return c.has(model.GatedDeltaNet) && c.pTP != c.dTP },
		allowed: func(p vllm.Profile) bool { return p.GDNConnector },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("gated-delta-net state between P TP %d and D TP %d", c.pTP, c.dTP)
		},
		why:       "it has no gated-delta-net path, and hybrid SSM models need P TP == D TP",
		vllmError: "Hybrid SSM (Mamba) models require homogeneous TP (P TP == D TP). Heterogeneous TP is not yet supported for Mamba layers.",
		fix:       "give P and D the same --tensor-parallel-size",
	},
	{
		// No release kvscope has read says whether its NixlConnector moves
		// KDA state (Kimi-Linear) between different TP sizes, so none is
		// taken to.
		name: "kda-tp", family: "", source: "",
		applies: func(c *ruleCase) bool { return c.has(model.KDA) && c.pTP != c.dTP },
		allowed: func(p vllm.Profile) bool { return false },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("KDA state between P TP %d and D TP %d", c.pTP, c.dTP)
		},
		why: "kvscope has not read a release that moves KDA state between different TP sizes, and hybrid SSM models need P TP == D TP",
		fix: "give P and D the same --tensor-parallel-size",
	},
	{
		name: "mamba2-tp", family: "mamba2", source: "#37635",
		applies: func(c *ruleCase) bool { return c.has(model.Mamba2) && c.pTP != c.dTP },
		allowed: func(p vllm.Profile) bool { return p.Mamba2HeteroTP },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("Mamba2 state between P TP %d and D TP %d", c.pTP, c.dTP)
		},
		why:       "hybrid SSM models need P TP == D TP",
		vllmError: "Hybrid SSM (Mamba) models require homogeneous TP (P TP == D TP). Heterogeneous TP is not yet supported for Mamba layers.",
		fix:       "give P and D the same --tensor-parallel-size",
	},
	{
		name: "hybrid-mla-state", family: "hybrid mla", source: "#49762",
		applies: func(c *ruleCase) bool { return c.has(model.MLA) && c.state() },
		allowed: func(p vllm.Profile) bool { return p.HybridMLA },
		detail: func(c *ruleCase) string {
			return "an MLA + state hybrid"
		},
		why: "it moves MLA or state caches, not both in one model",
		fix: "serve the model without P/D disaggregation, or on a release that moves hybrid MLA + state models",
	},
	{
		name: "mamba-prefix-caching", family: "mamba prefix", source: "#42554",
		applies: func(c *ruleCase) bool { return c.state() && c.mambaPrefix() },
		allowed: func(p vllm.Profile) bool { return p.NixlMambaPrefix },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("state layers with Mamba prefix caching (mamba cache mode %s on P, %s on D)", c.pp.Engine.MambaCacheMode, c.dp.Engine.MambaCacheMode)
		},
		why:  "it has no Mamba prefix-caching mode, which #42554 added; whether it raised or moved the wrong state was not read, inferred",
		fix:  "turn prefix caching off on both engines (--no-enable-prefix-caching)",
		when: "at the first request, by raising or by moving state the decode engine cannot use (which of the two was not read, inferred)",
	},
	{
		name: "hybrid-mla-tp", family: "hybrid mla", source: "#49297",
		applies: func(c *ruleCase) bool { return c.has(model.MLA) && c.state() && c.pTP > c.dTP },
		allowed: func(p vllm.Profile) bool { return p.HybridMLAPGreaterTP },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("an MLA + state hybrid with P TP %d > D TP %d", c.pTP, c.dTP)
		},
		why: "its hybrid MLA + Mamba path reads from one P rank per D rank",
		fix: "give D a TP size at least P's",
	},
	{
		name: "hybrid-block-size", family: "block size", source: "#49612",
		applies: func(c *ruleCase) bool {
			return !c.pp.Profile.GroupPairs && c.hybrid && c.pp.BlockSize != c.dp.BlockSize
		},
		allowed: func(p vllm.Profile) bool { return p.HybridBlockSizes },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("P blocks of %d tokens, D blocks of %d, with the hybrid KV cache manager", c.pp.BlockSize, c.dp.BlockSize)
		},
		why:       "the hybrid manager needs one block size on both sides",
		vllmError: "HMA does not support different remote block size yet",
		fix:       "give P and D the same --block-size (for a hybrid, the same TP-dependent alignment: equal TP or an explicit --block-size)",
	},
	{
		name: "mamba-prefix-block-size", family: "", source: "#51527 (open)",
		applies: func(c *ruleCase) bool {
			return !c.pp.Profile.GroupPairs && c.state() && c.mambaPrefix() && c.pp.BlockSize != c.dp.BlockSize
		},
		allowed: func(p vllm.Profile) bool { return false },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("P blocks of %d tokens, D blocks of %d, with Mamba prefix caching", c.pp.BlockSize, c.dp.BlockSize)
		},
		why: "prefix caching needs one logical block size on P and D for Mamba hybrids",
		fix: "turn prefix caching off on both engines (--no-enable-prefix-caching), or give P and D one --block-size",
	},
	{
		name: "p-block-larger", family: "", source: "#45443 (open)",
		applies: func(c *ruleCase) bool {
			return !c.pp.Profile.GroupPairs && !c.hybrid && c.pp.BlockSize > c.dp.BlockSize
		},
		allowed: func(p vllm.Profile) bool { return false },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("P blocks of %d tokens, larger than D's %d", c.pp.BlockSize, c.dp.BlockSize)
		},
		why: "only P block size < D block size is supported",
		fix: "give D a --block-size that is a multiple of P's",
	},
	{
		name: "block-size-tp", family: "", source: "",
		applies: func(c *ruleCase) bool {
			return !c.pp.Profile.GroupPairs && c.pTP > c.dTP && c.pp.BlockSize != c.dp.BlockSize
		},
		allowed: func(p vllm.Profile) bool { return false },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("blocks of %d and %d tokens with P TP %d > D TP %d", c.pp.BlockSize, c.dp.BlockSize, c.pTP, c.dTP)
		},
		why:       "different block sizes need P TP <= D TP",
		vllmError: "Different local/remote block sizes are not supported when P TP > D TP.",
		fix:       "give P and D the same --block-size",
	},
	{
		name: "pull-pp", family: "", source: "#53360 (open)",
		applies: func(c *ruleCase) bool {
			return !c.pp.Profile.GroupPairs && c.mode == Pull && c.pp.Engine.PipelineParallelSize > 1
		},
		allowed: func(p vllm.Profile) bool { return false },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("P runs %d pipeline stages and D pulls", c.pp.Engine.PipelineParallelSize)
		},
		why:       "it pulls from P ranks of one pipeline stage only",
		vllmError: "NixlConnector received pp_rank > 0 handshake metadata but does not support PP-disaggregated KV transfer.",
		fix:       "run P with --pipeline-parallel-size 1, or push (--connector nixl-push)",
	},
	{
		name: "push-pp", family: "push pp", source: "#45880",
		applies: func(c *ruleCase) bool { return c.mode == Push && c.pp.Engine.PipelineParallelSize > 1 },
		allowed: func(p vllm.Profile) bool { return p.PushPP },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("a push producer with %d pipeline stages", c.pp.Engine.PipelineParallelSize)
		},
		why: "its push producer runs one pipeline stage",
		fix: "run P with --pipeline-parallel-size 1",
	},
	{
		name: "push-pp-hybrid", family: "push pp", source: "#50494",
		applies: func(c *ruleCase) bool {
			return c.mode == Push && c.pp.Engine.PipelineParallelSize > 1 && c.hybrid && !c.state()
		},
		allowed: func(p vllm.Profile) bool { return p.PushPPHybrid },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("a push producer with %d pipeline stages and the hybrid KV cache manager's attention groups", c.pp.Engine.PipelineParallelSize)
		},
		why: "its pipeline-parallel push routes regions without the hybrid manager's groups",
		fix: "run P with --pipeline-parallel-size 1, or turn the hybrid manager off (--disable-hybrid-kv-cache-manager)",
	},
	{
		name: "push-pp-state", family: "", source: "",
		applies: func(c *ruleCase) bool {
			return !c.pp.Profile.GroupPairs && c.mode == Push && c.pp.Engine.PipelineParallelSize > 1 && c.state()
		},
		allowed: func(p vllm.Profile) bool { return false },
		detail: func(c *ruleCase) string {
			return fmt.Sprintf("a push producer with %d pipeline stages and Mamba/GDN state", c.pp.Engine.PipelineParallelSize)
		},
		why:       "its pipeline-parallel push does not move state",
		vllmError: "does not support pipeline_parallel_size > 1 with Mamba",
		fix:       "run P with --pipeline-parallel-size 1",
	},
}

// ruleRelease is the profile row that lifts a rule: the release it holds
// from, its source and evidence; ok is false when no release kvscope has
// read lifts it.
func ruleRelease(r connectorRule) (vllm.Change, bool) {
	if r.family == "" {
		return vllm.Change{}, false
	}
	return vllm.FirstChange(vllm.BConnector, r.family, r.source)
}

// checkConnectorRules runs the release's rules on a pair: the first rule
// the profile does not allow refuses it; rules that hold add a check.
// hetero-TP state transfers add the DS conv layout they need.
func checkConnectorRules(hs *Handshake, c *ruleCase, reject func(rule, side, detail, fix string) *Rejection, add func(rule string, ok bool, detail string)) []string {
	var inferred []string
	prof := c.pp.Profile
	for _, r := range connectorRules {
		if !r.applies(c) {
			continue
		}
		if r.allowed(prof) {
			row, _ := ruleRelease(r)
			add(r.name, true, fmt.Sprintf("%s: accepted from vLLM %s (%s, %s)", r.detail(c), row.From, row.Source, row.Evidence))
			continue
		}
		detail := fmt.Sprintf("%s: %s's NixlConnector refuses it (%s)", r.detail(c), prof.Label, r.why)
		rej := reject(r.name, "P/D", detail, r.fix)
		if rej == nil {
			continue
		}
		rej.VLLMError = r.vllmError
		if r.when != "" {
			rej.When = r.when
		}
		if row, ok := ruleRelease(r); ok {
			rej.Since, rej.Source, rej.Evidence = row.From, row.Source, string(row.Evidence)
			rej.Fix += fmt.Sprintf("; vLLM %s accepts it (%s, %s)", row.From, row.Source, row.Evidence)
		} else {
			rej.Source = r.source
			if rej.Source == "" {
				rej.Source = "every release kvscope has read"
			}
		}
	}
	if c.state() && c.pTP != c.dTP && hs.Rejection == nil {
		add("ssm-conv-layout", true, "state between different TP sizes needs the DS conv state layout on both engines (VLLM_SSM_CONV_STATE_LAYOUT=DS; vLLM asserts \"3-read Mamba conv transfer requires DS conv state layout. Set VLLM_SSM_CONV_STATE_LAYOUT=DS\", #37416)")
	}
	if c.has(model.GatedDeltaNet) && !prof.GDNConnector && c.pTP == c.dTP && hs.Rejection == nil {
		inferred = append(inferred, fmt.Sprintf("%s's NixlConnector predates its gated-delta-net support (#41869): kvscope moves the state as Mamba state at equal TP, which that release may not do (inferred)", prof.Label))
	}
	if c.has(model.KDA) && hs.Rejection == nil {
		inferred = append(inferred, fmt.Sprintf("kvscope moves KDA state as Mamba state (conv states, then the recurrent state); whether %s's NixlConnector moves KDA state was not read (inferred)", prof.Label))
	}
	return inferred
}

// pushPrefixNote warns of a push with a D prefix hit on a release whose
// NixlPushConnector trimmed the head of P's blocks instead of the tail
// (before #48758): kvscope computes the tail, as vLLM meant to.
func pushPrefixNote(p *plan.Plan, mode Mode, hit int) string {
	if mode != Push || hit == 0 || p.Profile.PushPrefixTail || p.Profile.GroupPairs {
		return ""
	}
	return fmt.Sprintf("%s's NixlPushConnector trims the head of P's blocks instead of the tail when D has a prefix hit (#48758 fixed it; from 0.26.0, inferred): kvscope shows the intended tail, vLLM may move other blocks", p.Profile.Label)
}
