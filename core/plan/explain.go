package plan

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kvscope/kvscope/core/vllm"
)

// This file is the planner's account of its own decisions (plan
// --explain, pd --explain, the P vs D view): the buckets the hybrid
// selector saw, the group sizes it weighed with what each costs, the one
// it chose and by which rule, the attention block-size alignment, and,
// for two plans, the inputs that make them differ. It reads the plan's
// figures and the selector's cost function (selector.go); it decides
// nothing itself.

// Candidate is one group size a selector weighed.
type Candidate struct {
	G            int   `json:"g"`
	PaddingSlots int   `json:"padding_slots"` // Σ_j (-L_j mod g)
	PaddingBytes int64 `json:"padding_bytes"` // Σ_j b_j (-L_j mod g): worst-case bytes per request
	Groups       int   `json:"groups"`        // Σ_j ceil(L_j / g)
	Chosen       bool  `json:"chosen,omitempty"`
}

// Explanation is why a plan has the groups it has.
type Explanation struct {
	Dispatch string `json:"dispatch"`
	// Buckets and Candidates are the hybrid selector's inputs and the
	// group sizes it weighed (empty for any other dispatch).
	Buckets    []Bucket    `json:"buckets"`
	Selector   string      `json:"selector"`
	Candidates []Candidate `json:"candidates"`
	Chosen     int         `json:"chosen_g"`
	// Why is the selector's rule applied to these buckets, in words.
	Why string `json:"why"`
	// Alignment is the hybrid attention block size and how it follows
	// from the state page ("" without state layers).
	Alignment string `json:"alignment,omitempty"`
	// Lines are the explanation in words, as plan --explain prints it.
	Lines []string `json:"lines"`
}

// Explain returns the plan's explanation.
func (p *Plan) Explain() *Explanation {
	x := &Explanation{Dispatch: p.Dispatch, Buckets: p.Buckets, Chosen: p.GroupSize, Candidates: []Candidate{}, Selector: string(p.Selector)}
	if x.Buckets == nil {
		x.Buckets = []Bucket{}
	}
	switch p.Dispatch {
	case "uniform":
		x.Why = "every layer has the same spec: one group holds them all"
	case "uniform-type":
		x.Why = "every layer is one type with different page sizes: one group of all layers, each at its own page"
	case "fixed":
		x.Why = fmt.Sprintf("the group layout is imposed (g = %d): the TP-invariant plan or a fixed layout", p.GroupSize)
	case "hybrid":
		x.hybrid(p)
	}
	if a := p.Alignment; a != nil && a.StatePageBytes > 0 {
		x.Alignment = fmt.Sprintf("attention block %d tokens: the smallest multiple of %d whose page (%d x %s B per token = %s B) holds one state page of %s B (%.2f%% of it padding)",
			a.AttnBlockSize, a.Align, a.AttnBlockSize, Commas(a.AttnBytesPerToken), Commas(a.AttnPageBytes), Commas(a.StatePageBytes), a.PadPercent)
	}
	x.Lines = x.lines(p)
	return x
}

