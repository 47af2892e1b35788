package oracle

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/xfer"
)

// SweepModel is one model of a sweep, with its family and settings.
type SweepModel struct {
	Family string // the category the results are counted under
	Name   string
	Model  *model.Model
	// Spec is the speculative tokens both engines run (a drafter's).
	Spec int
	// Prompts are the prompt lengths to try.
	Prompts []int
	// TPs are the TP sizes to pair; nil means 1, 2, 4 and 8.
	TPs []int
}

// Case is one sweep case.
type Case struct {
	Family string          `json:"family"`
	Model  string          `json:"model"`
	PTP    int             `json:"p_tp"`
	DTP    int             `json:"d_tp"`
	PPP    int             `json:"p_pp"` // P's pipeline-parallel size (1 unless a PP producer case)
	Plans  xfer.PlanChoice `json:"plans"`
	Blocks string          `json:"blocks"` // default, suggested or no-divide
	Hit    string          `json:"hit"`    // none, some, all-but-last
	Mode   xfer.Mode       `json:"mode"`
	Prompt int             `json:"prompt_tokens"`
}

func (c Case) String() string {
	pp := ""
	if c.PPP > 1 {
		pp = fmt.Sprintf(" PP%d", c.PPP)
	}
	return fmt.Sprintf("%s P TP%d%s -> D TP%d, %s plans, %s blocks, hit %s, %s, %d tokens", c.Model, c.PTP, pp, c.DTP, c.Plans, c.Blocks, c.Hit, c.Mode, c.Prompt)
}

// Counts tallies verdicts.
type Counts struct {
	Cases    int `json:"cases"`
	Exact    int `json:"exact"`
	Rejected int `json:"rejected"`
	Wrong    int `json:"wrong"`
}

func (c *Counts) add(v Verdict) {
	c.Cases++
	switch v {
	case Exact:
		c.Exact++
	case Rejected:
		c.Rejected++
	case Wrong:
		c.Wrong++
	}
}

// SweepResult is the outcome of a sweep.
type SweepResult struct {
	Counts
	Seconds    float64            `json:"seconds"`
	Workers    int                `json:"workers"`
	ByCategory map[string]*Counts `json:"by_category"`
	ByVariant  map[string]*Counts `json:"by_variant"`
	Rejections map[string]int     `json:"rejections"` // by rule
	Failures   []string           `json:"failures"`   // wrong cases and errors, at most 20
	BytesMoved int64              `json:"bytes_moved"`
	Stopped    bool               `json:"stopped,omitempty"` // interrupted: not every case ran
}

// Cases enumerates a sweep in the group-pair profile: every TP pair over
// {1, 2, 4, 8} the model allows on both sides, independent and
// TP-invariant plans, each engine's default block size, the suggested one
// and a pair that does not divide, no, some and all-but-the-last-block
// prefix hits, pull and push, and each prompt length; and, per TP pair, P
// as a two-stage pipeline-parallel producer (pull and push, independent
// and invariant plans, default and non-dividing blocks).
func Cases(models []SweepModel) []Case {
	var out []Case
	for _, sm := range models {
		var tps []int
		candidates := sm.TPs
		if candidates == nil {
			candidates = []int{1, 2, 4, 8}
		}
		for _, tp := range candidates {
			if _, err := plan.New(sm.Model, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: tp, NumSpeculativeTokens: sm.Spec}); err == nil {
				tps = append(tps, tp)
			}
		}
		for _, ptp := range tps {
			for _, dtp := range tps {
				for _, plans := range []xfer.PlanChoice{xfer.IndependentPlans, xfer.InvariantPlans} {
					for _, blocks := range []string{"default", "suggested", "no-divide"} {
						for _, hit := range []string{"none", "some", "all-but-last"} {
							for _, mode := range []xfer.Mode{xfer.Pull, xfer.Push} {
								for _, n := range sm.Prompts {
									out = append(out, Case{sm.Family, sm.Name, ptp, dtp, 1, plans, blocks, hit, mode, n})
								}
							}
						}
					}
				}
				// P as a two-stage pipeline-parallel producer: in push it
				// routes layers by name, so only a plan equal to D's moves.
				for _, plans := range []xfer.PlanChoice{xfer.IndependentPlans, xfer.InvariantPlans} {
					for _, blocks := range []string{"default", "no-divide"} {
						for _, mode := range []xfer.Mode{xfer.Pull, xfer.Push} {
							out = append(out, Case{sm.Family, sm.Name, ptp, dtp, 2, plans, blocks, "none", mode, sm.Prompts[0]})
						}
					}
				}
			}
		}
	}
	return out
}

