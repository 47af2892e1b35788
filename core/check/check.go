// Package check holds a vLLM startup log against kvscope's plan: it plans
// the engine the log describes (its version's profile, its flags, the
// memory it logged) and compares, line by line, what vLLM logged with what
// kvscope predicts, within the rounding the log's figures allow.
package check

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/vlog"
)

// Input is what a check needs besides the log.
type Input struct {
	Log     *vlog.Log
	Version string       // overrides the log's version ("" = the log's own)
	Model   *model.Model // the target model; nil = the log's model from Catalog
	Draft   *model.Model // the draft model of an EAGLE/DFlash log; nil = from Catalog
	Catalog model.Catalog
	// Adjust changes the engine the log implies before it is planned: the
	// settings a fragment of a log does not show (the CLI's engine flags).
	Adjust func(*plan.Engine)
	// Given names the engine flags Adjust sets (vLLM's names, without
	// dashes: "max-num-batched-tokens"): stated by the caller, they are
	// never listed as assumed.
	Given []string
}

// LineCheck is one logged figure against kvscope's prediction.
type LineCheck struct {
	Name      string `json:"name"` // block_size, mamba_pad_percent, padding_layers, kv_cache_tokens, max_concurrency, ...
	Logged    string `json:"logged"`
	Predicted string `json:"predicted"`
	Match     bool   `json:"match"`
	Line      int    `json:"line,omitempty"` // the log line, from 1 (0 when the log has no such line)
	Tolerance string `json:"tolerance,omitempty"`
}

// Result is a check's outcome.
type Result struct {
	VLLMVersion  string      `json:"vllm_version"` // as logged
	Model        string      `json:"model"`
	Profile      string      `json:"profile"`
	ProfileLabel string      `json:"profile_label"`
	Flags        []string    `json:"flags"`
	Setup        *Setup      `json:"setup"`
	Lines        []LineCheck `json:"lines"`
	Verdict      string      `json:"verdict"` // match, partial or differs
	Explain      []string    `json:"explain"`
	// Missing names the lines a full judgement needs that the log lacks
	// (see missingLines); a log whose compared lines all match but that
	// lacks one of them is partial.
	Missing []string `json:"missing"`
	// Assumed lists the engine flags the log does not show that the
	// prediction depends on, with the value kvscope planned with.
	Assumed []Assumption `json:"assumed"`
	Notes   []string     `json:"notes"`

	// Plan is kvscope's plan at the logged memory (nil when vLLM refused).
	Plan     *plan.Plan   `json:"-"`
	ModelRef *model.Model `json:"-"`

	// target is the model without the drafter the catalog attached, and
	// drafter that drafter's name ("" when the caller gave the draft or
	// the method has none).
	target  *model.Model
	drafter string
}

// The verdicts: every compared line within the log's rounding and every
// line a full judgement needs present (match); every compared line within
// its rounding but a needed line missing (partial); a compared line
// outside its rounding (differs).
const (
	Match   = "match"
	Partial = "partial"
	Differs = "differs"
)