// hybrid fills the selector's candidates and rule.
func (x *Explanation) hybrid(p *Plan) {
	sizes := make([]int, len(p.Buckets))
	bytes := make([]int64, len(p.Buckets))
	mn, mx := 0, 0
	for j, b := range p.Buckets {
		sizes[j], bytes[j] = b.Layers, b.WorstBytes
		if j == 0 || b.Layers < mn {
			mn = b.Layers
		}
		mx = max(mx, b.Layers)
	}
	if len(sizes) == 0 {
		return
	}
	e := p.Engine
	add := func(g int) {
		pb, ps, groups := paddingCost(sizes, bytes, g)
		x.Candidates = append(x.Candidates, Candidate{G: g, PaddingSlots: ps, PaddingBytes: pb, Groups: groups, Chosen: g == p.GroupSize})
	}
	switch {
	case e.GroupSize > 0:
		x.Selector = "--kv-cache-group-size"
		add(e.GroupSize)
		x.Why = fmt.Sprintf("--kv-cache-group-size %d sets g", e.GroupSize)
	case e.Selector == Min:
		add(mn)
		x.Why = fmt.Sprintf("g is the smallest bucket, %d layers (the rule of vLLM 0.10 and 0.11)", mn)
	case e.Selector == Classic:
		threshold := p.Profile.Threshold
		if p.Profile.Selector == vllm.SelectorPaddingBytes {
			threshold = mainThreshold
		}
		add(mn)
		if mx != mn {
			add(mx)
		}
		if threshold == 0 {
			x.Why = fmt.Sprintf("%s's rule takes the smallest bucket: g = %d", p.Profile.Label, mn)
		} else if float64(mx) < threshold*float64(mn) {
			x.Why = fmt.Sprintf("the largest bucket (%d layers) is under %.2f x the smallest (%d): g is the largest, %d", mx, threshold, mn, mx)
		} else {
			x.Why = fmt.Sprintf("the largest bucket (%d layers) is not under %.2f x the smallest (%d): g is the smallest, %d", mx, threshold, mn, mn)
		}
	case e.Selector == Balanced:
		for g := 1; g <= mx; g++ {
			add(g)
		}
		x.Why = fmt.Sprintf("g minimises padding slots + %.2f x groups, ties to fewer groups (vLLM PR #49472)", e.BalancedLambda)
	default:
		lo, hi := paddingBytesRange(sizes, e.MinGroupLayers)
		for g := lo; g <= hi; g++ {
			add(g)
		}
		var best Candidate
		for _, c := range x.Candidates {
			if c.Chosen {
				best = c
			}
		}
		x.Why = fmt.Sprintf("of g = %d..%d (from the smallest bucket raised to --min-kv-cache-group-layers %d), g = %d has the fewest padding bytes per request (%s B), then the fewest groups (%d) (vLLM PR #58207)",
			lo, hi, e.MinGroupLayers, p.GroupSize, Commas(best.PaddingBytes), best.Groups)
	}
}

// lines words the explanation.
func (x *Explanation) lines(p *Plan) []string {
	out := []string{fmt.Sprintf("dispatch %s: %s", x.Dispatch, x.Why)}
	if len(x.Buckets) > 0 {
		parts := make([]string, len(x.Buckets))
		for j, b := range x.Buckets {
			parts[j] = bucketWords(b)
		}
		out = append(out, "buckets: "+strings.Join(parts, "; "))
	}
	if len(x.Candidates) > 1 {
		// The chosen g and the three next cheapest (the JSON has them all).
		ranked := slices.Clone(x.Candidates)
		slices.SortStableFunc(ranked, func(a, b Candidate) int {
			if c := cmp.Compare(a.PaddingBytes, b.PaddingBytes); c != 0 {
				return c
			}
			return cmp.Compare(a.Groups, b.Groups)
		})
		if x.Selector != string(PaddingBytes) {
			ranked = x.Candidates
		}
		parts := make([]string, 0, 4)
		for _, c := range ranked[:min(4, len(ranked))] {
			mark := ""
			if c.Chosen {
				mark = " (chosen)"
			}
			parts = append(parts, fmt.Sprintf("g=%d%s: %d padding slots, %s B padding per request, %d groups", c.G, mark, c.PaddingSlots, Commas(c.PaddingBytes), c.Groups))
		}
		more := ""
		if len(x.Candidates) > 4 {
			more = fmt.Sprintf(" (%d weighed)", len(x.Candidates))
		}
		out = append(out, "candidates"+more+": "+strings.Join(parts, "; "))
	}
	if x.Alignment != "" {
		out = append(out, x.Alignment)
	}
	out = append(out, fmt.Sprintf("result: %d groups of %d slots, block %d, %s KV cache tokens", p.NumGroups, p.Slots, p.BlockSize, Commas(p.KVCacheTokens)))
	return out
}

// bucketWords is one bucket in words: a state layer's block is the whole
// request.
func bucketWords(b Bucket) string {
	block := fmt.Sprintf("block %d", b.BlockSize)
	if b.Kind.IsState() {
		block = "whole request"
	}
	return fmt.Sprintf("%d %s (%s, page %s B, at most %s B per layer per request)", b.Layers, b.Kind, block, Commas(b.PageBytes), Commas(b.WorstBytes))
}

