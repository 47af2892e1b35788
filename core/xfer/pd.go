package xfer

import (
	"context"
	"fmt"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// PlanChoice says which plans P and D use.
type PlanChoice string

// The plan choices.
const (
	// AutoPlans uses the TP-invariant plan when the connector needs
	// matching groups and the profile plans TP-invariantly (the branch),
	// else each engine's own plan.
	AutoPlans        PlanChoice = "auto"
	IndependentPlans PlanChoice = "independent"
	InvariantPlans   PlanChoice = "invariant"
)

// Setup is a P/D deployment and one request.
type Setup struct {
	Model     *model.Model
	P, D      plan.Engine
	Connector Connector
	Plans     PlanChoice
	Request   Request
	Layout    CacheLayout // P's and D's attention layout ("" = split K/V)
	KeepPairs bool
	// Ctx, when set, stops the transfer's computation soon after it is
	// done (a client that hung up): the registrations and pair loops check
	// it per rank and per layer.
	Ctx context.Context
}

// SideCost compares one engine's KV cache under its own plan and under the
// TP-invariant plan.
type SideCost struct {
	IndependentTokens int64   `json:"independent_kv_tokens"`
	InvariantTokens   int64   `json:"invariant_kv_tokens"`
	DiffPercent       float64 `json:"diff_percent"` // (invariant - independent) / independent * 100
	IndependentGroups int     `json:"independent_groups"`
	InvariantGroups   int     `json:"invariant_groups"`
}

// PD is everything kvscope says about a P/D deployment and a request.
type PD struct {
	// VLLMVersion is the profile both engines follow, VLLMProfile its label.
	VLLMVersion   string          `json:"vllm_version"`
	VLLMProfile   string          `json:"vllm_profile"`
	Connector     string          `json:"connector"`
	NeedsMatching bool            `json:"needs_matching_groups"`
	Plans         PlanChoice      `json:"plans"` // independent or invariant: what the transfer uses
	Invariant     *plan.Invariant `json:"invariant"`
	PCost         SideCost        `json:"p_cost"`
	DCost         SideCost        `json:"d_cost"`
	Diff          plan.Diff       `json:"diff"` // the used P plan against the used D plan
	Advice        Advice          `json:"block_size_advice"`
	Transfer      *Transfer       `json:"transfer"` // nil when the connector moves no KV between P and D
	Note          string          `json:"note,omitempty"`
	// Preflight answers whether P and D transfer and why not, with the
	// values each side brings to the handshake (set with the transfer).
	Preflight *Preflight `json:"preflight,omitempty"`

	setup Setup
	// What every request's transfer shares, made once by Prepare: both
	// sides' registrations of the used plans, their handshake and the
	// group-pair layout.
	pRegs, dRegs []*Registration
	handshake    *Handshake
	pairing      *pairing // when the handshake sends the transfer down the group-pair path
	// hybridOff says, for P and D, that the connector turned the hybrid
	// KV cache manager off (connectorVersion).
	hybridOff [2]bool
}

// Setup is the setup the deployment was prepared from.
func (r *PD) Setup() Setup { return r.setup }

// UsedPlans returns the plans the transfer runs between.
func (r *PD) UsedPlans() (*plan.Plan, *plan.Plan) {
	if r.Plans == InvariantPlans {
		return r.Invariant.P, r.Invariant.D
	}
	return r.Invariant.PIndependent, r.Invariant.DIndependent
}

// Run plans both engines (independently and TP-invariantly), picks the plans
// the connector calls for, advises a block size, and computes the transfer.
func Run(s Setup) (*PD, error) {
	r, err := Prepare(s)
	if err != nil {
		return nil, err
	}
	if _, ok := s.Connector.Transport(); !ok {
		return r, nil
	}
	r.Transfer, err = r.Compute(s.Request, s.KeepPairs)
	return r, err
}

// Prepare does everything Run does but the transfer itself, so one
// deployment can serve many requests.
func Prepare(s Setup) (*PD, error) {
	given := [2]bool{s.P.DisableHybrid, s.D.DisableHybrid}
	notes, err := connectorVersion(&s)
	if err != nil {
		return nil, err
	}
	inv, err := plan.NewInvariant(s.Model, s.P, s.D)
	if err != nil {
		return nil, err
	}
	r := &PD{Connector: s.Connector.String(), NeedsMatching: s.Connector.NeedsMatchingGroups(s.Model), Invariant: inv, setup: s,
		VLLMVersion: inv.PIndependent.VLLMVersion, VLLMProfile: inv.PIndependent.VLLMProfile,
		hybridOff: [2]bool{s.P.DisableHybrid && !given[0], s.D.DisableHybrid && !given[1]}}
	prof := inv.PIndependent.Profile
	switch s.Plans {
	case "", AutoPlans:
		r.Plans = IndependentPlans
		if r.NeedsMatching && prof.TPInvariant {
			r.Plans = InvariantPlans
		}
	case InvariantPlans:
		if !prof.TPInvariant {
			return nil, fmt.Errorf("xfer: --plans invariant: %s has no TP-invariant planner; plan with --vllm-version %s", prof.Label, vllm.Branch)
		}
		r.Plans = s.Plans
	case IndependentPlans:
		r.Plans = s.Plans
	default:
		return nil, fmt.Errorf("xfer: --plans %q: want auto, independent or invariant", s.Plans)
	}
	r.PCost = cost(inv.PIndependent, inv.P)
	r.DCost = cost(inv.DIndependent, inv.D)
	pp, dp := r.UsedPlans()
	r.Diff = plan.Compare(pp, dp)
	pe, de := s.P, s.D
	if r.Plans == InvariantPlans {
		pe.BlockSize, de.BlockSize = inv.BlockSize, inv.BlockSize
	}
	r.Advice = BlockSizeAdvice(s.Model, pe, de, pp, dp)
	if _, ok := s.Connector.Transport(); !ok {
		r.Note = fmt.Sprintf("%s keeps KV inside each engine: nothing moves from P to D", s.Connector)
	} else {
		if r.pRegs, err = registerAll(s.Ctx, s.Model, pp, P, s.Layout, nil, nil); err != nil {
			return nil, err
		}
		if r.dRegs, err = registerAll(s.Ctx, s.Model, dp, D, s.Layout, nil, nil); err != nil {
			return nil, err
		}
		r.handshake = newHandshake(s.Model, r.pRegs, r.dRegs, s.Connector, modeOf(s.Connector), false)
		if !r.handshake.Matched && r.handshake.Rejection == nil {
			// Left unmade on a fault, which each request then reports.
			r.pairing, _ = newPairing(r.pRegs, r.dRegs, true)
		}
	}
	if len(notes) > 0 {
		r.Note = strings.TrimSpace(r.Note + " " + strings.Join(notes, " "))
	}
	return r, nil
}

// connectorVersion applies what the engines' vLLM version does with a NIXL
// connector before anything is planned: versions without
// NixlPushConnector refuse it; versions that turn the hybrid KV cache
// manager off for any KV connector plan sliding-window and chunked layers
// as full attention, and refuse models with state layers when their
// NixlConnector cannot move state.
func connectorVersion(s *Setup) ([]string, error) {
	kind, ok := s.Connector.Transport()
	if !ok {
		return nil, nil
	}
	prof, err := s.P.Profile()
	if err != nil {
		return nil, err
	}
	if kind == NixlPush && !prof.PushConnector {
		return nil, &StartupError{Flag: "--connector " + s.Connector.String(), Rejection: Rejection{Rule: "push-connector", Side: "P/D",
			Detail: fmt.Sprintf("%s has no NixlPushConnector (it came with vLLM 0.24.0, #35264)", prof.Label),
			Fix:    "pull (--connector nixl), or run vLLM 0.24.0 or later", Since: "0.24.0", Source: "#35264", When: WhenAtStartup}}
	}
	hasState := false
	for _, l := range s.Model.Layers {
		hasState = hasState || l.Kind.IsState()
	}
	switch {
	case hasState && !prof.StateConnector:
		return nil, &StartupError{Flag: "--connector " + s.Connector.String(), Rejection: Rejection{Rule: "state-connector", Side: "P/D",
			Detail: fmt.Sprintf("%s's NixlConnector cannot move Mamba/GDN state (SupportsHMA came with vLLM 0.18, #35758)", prof.Label),
			Fix:    "run vLLM 0.18.0 or later on both engines, or serve the model without P/D disaggregation", Since: "0.18.0", Source: "#35758", When: WhenAtStartup}}
	case prof.HMAWithConnector || hasState:
		return nil, nil
	}
	var notes []string
	s.P.DisableHybrid, s.D.DisableHybrid = true, true
	if s.Model.HasKind(model.Sliding) || s.Model.HasKind(model.ChunkedLocal) {
		notes = append(notes, fmt.Sprintf("%s turns the hybrid KV cache manager off for a --kv-transfer-config: sliding-window and chunked layers plan as full attention on P and D (kept on from vLLM 0.23, #41847)", prof.Label))
	}
	return notes, nil
}

// Compute builds the transfer of one request between the prepared plans.
func (r *PD) Compute(req Request, keepPairs bool) (*Transfer, error) {
	s := r.setup
	pp, dp := r.UsedPlans()
	out := TallyPairs
	if keepPairs {
		out = KeepPairs
	}
	t, err := Compute(s.Model, pp, dp, req, Options{Connector: s.Connector, PLayout: s.Layout, DLayout: s.Layout, Output: out, Ctx: s.Ctx,
		PRegs: r.pRegs, DRegs: r.dRegs, Handshake: r.handshake, pairing: r.pairing})
	if err != nil {
		return nil, err
	}
	if !r.Advice.Divide {
		t.Logs = append(t.Logs, r.Advice.Log)
	}
	if r.Plans == InvariantPlans {
		t.Inferred = append(t.Inferred, "P and D use the TP-invariant plan, which is inferred")
	}
	return t, nil
}

func cost(ind, inv *plan.Plan) SideCost {
	c := SideCost{IndependentTokens: ind.KVCacheTokens, InvariantTokens: inv.KVCacheTokens, IndependentGroups: ind.NumGroups, InvariantGroups: inv.NumGroups}
	if ind.KVCacheTokens > 0 {
		c.DiffPercent = 100 * float64(inv.KVCacheTokens-ind.KVCacheTokens) / float64(ind.KVCacheTokens)
	}
	return c
}
