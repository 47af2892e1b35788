package check

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vlog"
)

// Assumption is an engine flag the log does not show that kvscope's
// prediction depends on, with the value kvscope planned with: a log cut
// or filtered by grep leaves out the lines that state it.
type Assumption struct {
	Flag  string `json:"flag"`  // as vLLM spells it: --max-num-batched-tokens
	Value string `json:"value"` // the value planned with
	Why   string `json:"why"`
}

// assumption is an Assumption with the values kvscope tried instead and,
// for each, whether every compared line matched with it.
type assumption struct {
	Assumption
	tried   []string
	matches []bool
	// open says the last value tried stands for every larger one.
	open bool
}

// assumable is an engine flag a log may not show: where it would show it,
// the value kvscope uses then, and the values worth trying instead.
type assumable struct {
	name   string // the flag, vLLM's name without dashes
	shown  func(l *vlog.Log) bool
	value  func(p *plan.Plan) string
	tries  func(p *plan.Plan) (vals []string, open bool)
	why    string
	values bool // explain names the values that match (false: only listed)
}

// maxTries bounds the values tried for one flag.
const maxTries = 12

// hasArgsOrConfig says whether the log has the non-default arguments or
// the engine config line: without either, it shows no flag at all.
func hasArgsOrConfig(l *vlog.Log) bool { return len(l.Args) > 0 || len(l.Config) > 0 }

