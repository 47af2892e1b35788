package check

import "github.com/kvscope/kvscope/core/vlog"

// The lines a full judgement needs, as Missing names them: a log that
// reached its KV cache is judged by the capacity vLLM printed (the GPU KV
// cache size and the maximum concurrency), and kvscope predicts those only
// from the memory the log states. The block-size, mamba-padding and
// padding-layer lines are compared when present but are not needed: vLLM
// prints them only when they change something.
const (
	MissingMemory      = `"Available KV cache memory: X GiB" (or "reserved X GiB memory for KV Cache", or the profiler's "Current kv cache memory in use is X GiB")`
	MissingKVTokens    = `"GPU KV cache size: N tokens"`
	MissingConcurrency = `"Maximum concurrency for L tokens per request: X.XXx"`
)

// missingLines names the lines of a full judgement the log lacks. A
// start-up refusal is judged whole by its own lines.
func missingLines(l *vlog.Log, hasMem bool, lines []LineCheck) []string {
	for _, c := range lines {
		switch c.Name {
		case "refusal", "estimated_max_model_len", "kv_cache_needed_gib":
			return []string{}
		}
	}
	out := []string{}
	if !hasMem {
		out = append(out, MissingMemory+": without it kvscope cannot predict num_blocks, the GPU KV cache size or the maximum concurrency")
	}
	if len(l.KVTokens) == 0 {
		out = append(out, MissingKVTokens+": the KV cache's capacity in tokens, a figure the plan is judged by")
	}
	if len(l.Concurrency) == 0 {
		out = append(out, MissingConcurrency+": the requests of max_model_len tokens the cache holds, a figure the plan is judged by")
	}
	return out
}