// Run plans what the log's engine was asked for and compares.
func Run(in Input) (*Result, error) {
	l := in.Log
	setup, err := SetupOf(l, in.Version)
	if err != nil {
		return nil, err
	}
	res := &Result{VLLMVersion: l.Version, Setup: setup, Profile: setup.Version, Flags: setup.Flags,
		Lines: []LineCheck{}, Explain: []string{}, Missing: []string{}, Assumed: []Assumption{}, Notes: append([]string{}, setup.Notes...)}
	if prof, err := vllm.Lookup(setup.Version); err == nil {
		res.ProfileLabel = prof.Label
		if prof.Version.Newer { // a log from a release newer than kvscope's newest profile
			res.Notes = append(res.Notes, vllm.NewerNote(prof.Version))
		}
	}
	m, err := resolveModel(in, res)
	if err != nil {
		return nil, err
	}
	res.ModelRef, res.Model = m, m.Name
	if setup.Engine.MaxModelLen == 0 && len(l.Concurrency) > 0 {
		setup.Engine.MaxModelLen = l.Concurrency[0].Value.Tokens
	}
	if setup.Engine.MaxModelLen == 0 && l.Refusal != nil && l.Refusal.MaxModelLen > 0 {
		setup.Engine.MaxModelLen = l.Refusal.MaxModelLen
	}
	if in.Adjust != nil {
		in.Adjust(&setup.Engine)
		res.Flags = setup.flags()
		res.Profile = setup.Engine.VLLMVersion
		if prof, err := vllm.Lookup(res.Profile); err == nil {
			res.ProfileLabel = prof.Label
		}
	}
	mem := setup.memory()
	if !mem.ok && l.Refusal != nil && !l.Refusal.NoMemory {
		mem = memory{gib: l.Refusal.AvailableGiB, ok: true}
	}
	memGiB, hasMem := mem.gib, mem.ok
	if hasMem && memGiB <= 0 || l.Refusal != nil && l.Refusal.NoMemory {
		// vLLM refuses before planning: "No available memory for the
		// cache blocks".
		c := LineCheck{Name: "refusal", Logged: "starts", Predicted: noMemoryPrediction(setup), Line: setup.MemLine}
		switch {
		case l.Refusal != nil:
			c.Logged, c.Line = "No available memory for the cache blocks", l.Refusal.Line.N
		case l.Failed != nil:
			c.Logged, c.Line = "failed to start", l.Failed.N
		}
		c.Match = c.Logged != "starts" && hasMem && memGiB <= 0
		res.Lines = append(res.Lines, c)
		res.finish(l, hasMem)
		return res, nil
	}
	pr := predict(m, setup.Engine, mem)
	if pr.err != nil {
		return nil, pr.err
	}
	res.Plan = pr.hi
	if pr.hi != nil {
		res.Notes = append(res.Notes, pr.hi.Notes...)
	}
	res.Lines = compare(l, pr, hasMem)
	if len(res.Lines) == 0 {
		return nil, &vlog.ParseError{Reason: "the log has none of the lines kvscope compares (\"Setting attention block size to N tokens\", \"Add N padding layers\", \"GPU KV cache size: N tokens\", \"Maximum concurrency for L tokens per request\", or a start-up refusal): paste the engine's start-up through the \"Maximum concurrency\" line"}
	}
	if l.MambaMode != nil && pr.hi != nil && pr.hi.Engine.MambaCacheMode != l.MambaMode.Value {
		res.Notes = append(res.Notes, fmt.Sprintf("vLLM set mamba cache mode %s; kvscope's profile predicts %s", l.MambaMode.Value, pr.hi.Engine.MambaCacheMode))
	}
	assumed := assumptions(m, setup, mem, l, given(in.Given), res.Lines)
	for _, a := range assumed {
		res.Assumed = append(res.Assumed, a.Assumption)
	}
	res.finish(l, hasMem)
	if res.Verdict == Differs {
		res.Explain = explain(m, setup, mem, l, res.Lines, assumed)
		res.Explain = append(res.Explain, res.drafterExplain(setup, mem, l)...)
	}
	return res, nil
}

// finish names the missing lines and gives the verdict.
func (r *Result) finish(l *vlog.Log, hasMem bool) {
	r.Missing = missingLines(l, hasMem, r.Lines)
	r.Verdict = Match
	if len(r.Missing) > 0 {
		r.Verdict = Partial
	}
	for _, c := range r.Lines {
		if !c.Match {
			r.Verdict = Differs
		}
	}
}

func noMemoryPrediction(s *Setup) string {
	if s.HasMem && s.MemGiB <= 0 {
		return fmt.Sprintf("refused: No available memory for the cache blocks (%.2f GiB)", s.MemGiB)
	}
	return "starts"
}