func assumables() []assumable {
	return []assumable{
		{
			name: "max-num-batched-tokens",
			shown: func(l *vlog.Log) bool {
				_, ok := l.ArgInt("max_num_batched_tokens")
				return l.MNBT != nil || ok
			},
			value: func(p *plan.Plan) string { return strconv.Itoa(p.Engine.MaxNumBatchedTokens) },
			// Powers of two up to max_model_len: above it a sliding
			// window's reserve, capped by max_model_len, no longer grows
			// (so the last value stands for every larger one).
			tries: func(p *plan.Plan) ([]string, bool) {
				var vs []string
				for n := 512; len(vs) < maxTries; n *= 2 {
					vs = append(vs, strconv.Itoa(n))
					if n >= p.Engine.MaxModelLen {
						return vs, true
					}
				}
				return vs, false
			},
			why: "the log prints no \"Chunked prefill is enabled with max_num_batched_tokens=N\" and its non-default args do not set it; " +
				"vLLM's default depends on the entry point and the GPU (the API server 8192 and the LLM class 16384 on GPUs of 70 GiB and more, 2048 and 8192 below)",
			values: true,
		},
		{
			name:   "kv-cache-dtype",
			shown:  hasArgsOrConfig,
			value:  func(p *plan.Plan) string { return orDefault(p.Engine.KVCacheDType, "auto") },
			tries:  func(*plan.Plan) ([]string, bool) { return []string{"auto", "fp8"}, false },
			why:    "the log has neither the non-default args nor the engine config line, which would state it",
			values: true,
		},
		{
			name:   "tensor-parallel-size",
			shown:  hasArgsOrConfig,
			value:  func(p *plan.Plan) string { return strconv.Itoa(max(p.Engine.TensorParallelSize, 1)) },
			tries:  func(*plan.Plan) ([]string, bool) { return []string{"1", "2", "4", "8"}, false },
			why:    "the log has neither the non-default args nor the engine config line, which would state it",
			values: true,
		},
		{
			name: "max-model-len",
			shown: func(l *vlog.Log) bool {
				_, a := l.ArgInt("max_model_len")
				_, c := l.ConfigInt("max_seq_len")
				return l.MaxModelLen != nil || a || c || len(l.Concurrency) > 0 || l.Refusal != nil
			},
			value: func(p *plan.Plan) string { return strconv.Itoa(p.Engine.MaxModelLen) },
			tries: func(p *plan.Plan) ([]string, bool) {
				return []string{strconv.Itoa(max(p.Engine.MaxModelLen/2, 1))}, false
			},
			why: "the log prints no \"Using max model len N\" or \"Maximum concurrency for L tokens\" line: kvscope takes the model's own maximum",
		},
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// given is the set of flags the caller stated.
func given(names []string) map[string]bool {
	set := map[string]bool{}
	for _, n := range names {
		set[strings.TrimLeft(strings.ReplaceAll(n, "_", "-"), "-")] = true
	}
	return set
}

// assumptions lists the flags the log does not show (nor the caller)
// that the prediction depends on: planned with another value, a compared
// line's prediction changes. Each value tried is kept with whether every
// line matched with it, for explain.
func assumptions(m *model.Model, s *Setup, km memory, l *vlog.Log, stated map[string]bool, lines []LineCheck) []assumption {
	base := map[string]string{}
	for _, c := range lines {
		base[c.Name] = c.Predicted
	}
	if len(lines) == 0 {
		return nil
	}
	pr := predict(m, s.Engine, km)
	if pr.err != nil || pr.hi == nil {
		return nil
	}
	var out []assumption
	for _, a := range assumables() {
		if stated[a.name] || a.shown(l) {
			continue
		}
		f, ok := plan.LookupFlag(a.name)
		if !ok {
			continue
		}
		as := assumption{Assumption: Assumption{Flag: "--" + a.name, Value: a.value(pr.hi), Why: a.why}}
		vals, open := a.tries(pr.hi)
		depends := false
		for _, v := range vals {
			e := s.Engine
			if f.Set(&e, v) != nil {
				continue
			}
			p := predict(m, e, km)
			if p.err != nil {
				continue
			}
			cs := compare(l, p, km.ok)
			all := len(cs) > 0
			for _, c := range cs {
				all = all && c.Match
				if c.Predicted != base[c.Name] {
					depends = true
				}
			}
			if a.values {
				as.tried, as.matches = append(as.tried, v), append(as.matches, all)
			}
		}
		if depends {
			as.open = open
			out = append(out, as)
		}
	}
	return out
}

// explainAssumed names, for each assumed flag, the values tried under
// which every line matches.
func explainAssumed(as []assumption) []string {
	var out []string
	for _, a := range as {
		if len(a.tried) == 0 {
			continue
		}
		var runs []string
		for i := 0; i < len(a.tried); {
			if !a.matches[i] {
				i++
				continue
			}
			j := i
			for j+1 < len(a.tried) && a.matches[j+1] {
				j++
			}
			switch {
			case j == len(a.tried)-1 && a.open:
				runs = append(runs, "≥ "+a.tried[i])
			case j == i:
				runs = append(runs, a.tried[i])
			default:
				runs = append(runs, a.tried[i]+" to "+a.tried[j])
			}
			i = j + 1
		}
		if len(runs) == 0 {
			continue // one flag alone does not explain it
		}
		out = append(out, fmt.Sprintf("matches with %s %s (the log does not show it; kvscope assumed %s; tried %s)", a.Flag, strings.Join(runs, ", "), a.Value, strings.Join(a.tried, ", ")))
	}
	return out
}

// drafterExplain says, for a log whose draft model kvscope took from its
// catalog, that the run may have loaded another revision of that drafter
// than the one bundled (a drafter's layers decide the groups and the
// padding layers), and whether the padding lines match the target
// planned without the drafter's layers.
func (r *Result) drafterExplain(s *Setup, km memory, l *vlog.Log) []string {
	if r.drafter == "" || r.target == nil {
		return nil
	}
	out := []string{fmt.Sprintf("the drafter %s is planned with the config kvscope bundles; the run may have loaded another revision of %s, whose layers (their count, kinds and heads) decide the groups and the padding layers: pass --draft with the config.json of the revision the run loaded", r.drafter, r.drafter)}
	pad := func(cs []LineCheck) (LineCheck, bool) {
		for _, c := range cs {
			if c.Name == "padding_layers" {
				return c, true
			}
		}
		return LineCheck{}, false
	}
	if c, ok := pad(r.Lines); !ok || c.Match {
		return out
	}
	e := s.Engine
	e.NumSpeculativeTokens = 0
	if pr := predict(r.target, e, km); pr.err == nil && pr.hi != nil {
		if c, ok := pad(compare(l, pr, km.ok)); ok && c.Match {
			out = append(out, fmt.Sprintf("the padding lines (%s) match the target planned without the drafter's layers", c.Logged))
		}
	}
	return out
}