// Difference says why two plans of one model differ: the engine settings
// that differ, then what each changes in the selector's inputs and
// choice, the attention alignment and the capacity. Empty when the plans
// agree on groups, slots and block size.
func Difference(a, b *Plan, aName, bName string) []string {
	var out []string
	if a.NumGroups == b.NumGroups && a.Slots == b.Slots && a.BlockSize == b.BlockSize && a.GroupSize == b.GroupSize {
		return out
	}
	if flags := differingFlags(a.Engine, b.Engine); len(flags) > 0 {
		parts := make([]string, len(flags))
		for i, f := range flags {
			parts[i] = fmt.Sprintf("%s (%s %s, %s %s)", f[0], aName, f[1], bName, f[2])
		}
		out = append(out, fmt.Sprintf("%s and %s differ in %s", aName, bName, strings.Join(parts, ", ")))
	}
	if a.GroupSize != b.GroupSize {
		xa, xb := a.Explain(), b.Explain()
		out = append(out, fmt.Sprintf("%s's selector picks g = %d, %s's g = %d", aName, a.GroupSize, bName, b.GroupSize))
		if len(a.Buckets) != len(b.Buckets) {
			words := func(bs []Bucket) string {
				parts := make([]string, len(bs))
				for j, b := range bs {
					parts[j] = bucketWords(b)
				}
				return strings.Join(parts, "; ")
			}
			out = append(out, fmt.Sprintf("%s's layers fall in %d buckets, %s's in %d (layers share a bucket only with one page and block size): %s: %s. %s: %s",
				aName, len(a.Buckets), bName, len(b.Buckets), aName, words(a.Buckets), bName, words(b.Buckets)))
		} else {
			for j := range a.Buckets {
				ba, bb := a.Buckets[j], b.Buckets[j]
				if ba.WorstBytes != bb.WorstBytes || ba.Layers != bb.Layers {
					out = append(out, fmt.Sprintf("bucket %d (%s): %s %d layers at %s B per layer, %s %d layers at %s B", j, ba.Kind,
						aName, ba.Layers, Commas(ba.WorstBytes), bName, bb.Layers, Commas(bb.WorstBytes)))
				}
			}
		}
		out = append(out, aName+": "+xa.Why, bName+": "+xb.Why)
	}
	if a.BlockSize != b.BlockSize {
		line := fmt.Sprintf("block size %s %d, %s %d", aName, a.BlockSize, bName, b.BlockSize)
		if a.Alignment != nil && b.Alignment != nil {
			line += fmt.Sprintf(": the state page per rank is %s B on %s and %s B on %s, and one token's attention %s B and %s B",
				Commas(a.Alignment.StatePageBytes), aName, Commas(b.Alignment.StatePageBytes), bName, Commas(a.Alignment.AttnBytesPerToken), Commas(b.Alignment.AttnBytesPerToken))
		}
		out = append(out, line)
	}
	return out
}

// differingFlags lists the engine flags whose values differ: the flag,
// a's value and b's.
func differingFlags(a, b Engine) [][3]string {
	keep := func(*Flag) bool { return true }
	fa, fb := FlagArgs(a, keep, true), FlagArgs(b, keep, true)
	value := func(args []string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(args); i++ {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				m[args[i]] = args[i+1]
				i++
			} else {
				m[args[i]] = "on"
			}
		}
		return m
	}
	va, vb := value(fa), value(fb)
	var out [][3]string
	seen := map[string]bool{}
	for _, args := range [][]string{fa, fb} {
		for _, f := range args {
			if !strings.HasPrefix(f, "--") || seen[f] || f == "--vllm-version" && va[f] == vb[f] {
				continue
			}
			seen[f] = true
			if va[f] != vb[f] {
				out = append(out, [3]string{f, orUnset(va[f]), orUnset(vb[f])})
			}
		}
	}
	return out
}

func orUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return s
}