// resolveModel finds the target (and attaches the draft): the given model,
// or the log's model in the catalog, by its name, then by its base name
// without a quantization suffix.
func resolveModel(in Input, res *Result) (*model.Model, error) {
	m := in.Model
	if m == nil {
		ref := in.Log.Model
		if ref == "" {
			return nil, &vlog.ParseError{Reason: "the log names no model (no non-default args, engine config or banner line with it): pass --model"}
		}
		name, data, note, err := lookupModel(in.Catalog, ref)
		if err != nil {
			return nil, err
		}
		if m, err = model.Parse(data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		m.Name = name
		if note != "" {
			res.Notes = append(res.Notes, note)
		}
	}
	sp := res.Setup.Spec
	if sp == nil {
		return m, nil
	}
	switch {
	case sp.UsesMTP():
		mm, err := m.WithMTP()
		if err != nil {
			return nil, fmt.Errorf("the log's speculative config uses %s: %w", sp.Method, err)
		}
		return mm, nil
	case sp.Method == "ngram" || sp.Method == "suffix":
		return m, nil
	}
	d := in.Draft
	if d == nil {
		if sp.Model == "" {
			return nil, &vlog.ParseError{Reason: fmt.Sprintf("the log's speculative config (%s) names no draft model: pass --draft", sp.Method)}
		}
		name, data, note, err := lookupModel(in.Catalog, sp.Model)
		if err != nil {
			return nil, fmt.Errorf("the log's draft model: %w (pass --draft)", err)
		}
		if d, err = model.Parse(data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		d.Name = name
		if note != "" {
			res.Notes = append(res.Notes, note)
		}
		res.target, res.drafter = m, name
	}
	return m.WithDraft(d)
}

// quantSuffix matches the suffixes quantized and re-packaged checkpoints
// add to a base model's name; they do not change the KV cache.
const quantSuffix = `(?i)(-(awq|gptq|nvfp4|mxfp4|fp8|int4|int8|w4a16|w8a8|bf16|fp16|4bit|8bit|bnb|autoround|mtp|text|dynamic|quantized|prismaquant)([-._][0-9a-z.]*)*)+$`

// lookupModel finds a log's model in the catalog: by the name, then by the
// last path element (a local copy), then without a quantization suffix.
func lookupModel(cat model.Catalog, ref string) (name string, data []byte, note string, err error) {
	ref = strings.TrimRight(strings.TrimSpace(ref), `/\`)
	base := ref
	if i := strings.LastIndexAny(base, `/\`); i >= 0 {
		base = base[i+1:]
	}
	stripped := regexp.MustCompile(quantSuffix).ReplaceAllString(base, "")
	tries := []string{ref, base, stripped, strings.TrimPrefix(stripped, "Meta-")}
	for _, t := range tries {
		if t == "" {
			continue
		}
		if n, d, err := cat.Lookup(t); err == nil {
			if !strings.EqualFold(n, ref) {
				note = fmt.Sprintf("the log's model %s is planned with the bundled config of %s (same architecture; quantization does not change the KV cache)", ref, n)
			}
			return n, d, note, nil
		}
	}
	return "", nil, "", &vlog.ParseError{Reason: fmt.Sprintf("the log's model %q is not bundled (see kvscope models): pass --model with its config.json", ref)}
}

// prediction is kvscope's plan at the two ends of the memory the log's
// rounding allows, or the refusal.
type prediction struct {
	lo, hi   *plan.Plan
	refusal  *plan.RefusalError // at the largest memory the log allows, else the smallest
	refusals []*plan.RefusalError
	err      error
}

// gib is 2^30 bytes.
const gib = 1 << 30

// predict plans the engine at the smallest and largest memory that prints
// as the logged GiB with two decimals (at the bytes themselves when the
// log states them).
func predict(m *model.Model, e plan.Engine, km memory) prediction {
	var pr prediction
	mems := []int64{plan.DefaultKVCacheMemoryBytes, plan.DefaultKVCacheMemoryBytes}
	switch {
	case km.bytes > 0:
		mems = []int64{km.bytes, km.bytes}
	case km.ok:
		mems = []int64{int64(math.Ceil((km.gib - 0.005) * gib)), int64(math.Floor((km.gib + 0.005) * gib))}
	}
	for i, mem := range mems {
		if mem <= 0 {
			pr.err = &vlog.ParseError{Reason: fmt.Sprintf("the log's KV cache memory (%.2f GiB) leaves no memory for the cache", km.gib)}
			return pr
		}
		e.KVCacheMemoryBytes = mem
		p, err := plan.New(m, e)
		var re *plan.RefusalError
		switch {
		case errors.As(err, &re):
			pr.refusal = re
			pr.refusals = append(pr.refusals, re)
			continue
		case err != nil:
			pr.err = err
			return pr
		}
		if i == 0 {
			pr.lo = p
		} else {
			pr.hi = p
		}
	}
	if pr.lo == nil {
		pr.lo = pr.hi
	}
	if pr.hi == nil {
		pr.hi = pr.lo
	}
	return pr
}

// compare lines up what the log says with the prediction.
func compare(l *vlog.Log, pr prediction, hasMem bool) []LineCheck {
	var out []LineCheck
	p := pr.hi
	if l.Refusal != nil {
		c := LineCheck{Name: "estimated_max_model_len", Logged: fmt.Sprint(l.Refusal.EstimatedMaxLen), Line: l.Refusal.Line.N, Predicted: "starts (no refusal)",
			Tolerance: "available memory printed to 2 decimals (±0.005 GiB)"}
		n := LineCheck{Name: "kv_cache_needed_gib", Logged: fmt.Sprint(l.Refusal.NeededGiB), Line: l.Refusal.Line.N, Predicted: "starts (no refusal)", Tolerance: "printed to 2 decimals"}
		if len(pr.refusals) == 2 {
			lo, hi := pr.refusals[0].EstimatedMaxLen, pr.refusals[1].EstimatedMaxLen
			c.Predicted = fmt.Sprint(lo)
			if hi != lo {
				c.Predicted += " to " + fmt.Sprint(hi)
			}
			c.Match = l.Refusal.EstimatedMaxLen >= lo && l.Refusal.EstimatedMaxLen <= hi
			need := float64(pr.refusal.NeededBytes) / gib
			n.Predicted = fmt.Sprintf("%.2f", need)
			n.Match = math.Abs(need-l.Refusal.NeededGiB) < 0.005+1e-9
		}
		return append(out, c, n)
	}
	if f, _, ok := l.KVMemory(); ok && l.Failed != nil && l.Failed.N > f.Line.N && len(l.KVTokens) == 0 && len(l.Concurrency) == 0 {
		// The engine failed right after logging its memory, without the
		// refusal's message (a cut traceback): compare whether kvscope
		// refuses too. A failure before the memory line is something else.
		c := LineCheck{Name: "refusal", Logged: "failed to start", Predicted: "starts", Line: l.Failed.N}
		if pr.refusal != nil {
			c.Predicted, c.Match = fmt.Sprintf("refused (estimated maximum model length %d)", pr.refusal.EstimatedMaxLen), true
		}
		return append(out, c)
	}
	if p == nil {
		// kvscope predicts a refusal the log does not show.
		if pr.refusal != nil {
			out = append(out, LineCheck{Name: "refusal", Logged: "starts", Predicted: "refused: " + pr.refusal.Message, Match: false})
		}
		return out
	}
	reached := hasMem || len(l.KVTokens) > 0 || len(l.Concurrency) > 0
	// A line the log lacks is not compared: users cut logs, and vLLM
	// prints the block-size and mamba-padding lines only when it changes
	// something.
	if l.BlockSize != nil {
		out = append(out, LineCheck{Name: "block_size", Logged: fmt.Sprint(l.BlockSize.Value), Predicted: fmt.Sprint(p.BlockSize), Match: l.BlockSize.Value == p.BlockSize, Line: l.BlockSize.Line.N})
	}
	if l.MambaPad != nil {
		pred := "(no padding)"
		if p.Alignment != nil {
			pred = fmt.Sprintf("%.2f", p.Alignment.PadPercent)
		}
		out = append(out, LineCheck{Name: "mamba_pad_percent", Logged: fmt.Sprintf("%.2f", l.MambaPad.Value), Predicted: pred, Match: pred == fmt.Sprintf("%.2f", l.MambaPad.Value), Line: l.MambaPad.Line.N, Tolerance: "printed to 2 decimals"})
	}
	if len(l.Padding) > 0 || reached && (len(l.KVTokens) > 0 || len(l.Concurrency) > 0) {
		logged := uniquePadding(l.Padding)
		pred := predictedPadding(p)
		c := LineCheck{Name: "padding_layers", Logged: strings.Join(logged, "; "), Predicted: strings.Join(pred, "; "), Match: strings.Join(logged, ";") == strings.Join(pred, ";")}
		if len(l.Padding) > 0 {
			c.Line = l.Padding[0].Line.N
		}
		if c.Logged == "" {
			c.Logged = "none"
		}
		if c.Predicted == "" {
			c.Predicted = "none"
		}
		out = append(out, c)
	}
	if len(l.KVTokens) > 0 && hasMem {
		min := l.KVTokens[0]
		for _, f := range l.KVTokens[1:] {
			if f.Value < min.Value {
				min = f
			}
		}
		lo, hi := pr.lo.KVCacheTokens, pr.hi.KVCacheTokens
		c := LineCheck{Name: "kv_cache_tokens", Logged: plan.Commas(min.Value), Line: min.Line.N, Match: min.Value >= lo && min.Value <= hi,
			Tolerance: "available memory printed to 2 decimals (±0.005 GiB)"}
		c.Predicted = plan.Commas(lo)
		if hi != lo {
			c.Predicted += " to " + plan.Commas(hi)
		}
		out = append(out, c)
	}
	if len(l.Concurrency) > 0 && hasMem {
		min := l.Concurrency[0]
		for _, f := range l.Concurrency[1:] {
			if f.Value.X < min.Value.X {
				min = f
			}
		}
		lo, hi := round2(pr.lo.MaxConcurrency), round2(pr.hi.MaxConcurrency)
		c := LineCheck{Name: "max_concurrency", Logged: fmt.Sprintf("%.2fx", min.Value.X), Line: min.Line.N,
			Match: min.Value.X >= lo-1e-9 && min.Value.X <= hi+1e-9, Tolerance: "printed to 2 decimals; memory ±0.005 GiB"}
		c.Predicted = fmt.Sprintf("%.2fx", lo)
		if hi != lo {
			c.Predicted = fmt.Sprintf("%.2fx to %.2fx", lo, hi)
		}
		out = append(out, c)
	}
	return out
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// uniquePadding lists the padding warnings once each, in order: vLLM logs
// them again on every pass over the groups.
func uniquePadding(ws []vlog.Figure[vlog.PaddingWarning]) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range ws {
		s := fmt.Sprintf("%d (%.2f%%)", w.Value.Layers, w.Value.Percent)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func predictedPadding(p *plan.Plan) []string {
	rePlanPadding := regexp.MustCompile(`Add (\d+) padding layers, may waste at most ([0-9.]+)%`)
	var out []string
	seen := map[string]bool{}
	for _, w := range p.Warnings {
		m := rePlanPadding.FindStringSubmatch(w)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		f, _ := strconv.ParseFloat(m[2], 64)
		s := fmt.Sprintf("%d (%.2f%%)", n, f)
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