// Setup turns a case into a P/D setup.
func (c Case) Setup(sm SweepModel) (xfer.Setup, error) {
	hasState := false
	for _, l := range sm.Model.Layers {
		hasState = hasState || l.Kind.IsState()
	}
	pe := plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: c.PTP, PipelineParallelSize: c.PPP, NumSpeculativeTokens: sm.Spec}
	de := plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: c.DTP, NumSpeculativeTokens: sm.Spec}
	if hasState && c.Hit != "none" {
		// Prefix hits on a state model need Mamba prefix caching.
		pe.MambaCacheMode, de.MambaCacheMode = "align", "align"
	}
	switch c.Blocks {
	case "suggested":
		bs, err := plan.SuggestedBlockSize(sm.Model, pe, de)
		if err != nil {
			return xfer.Setup{}, err
		}
		pe.BlockSize, de.BlockSize = bs, bs
	case "no-divide":
		p, err := plan.New(sm.Model, pe)
		if err != nil {
			return xfer.Setup{}, err
		}
		b := max(32, p.BlockSize)
		pe.BlockSize, de.BlockSize = b, b+16
	}
	conn := "nixl"
	if c.Mode == xfer.Push {
		conn = "nixl-push"
	}
	cn, err := xfer.ParseConnector(conn)
	if err != nil {
		return xfer.Setup{}, err
	}
	return xfer.Setup{Model: sm.Model, P: pe, D: de, Connector: cn, Plans: c.Plans, KeepPairs: true, Request: c.Request()}, nil
}

// Request is the case's request: a prefix hit of none, a third of the
// prompt, or all but the last token (aligned down to whole blocks by xfer).
func (c Case) Request() xfer.Request {
	hit := 0
	switch c.Hit {
	case "some":
		hit = c.Prompt / 3
	case "all-but-last":
		hit = c.Prompt - 1
	}
	return xfer.Request{PromptTokens: c.Prompt, PrefixHitTokens: hit}
}

// RunCase computes and checks one case.
func RunCase(sm SweepModel, c Case) (*Result, error) {
	s, err := c.Setup(sm)
	if err != nil {
		return nil, err
	}
	r, err := xfer.Prepare(s)
	if err != nil {
		return nil, err
	}
	return runPrepared(sm, r, s.Request)
}

func runPrepared(sm SweepModel, r *xfer.PD, req xfer.Request) (*Result, error) {
	x, err := r.Compute(req, true)
	if err != nil {
		return nil, err
	}
	return Check(sm.Model, x)
}

// deployment is what cases share when only the request differs.
type deployment struct {
	model      string
	ptp, dtp   int
	ppp        int
	plans      xfer.PlanChoice
	blocks     string
	mode       xfer.Mode
	prefixMode bool // a state model with prefix caching (hits)
}

// Sweep runs every case on all cores and tallies the verdicts. Cases that
// differ only in their request share one prepared deployment.
func Sweep(models []SweepModel, cases []Case, workers int) *SweepResult {
	return SweepContext(context.Background(), models, cases, workers)
}

