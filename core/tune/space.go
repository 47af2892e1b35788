// Package tune searches P/D engine flags: it plans every candidate of a
// search space for P and for D with a chosen vLLM profile, drops what vLLM
// or the NIXL handshake would refuse (counted per reason), and ranks the
// rest by an objective, with the Pareto front of D's KV tokens against
// the descriptors of a request.
//
// A search runs in slices (Search.Step), so a browser can draw its
// progress and cancel it between slices; Run does it in one go.
package tune

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/plan"
)

// Limits of a search.
const (
	// MaxCandidates is the most candidates one search plans.
	MaxCandidates = 100_000
	// MaxBlockSize is the largest block size a range may name.
	MaxBlockSize = 1 << 16
	// MaxTP is the largest tensor-parallel size a range may name.
	MaxTP = 64
	// MaxBatchedTokens is the largest --max-num-batched-tokens a range may
	// name.
	MaxBatchedTokens = 1 << 22
	// maxValues bounds the values of one range.
	maxValues = 10_000
)

// RangeError reports a range the search refuses, naming its flag.
type RangeError struct {
	Flag   string
	Value  string
	Reason string
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("tune: %s %q: %s", e.Flag, e.Value, e.Reason)
}

// ParseInts reads a range of integers: a list ("0,16,32"), a span with a
// step ("16:2048:16", both ends included), or both ("0,64:256:64"). Every
// value must lie in [lo, hi]; "0" is allowed where zero means the
// version's default (zeroOK). The values come out in the order given,
// without repeats.
func ParseInts(flag, s string, lo, hi int, zeroOK bool) ([]int, error) {
	bad := func(reason string) error { return &RangeError{Flag: flag, Value: s, Reason: reason} }
	if strings.TrimSpace(s) == "" {
		return nil, bad("empty: give values (a,b,c) or a span (from:to:step)")
	}
	var out []int
	seen := map[int]bool{}
	add := func(v int) error {
		switch {
		case v == 0 && zeroOK:
		case v < lo || v > hi:
			return bad(fmt.Sprintf("%d is outside %d..%d", v, lo, hi))
		}
		if !seen[v] {
			if len(out) == maxValues {
				return bad(fmt.Sprintf("more than %d values", maxValues))
			}
			seen[v] = true
			out = append(out, v)
		}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		fields := strings.Split(part, ":")
		nums := make([]int, len(fields))
		for i, f := range fields {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, bad(fmt.Sprintf("%q is not an integer", f))
			}
			nums[i] = n
		}
		switch len(nums) {
		case 1:
			if err := add(nums[0]); err != nil {
				return nil, err
			}
		case 2, 3:
			from, to, step := nums[0], nums[1], 1
			if len(nums) == 3 {
				step = nums[2]
			}
			switch {
			case step <= 0:
				return nil, bad(fmt.Sprintf("step %d: must be positive", step))
			case from > to:
				return nil, bad(fmt.Sprintf("%d:%d is inverted (from > to)", from, to))
			case (to-from)/step >= maxValues:
				return nil, bad(fmt.Sprintf("%s spans more than %d values", part, maxValues))
			}
			for v := from; v <= to; v += step {
				if err := add(v); err != nil {
					return nil, err
				}
			}
		default:
			return nil, bad(fmt.Sprintf("%q: want a value or from:to[:step]", part))
		}
	}
	return out, nil
}

// TPPair is a P and a D tensor-parallel size.
type TPPair struct{ P, D int }

func (t TPPair) String() string { return fmt.Sprintf("%d:%d", t.P, t.D) }

// ParseTPPairs reads "2:4,1:2" (P:D pairs) or "1,2,4x1,2,4,8" (every P
// of the first list with every D of the second; "2x4" is one pair).
func ParseTPPairs(flag, s string) ([]TPPair, error) {
	bad := func(reason string) error { return &RangeError{Flag: flag, Value: s, Reason: reason} }
	if strings.TrimSpace(s) == "" {
		return nil, bad("empty: give P:D pairs (2:4,1:2) or P sizes x D sizes (1,2x2,4)")
	}
	var out []TPPair
	seen := map[TPPair]bool{}
	add := func(p, d int) error {
		if p < 1 || p > MaxTP || d < 1 || d > MaxTP {
			return bad(fmt.Sprintf("%d:%d: tensor-parallel sizes are 1..%d", p, d, MaxTP))
		}
		if t := (TPPair{p, d}); !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
		return nil
	}
	if ps, ds, ok := strings.Cut(s, "x"); ok {
		pl, err := ParseInts(flag, ps, 1, MaxTP, false)
		if err != nil {
			return nil, err
		}
		dl, err := ParseInts(flag, ds, 1, MaxTP, false)
		if err != nil {
			return nil, err
		}
		for _, p := range pl {
			for _, d := range dl {
				if err := add(p, d); err != nil {
					return nil, err
				}
			}
		}
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		ps, ds, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, bad(fmt.Sprintf("%q: want P:D", part))
		}
		p, err1 := strconv.Atoi(strings.TrimSpace(ps))
		d, err2 := strconv.Atoi(strings.TrimSpace(ds))
		if err1 != nil || err2 != nil {
			return nil, bad(fmt.Sprintf("%q: want two integers P:D", part))
		}
		if err := add(p, d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ParseWords reads a comma-separated list of names, each one of allowed
// ("" in allowed admits an empty name: the version's default, written
// "default").
func ParseWords(flag, s string, allowed []string) ([]string, error) {
	bad := func(reason string) error { return &RangeError{Flag: flag, Value: s, Reason: reason} }
	if strings.TrimSpace(s) == "" {
		return nil, bad("empty: give one or more of " + strings.Join(wordNames(allowed), ", "))
	}
	var out []string
	seen := map[string]bool{}
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(w)
		if w == "default" {
			w = ""
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == w
		}
		if !ok {
			return nil, bad(fmt.Sprintf("%q: want one of %s", w, strings.Join(wordNames(allowed), ", ")))
		}
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out, nil
}

func wordNames(allowed []string) []string {
	out := make([]string, len(allowed))
	for i, a := range allowed {
		if a == "" {
			a = "default"
		}
		out[i] = a
	}
	return out
}

// Selectors are the group-size selectors a search may name ("" is the
// version's own rule).
var Selectors = []string{"", string(plan.Classic), string(plan.Min), string(plan.Balanced), string(plan.PaddingBytes)}

// KVCacheDTypes are the KV cache dtypes a search may name.
var KVCacheDTypes = []string{"auto", "bfloat16", "float16", "fp8"}

// Ranges is what a search varies, each as its flag reads (see ParseInts,
// ParseTPPairs, ParseWords); an empty field takes its default.
type Ranges struct {
	TPPairs        string `json:"tp_pairs"`                  // P:D pairs (default: the engines' own)
	BlockSizes     string `json:"block_sizes"`               // D's --block-size (default 0,16:1024:16; 0 = the version's)
	PBlockSizes    string `json:"p_block_sizes"`             // P's --block-size (default P's own)
	MinGroupLayers string `json:"min_kv_cache_group_layers"` // both engines (default their own)
	Selectors      string `json:"selectors"`                 // both engines (default their own)
	MaxBatched     string `json:"max_num_batched_tokens"`    // D's (default D's own)
	KVCacheDTypes  string `json:"kv_cache_dtypes"`           // both engines: P and D must agree (default their own)
	Connectors     string `json:"connectors"`                // nixl, nixl-push (default nixl)
}

// DefaultBlockSizes is the D block sizes searched unless given: the
// version's own and every multiple of 16 up to 1,024 tokens.
const DefaultBlockSizes = "0,16:1024:16"
