package xfer

import (
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// ConnectorEngines applies what the engines' vLLM version does with the
// connector before anything is planned (Prepare does the same): it
// refuses a connector the version lacks or that cannot move the model's
// state layers, and returns the engines as that version runs them (the
// hybrid KV cache manager off where the version turns it off for a KV
// connector) with notes saying so.
func ConnectorEngines(m *model.Model, c Connector, p, d plan.Engine) (plan.Engine, plan.Engine, []string, error) {
	s := Setup{Model: m, P: p, D: d, Connector: c}
	notes, err := connectorVersion(&s)
	return s.P, s.D, notes, err
}

// PagesDivide reports whether P's and D's block sizes divide one another
// for every layer D holds (state layers have no pages): descriptors then
// follow whole pages on the side with the smaller ones.
func PagesDivide(pp, dp *plan.Plan) bool {
	_, _, _, ok := divides(pp, dp)
	return ok
}