// SweepContext is Sweep that stops handing out cases once ctx is done;
// the result then says so (Stopped) and tallies only the cases run.
func SweepContext(ctx context.Context, models []SweepModel, cases []Case, workers int) *SweepResult {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	byName := map[string]SweepModel{}
	for _, sm := range models {
		byName[sm.Name] = sm
	}
	groups := map[deployment][]Case{}
	var order []deployment
	for _, c := range cases {
		d := deployment{c.Model, c.PTP, c.DTP, c.PPP, c.Plans, c.Blocks, c.Mode, c.Hit != "none" && hasState(byName[c.Model].Model)}
		if _, ok := groups[d]; !ok {
			order = append(order, d)
		}
		groups[d] = append(groups[d], c)
	}
	res := &SweepResult{Workers: workers, ByCategory: map[string]*Counts{}, ByVariant: map[string]*Counts{}, Rejections: map[string]int{}, Failures: []string{}}
	start := time.Now()
	jobs := make(chan []Case)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cs := range jobs {
				sm := byName[cs[0].Model]
				var prepared *xfer.PD
				var perr error
				if s, err := cs[0].Setup(sm); err != nil {
					perr = err
				} else {
					prepared, perr = xfer.Prepare(s)
				}
				for _, c := range cs {
					var r *Result
					err := perr
					if err == nil {
						r, err = runPrepared(sm, prepared, c.Request())
					}
					mu.Lock()
					res.tally(c, r, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, d := range order {
		if ctx.Err() != nil {
			res.Stopped = true
			break
		}
		jobs <- groups[d]
	}
	close(jobs)
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	sort.Strings(res.Failures)
	return res
}

func hasState(m *model.Model) bool {
	for _, l := range m.Layers {
		if l.Kind.IsState() {
			return true
		}
	}
	return false
}

func (s *SweepResult) tally(c Case, r *Result, err error) {
	v := Wrong
	switch {
	case err != nil:
		if len(s.Failures) < 20 {
			s.Failures = append(s.Failures, fmt.Sprintf("%s: error: %v", c, err))
		}
	case r.Verdict == Wrong:
		if len(s.Failures) < 20 {
			s.Failures = append(s.Failures, fmt.Sprintf("%s: %s", c, r.Mismatch))
		}
	default:
		v = r.Verdict
		s.BytesMoved += r.Bytes
		if v == Rejected {
			s.Rejections[ruleOf(r.Reason)]++
		}
	}
	s.Counts.add(v)
	for _, key := range []struct {
		m map[string]*Counts
		k string
	}{
		{s.ByCategory, c.Family},
		{s.ByVariant, "plans=" + string(c.Plans)},
		{s.ByVariant, "blocks=" + c.Blocks},
		{s.ByVariant, "hit=" + c.Hit},
		{s.ByVariant, "mode=" + string(c.Mode)},
		{s.ByVariant, fmt.Sprintf("p-pp=%d", max(1, c.PPP))},
	} {
		if key.m[key.k] == nil {
			key.m[key.k] = &Counts{}
		}
		key.m[key.k].add(v)
	}
}

// ruleOf extracts the rule from a rejection message "rejected (rule, side): ...".
func ruleOf(reason string) string {
	var rule string
	if _, err := fmt.Sscanf(reason, "rejected (%s", &rule); err == nil && len(rule) > 0 {
		return rule[:len(rule)-1]
	}
	return reason
}

// Loader reads a bundled model by name ("openai/gpt-oss-20b").
type Loader func(name string) (*model.Model, error)

// SweepModels is the sweep's model set: full-attention GQA, sliding-window
// hybrids, gated-delta-net hybrids (with the DFlash drafter), a Mamba2
// hybrid, MLA and chunked local attention. quick keeps a few hundred cases
// for make test.
func SweepModels(load Loader, quick bool) ([]SweepModel, error) {
	type entry struct {
		family, name, draft string
		spec                int
		prompts             []int
		tps                 []int
	}
	// Prompt lengths keep each case to a few MB of pages: many short
	// prompts on light models, one on the heavy state models (whose state
	// pages dominate whatever the prompt).
	entries := []entry{
		{"full-attention", "Qwen/Qwen3-0.6B", "", 0, []int{17, 25, 40, 70, 97, 130}, nil},
		{"full-attention", "meta-llama/Llama-3.1-8B", "", 0, []int{17}, nil},
		{"sliding-window", "openai/gpt-oss-20b", "", 0, []int{37, 50, 70, 100, 150}, nil},
		{"sliding-window", "openai/gpt-oss-120b", "", 0, []int{37, 70, 100, 150, 200}, nil},
		{"sliding-window", "google/gemma-3-1b-it", "", 0, []int{37, 70, 100, 150, 300}, nil},
		{"sliding-window", "google/gemma-3-27b-it", "", 0, []int{17}, nil},
		{"sliding-window", "google/gemma-4-E2B", "", 0, []int{37, 100, 150}, nil},
		{"sliding-window", "google/gemma-4-26B-A4B-it", "", 0, []int{17, 37}, nil},
		{"gdn", "Qwen/Qwen3.5-0.8B", "", 0, []int{37}, nil},
		{"gdn", "Qwen/Qwen3.5-0.8B", "mtp", 2, []int{300}, nil},
		{"gdn", "Qwen/Qwen3.6-35B-A3B", "z-lab/Qwen3.6-35B-A3B-DFlash", 7, []int{300}, []int{2, 4}},
		{"mamba2", "nvidia/NVIDIA-Nemotron-Nano-9B-v2", "", 0, []int{300}, []int{2, 4}},
		{"mla", "deepseek-ai/DeepSeek-V2-Lite", "", 0, []int{17, 37, 70, 100, 150}, nil},
		{"chunked-local", "meta-llama/Llama-4-Scout-17B-16E", "", 0, []int{17, 37}, nil},
	}
	if quick {
		entries = []entry{
			{"full-attention", "Qwen/Qwen3-0.6B", "", 0, []int{37}, []int{1, 4}},
			{"sliding-window", "openai/gpt-oss-20b", "", 0, []int{100}, []int{2, 8}},
			{"gdn", "Qwen/Qwen3.5-0.8B", "", 0, []int{37}, []int{1, 4}},
			{"mla", "deepseek-ai/DeepSeek-V2-Lite", "", 0, []int{37}, []int{2, 4}},
		}
	}
	var out []SweepModel
	for _, e := range entries {
		m, err := load(e.name)
		if err != nil {
			return nil, err
		}
		name := e.name
		switch e.draft {
		case "":
		case "mtp":
			if m, err = m.WithMTP(); err != nil {
				return nil, err
			}
			name += " + MTP"
		default:
			d, err := load(e.draft)
			if err != nil {
				return nil, err
			}
			if m, err = m.WithDraft(d); err != nil {
				return nil, err
			}
			name += " + " + e.draft
		}
		out = append(out, SweepModel{Family: e.family, Name: name, Model: m, Spec: e.spec, Prompts: e.prompts, TPs: e.tps})
	}
	return out, nil
}
