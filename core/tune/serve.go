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

// ServeCommand is the vllm serve command line of an engine: the flags
// that differ from vLLM's defaults, the speculative config when the
// engine drafts, and the KV transfer config of the connector. Settings
// that only kvscope's planner models (a selector, a minimum group size or
// a fixed group size: the planner flags of vLLM PR #58207) follow after
// "#", as a comment: no released vLLM takes them.
func ServeCommand(model, draft string, e plan.Engine, connector string) string {
	args := []string{"vllm", "serve", model}
	add := func(flag string, v any) { args = append(args, flag, fmt.Sprint(v)) }
	if e.TensorParallelSize > 1 {
		add("--tensor-parallel-size", e.TensorParallelSize)
	}
	if e.PipelineParallelSize > 1 {
		add("--pipeline-parallel-size", e.PipelineParallelSize)
	}
	if e.BlockSize > 0 {
		add("--block-size", e.BlockSize)
	}
	if e.MaxModelLen > 0 {
		add("--max-model-len", e.MaxModelLen)
	}
	if e.MaxNumBatchedTokens > 0 {
		add("--max-num-batched-tokens", e.MaxNumBatchedTokens)
	}
	if e.KVCacheDType != "" && e.KVCacheDType != "auto" {
		add("--kv-cache-dtype", e.KVCacheDType)
	}
	if e.KVCacheMemoryBytes > 0 {
		add("--kv-cache-memory-bytes", e.KVCacheMemoryBytes)
	}
	if e.MambaSSMCacheDType != "" && e.MambaSSMCacheDType != "auto" {
		add("--mamba-ssm-cache-dtype", e.MambaSSMCacheDType)
	}
	if e.MambaCacheMode != "" {
		add("--mamba-cache-mode", e.MambaCacheMode)
	}
	switch e.PrefixCaching {
	case "on":
		args = append(args, "--enable-prefix-caching")
	case "off":
		args = append(args, "--no-enable-prefix-caching")
	}
	if e.AsyncScheduling {
		args = append(args, "--async-scheduling")
	}
	if e.NoAsyncScheduling {
		args = append(args, "--no-async-scheduling")
	}
	if e.AttentionBackend != "" {
		add("--attention-backend", e.AttentionBackend)
	}
	if e.DisableHybrid {
		args = append(args, "--disable-hybrid-kv-cache-manager")
	}
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
	var modelled []string
	if e.Selector != "" {
		modelled = append(modelled, "--selector "+string(e.Selector))
	}
	if e.MinGroupLayers > 0 {
		modelled = append(modelled, fmt.Sprint("--min-kv-cache-group-layers ", e.MinGroupLayers))
	}
	if e.GroupSize > 0 {
		modelled = append(modelled, fmt.Sprint("--kv-cache-group-size ", e.GroupSize))
	}
	line := strings.Join(args, " ")
	if len(modelled) > 0 {
		line += "  # kvscope planner settings (vLLM PR #58207, not in a release): " + strings.Join(modelled, " ")
	}
	return line
}
