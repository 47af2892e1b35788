package tune

import (
	"fmt"
	"strconv"
	"strings"
)

// Objective is what a search ranks by: one figure, or a weighted mix of
// them, each normalised to the best feasible candidate's (1 is as good as
// the best, for figures to minimise too).
type Objective struct {
	Name string `json:"name"` // kv-tokens, concurrency, descriptors, padding or mix
	// The mix's weights.
	KVTokens    float64 `json:"kv_tokens_weight,omitempty"`
	Concurrency float64 `json:"concurrency_weight,omitempty"`
	Descriptors float64 `json:"descriptors_weight,omitempty"`
	Padding     float64 `json:"padding_weight,omitempty"`
}

// The objectives.
const (
	ByKVTokens    = "kv-tokens"   // D's KV cache tokens, the most first
	ByConcurrency = "concurrency" // D's requests of max_model_len at once, the most first
	ByDescriptors = "descriptors" // descriptors of the request, the fewest first
	ByPadding     = "padding"     // P's and D's padding bytes per request, the fewest first
	ByMix         = "mix"         // the weighted mix
)

// Objectives lists the objectives.
var Objectives = []string{ByKVTokens, ByConcurrency, ByDescriptors, ByPadding, ByMix}

// ParseObjective reads an objective and, for mix, its weights
// ("kv=1,descriptors=0.5"; keys kv, concurrency, descriptors, padding).
func ParseObjective(name, weights string) (Objective, error) {
	o := Objective{Name: name}
	if o.Name == "" {
		o.Name = ByKVTokens
	}
	if strings.TrimSpace(weights) != "" {
		if o.Name != ByMix {
			return o, &RangeError{Flag: "--weights", Value: weights, Reason: "weights go with --objective mix"}
		}
		for _, kv := range strings.Split(weights, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			w, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if !ok || err != nil || w < 0 || w > 1e6 || w != w {
				return o, &RangeError{Flag: "--weights", Value: weights, Reason: fmt.Sprintf("%q: want name=weight, a weight from 0 to 1e6", kv)}
			}
			switch strings.TrimSpace(k) {
			case "kv", "kv-tokens":
				o.KVTokens = w
			case "concurrency":
				o.Concurrency = w
			case "descriptors":
				o.Descriptors = w
			case "padding":
				o.Padding = w
			default:
				return o, &RangeError{Flag: "--weights", Value: weights, Reason: fmt.Sprintf("%q: weigh kv, concurrency, descriptors or padding", k)}
			}
		}
	} else if o.Name == ByMix {
		o.KVTokens, o.Descriptors = 1, 1
	}
	return o, o.check()
}

func (o Objective) check() error {
	for _, n := range Objectives {
		if o.Name == n {
			if n == ByMix && o.KVTokens+o.Concurrency+o.Descriptors+o.Padding == 0 {
				return &RangeError{Flag: "--weights", Value: "", Reason: "every weight is 0"}
			}
			return nil
		}
	}
	return &RangeError{Flag: "--objective", Value: o.Name, Reason: "want " + strings.Join(Objectives, ", ")}
}

// score sets every candidate's score: the figure itself (negated for the
// figures to minimise), or for mix the weighted sum of the normalised
// figures.
func (o Objective) score(all []Scored) {
	if len(all) == 0 {
		return
	}
	maxKV, maxConc := 0.0, 0.0
	minDesc, minPad := -1.0, -1.0
	for _, s := range all {
		maxKV, maxConc = max(maxKV, float64(s.DKVTokens)), max(maxConc, s.DConcurrency)
		if minDesc < 0 || float64(s.Descs) < minDesc {
			minDesc = float64(s.Descs)
		}
		if minPad < 0 || float64(s.PaddingBytes) < minPad {
			minPad = float64(s.PaddingBytes)
		}
	}
	ratio := func(num, den float64) float64 { // 1 when both are 0
		if den == 0 {
			if num == 0 {
				return 1
			}
			return 0
		}
		return num / den
	}
	for i := range all {
		s := &all[i]
		switch o.Name {
		case ByKVTokens:
			s.Score = float64(s.DKVTokens)
		case ByConcurrency:
			s.Score = s.DConcurrency
		case ByDescriptors:
			s.Score = -float64(s.Descs)
		case ByPadding:
			s.Score = -float64(s.PaddingBytes)
		case ByMix:
			s.Score = o.KVTokens*ratio(float64(s.DKVTokens), maxKV) + o.Concurrency*ratio(s.DConcurrency, maxConc) +
				o.Descriptors*ratio(minDesc, float64(s.Descs)) + o.Padding*ratio(minPad, float64(s.PaddingBytes))
		}
	}
}
