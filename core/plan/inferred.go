package plan

import (
	"strings"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/vllm"
)

// This file says where a plan follows a rule kvscope infers instead of
// reading it in vLLM's code: every inferred reason a plan can give, and
// when it gives it. Plan.InferredReasons lists them; Summary.Inferred is
// whether there is one. (The TP-invariant plan adds its own, invariant.go.)

// The inferred reasons of a plan that are the same for every profile.
const (
	reasonBalanced   = "selector balanced follows vLLM PR #49472, which vLLM main does not carry"
	reasonMambaAll   = "mamba cache mode all: the state kernel chunk (64 for gated delta net, 128 otherwise) is assumed"
	reasonDraftStage = "draft and MTP layers are placed on the last pipeline stage"
)

// paddingBytesReason is the inferred reason of the padding-bytes selector
// in a profile that does not carry it.
func paddingBytesReason(label string) string {
	return "selector padding-bytes follows vLLM PR #58207's diff, which " + label + " does not carry"
}

// inferred calls add with each inferred reason of the call's plan, in the
// order the plan lists them, until add returns false: the loose bucket
// merge's, the selector's, the profile's inferred rules that touch the
// rank, the state kernel chunk of mamba cache mode all, and the drafter's
// pipeline stage.
func (c *call) inferred(add func(reason string) bool) {
	r, e, s := c.r, &c.e, &c.sum
	for _, reason := range r.loose {
		if !add(reason) {
			return
		}
	}
	if s.Selector == PaddingBytes && e.GroupSize == 0 && c.prof.Selector != vllm.SelectorPaddingBytes && !add(c.pe.paddingBy) {
		return
	}
	if s.Selector == Balanced && e.GroupSize == 0 && !add(reasonBalanced) {
		return
	}
	for _, reason := range r.profile {
		if !add(reason) {
			return
		}
	}
	if e.MambaCacheMode == "all" && r.state && !add(reasonMambaAll) {
		return
	}
	if e.PipelineParallelSize > 1 && c.pl.drafts {
		add(reasonDraftStage)
	}
}

// addInferred adds an inferred reason to the plan, once.
func (p *Plan) addInferred(reason string) {
	for _, r := range p.InferredReasons {
		if r == reason {
			return
		}
	}
	p.InferredReasons = append(p.InferredReasons, reason)
	p.Inferred = true
}

// relevant reports whether an inferred rule of the profile touches this
// plan: the rules about state layers for models with state layers, the
// sliding-window reserve for models with windows; the connector's and the
// refusal's rules belong to the transfer and the start-up check.
func relevant(rule string, specs []kvspec.LayerSpec, e Engine) bool {
	state, window := false, false
	for _, s := range specs {
		state = state || s.Spec.Kind.IsState()
		window = window || s.Spec.Kind == model.Sliding || s.Spec.Kind == model.ChunkedLocal
	}
	for _, k := range []struct {
		behaviour string
		need      bool
	}{
		{vllm.BStateDType, state}, {vllm.BSSMHook, state}, {vllm.BPrefix, state},
		{vllm.BMambaMode, state}, {vllm.BStateSpec, state}, {vllm.BSpecRows, state && e.NumSpeculativeTokens > 0},
		{vllm.BAlign, state}, {vllm.BInFlight, window}, {vllm.BAsync, window}, {vllm.BExtraRetained, window && e.NumSpeculativeTokens > 1},
		{vllm.BSelector, true}, {vllm.BBucketMerge, true},
	} {
		if strings.HasPrefix(rule, k.behaviour+" ") {
			return k.need
		}
	}
	return false
}

// profileReasons are the inferred rules of the profile that touch a plan
// of these specs, as inferred reasons.
func profileReasons(prof vllm.Profile, specs []kvspec.LayerSpec, e Engine) []string {
	var out []string
	if prof.Version.Newer { // every plan of a version newer than kvscope's newest is inferred
		out = append(out, "profile "+prof.Name+": "+vllm.NewerNote(prof.Version))
	}
	for _, r := range prof.Inferred() {
		if relevant(r, specs, e) {
			out = append(out, "profile "+prof.Name+": "+r)
		}
	}
	return out
}
