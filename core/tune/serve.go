package tune

import (
	"fmt"
	"strings"

	"github.com/kvscope/kvscope/core/plan"
)

// serveLines writes a candidate's vllm serve command lines.
func (s *Search) serveLines(sc *Scored) {
	name := s.space.ModelName
	if name == "" {
		name = s.space.Model.Name
	}
	pe, de := s.Engines(sc.Candidate)
	sc.PServe = ServeCommand(name, s.space.DraftName, pe, sc.Connector)
	sc.DServe = ServeCommand(name, s.space.DraftName, de, sc.Connector)
}

// ServeCommand is the vllm serve command line of an engine: vLLM's own
// flags the engine sets, in the engine-flag table's order (byte counts in
// plain bytes, as vLLM reads them), the speculative config when the
// engine drafts, and the KV transfer config of the connector. Settings
// that only kvscope's planner models (the planner flags of vLLM PR #58207
// and kvscope's own knobs: a selector, a minimum or fixed group size, a
// bucket merge rule, the balanced selector's lambda) follow after "#", as
// a comment: no released vLLM takes them.
func ServeCommand(model, draft string, e plan.Engine, connector string) string {
	args := append([]string{"vllm", "serve", model}, plan.FlagArgs(e, func(f *plan.Flag) bool { return f.Origin == plan.VLLMFlag }, true)...)
	if e.NumSpeculativeTokens > 0 {
		spec := fmt.Sprintf(`'{"model": %q, "num_speculative_tokens": %d}'`, draft, e.NumSpeculativeTokens)
		if draft == "" || draft == "mtp" {
			spec = fmt.Sprintf(`'{"method": "mtp", "num_speculative_tokens": %d}'`, e.NumSpeculativeTokens)
		}
		args = append(args, "--speculative-config", spec)
	}
	class := "NixlConnector"
	if connector == "nixl-push" {
		class = "NixlPushConnector"
	}
	args = append(args, "--kv-transfer-config", fmt.Sprintf(`'{"kv_connector": %q, "kv_role": "kv_both"}'`, class))
	line := strings.Join(args, " ")
	branch := plan.FlagArgs(e, func(f *plan.Flag) bool { return f.Origin == plan.BranchFlag }, false)
	own := plan.FlagArgs(e, func(f *plan.Flag) bool { return f.Origin == plan.ModelFlag }, false)
	switch {
	case len(own) > 0:
		line += "  # kvscope planner settings (vLLM PR #58207's and kvscope's own, in no release): " + strings.Join(append(branch, own...), " ")
	case len(branch) > 0:
		line += "  # kvscope planner settings (vLLM PR #58207, not in a release): " + strings.Join(branch, " ")
	}
	return line
}
