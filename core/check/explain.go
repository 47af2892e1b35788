package check

import (
	"fmt"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/vlog"
)

// alternative is one change to the engine that might explain a mismatch.
type alternative struct {
	label string
	apply func(*plan.Engine)
}

// explain says which behaviour or missing flag could explain the lines
// that differ: it plans again with each alternative (another version's
// profile, the flags whose defaults depend on the version, the values of
// the flags the log does not show) and names those under which every
// line matches, then adds what each differing line depends on.
func explain(m *model.Model, s *Setup, km memory, l *vlog.Log, lines []LineCheck, assumed []assumption) []string {
	var out []string
	matches := func(e plan.Engine) bool {
		pr := predict(m, e, km)
		if pr.err != nil {
			return false
		}
		cs := compare(l, pr, km.ok)
		for _, c := range cs {
			if !c.Match {
				return false
			}
		}
		return len(cs) > 0
	}
	var versions []string
	for _, v := range vllm.Versions() {
		if v == s.Version {
			continue
		}
		e := s.Engine
		e.VLLMVersion = v
		if matches(e) {
			versions = append(versions, v)
		}
	}
	if len(versions) > 0 {
		out = append(out, fmt.Sprintf("every line matches under the profile of vLLM %s: kvscope's release boundary for a behaviour that differs between them may be off (see kvscope versions)", ranges(versions)))
	}
	out = append(out, explainAssumed(assumed)...)
	tried := map[string]bool{}
	for _, a := range assumed {
		tried[a.Flag] = len(a.tried) > 0
	}
	for _, a := range alternatives(s, tried) {
		e := s.Engine
		a.apply(&e)
		if matches(e) {
			out = append(out, fmt.Sprintf("every line matches with %s", a.label))
		}
	}
	for _, c := range lines {
		if c.Match {
			continue
		}
		if hint := hint(c.Name); hint != "" {
			out = append(out, fmt.Sprintf("%s differs (logged %s, predicted %s): %s", c.Name, c.Logged, c.Predicted, hint))
		}
	}
	return out
}

// hint says what a compared figure depends on.
func hint(name string) string {
	switch name {
	case "block_size":
		return "the hybrid block size depends on the SSM state dtype (--mamba-ssm-cache-dtype and the model family's config hook), speculative conv rows, the KV cache dtype, the attention backend's kernel block and the alignment rule of the version"
	case "mamba_pad_percent":
		return "the padding follows the block size and the state page: see block_size"
	case "padding_layers":
		return "padding layers follow the group-size selector of the version and the buckets (a drafter's or MTP layers join or open a bucket)"
	case "kv_cache_tokens":
		return "the GPU KV cache size line is num_blocks // groups * block size before vLLM 0.20.1 and int(concurrency * max_model_len) after (#41069); it also follows the memory, the groups and the page size"
	case "max_concurrency":
		return "concurrency is num_blocks / blocks per request: the sliding-window reserve (max_num_batched_tokens, times the batches in flight from 0.26), the state blocks (prefix caching, mamba cache mode, speculative blocks) and the groups"
	case "estimated_max_model_len", "kv_cache_needed_gib":
		return "the refusal sizes one request by the version's rule (every layer, the first group, or every group with padding) and searches the longest max_model_len that fits"
	case "refusal":
		return "kvscope's start-up check or the logged memory disagree with the log"
	}
	return ""
}

// alternatives are the flags whose defaults depend on the version or that
// logs often leave out (but not those whose values explainAssumed has
// tried already: skip names them, with their dashes).
func alternatives(s *Setup, skip map[string]bool) []alternative {
	e := s.Engine
	var out []alternative
	if !e.AsyncScheduling && !e.NoAsyncScheduling {
		out = append(out,
			alternative{"--no-async-scheduling (one batch in flight)", func(e *plan.Engine) { e.NoAsyncScheduling = true }},
			alternative{"--async-scheduling", func(e *plan.Engine) { e.AsyncScheduling = true }})
	}
	if e.MambaSSMCacheDType == "" {
		for _, d := range []string{"float32", "bfloat16", "float16"} {
			d := d
			out = append(out, alternative{"--mamba-ssm-cache-dtype " + d, func(e *plan.Engine) { e.MambaSSMCacheDType = d }})
		}
	}
	if e.PrefixCaching == "" {
		out = append(out,
			alternative{"--enable-prefix-caching", func(e *plan.Engine) { e.PrefixCaching = "on" }},
			alternative{"--no-enable-prefix-caching", func(e *plan.Engine) { e.PrefixCaching = "off" }})
	}
	if e.MambaCacheMode == "" {
		for _, mode := range []string{"none", "align", "all"} {
			mode := mode
			out = append(out, alternative{"--mamba-cache-mode " + mode, func(e *plan.Engine) { e.MambaCacheMode = mode }})
		}
	}
	for _, sel := range []plan.Selector{plan.Min, plan.Classic, plan.PaddingBytes} {
		sel := sel
		out = append(out, alternative{"--selector " + string(sel), func(e *plan.Engine) { e.Selector = sel }})
	}
	for _, n := range []int{2048, 8192, 16384} {
		if n == e.MaxNumBatchedTokens || skip["--max-num-batched-tokens"] {
			continue
		}
		n := n
		out = append(out, alternative{fmt.Sprintf("--max-num-batched-tokens %d", n), func(e *plan.Engine) { e.MaxNumBatchedTokens = n }})
	}
	return out
}

// ranges writes versions compactly: consecutive entries of vllm.Versions
// become "a to b".
func ranges(vs []string) string {
	all := vllm.Versions()
	index := map[string]int{}
	for i, v := range all {
		index[v] = i
	}
	var parts []string
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && index[vs[j+1]] == index[vs[j]]+1 {
			j++
		}
		if j == i {
			parts = append(parts, vs[i])
		} else {
			parts = append(parts, vs[i]+" to "+vs[j])
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
