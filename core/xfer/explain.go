package xfer

import "github.com/kvscope/kvscope/core/plan"

// PlanExplanation is why P's and D's own plans are what they are (each
// engine planned on its own, as vLLM plans it) and what makes them
// differ: pd --explain, and the P vs D view.
type PlanExplanation struct {
	P          *plan.Explanation `json:"p"`
	D          *plan.Explanation `json:"d"`
	Difference []string          `json:"difference"`
}

// Explain explains the deployment's independent plans.
func (r *PD) Explain() *PlanExplanation {
	p, d := r.Invariant.PIndependent, r.Invariant.DIndependent
	x := &PlanExplanation{P: p.Explain(), D: d.Explain(), Difference: plan.Difference(p, d, "P", "D")}
	if x.Difference == nil {
		x.Difference = []string{}
	}
	return x
}
