// Package scenario describes the traffic an agent generates: the model, the
// P and D engines, the connector, the request rate, prompt lengths, prefix
// hits and how long to run. A scenario is a small JSON file or flags.
package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/xfer"
)

// Scenario is one deployment and its traffic.
type Scenario struct {
	Name        string          `json:"name"`
	Model       string          `json:"model"`  // a bundled model name
	Config      json.RawMessage `json:"config"` // or an inline config.json
	Draft       string          `json:"draft"`  // a bundled model or "mtp"
	P           plan.Engine     `json:"p"`
	D           plan.Engine     `json:"d"`
	Connector   string          `json:"connector"` // nixl (D pulls) or nixl-push (P pushes)
	Plans       string          `json:"plans"`     // auto, independent or invariant
	Rate        float64         `json:"rate"`      // requests per second; 0 is as fast as the backend goes
	PromptMin   int             `json:"prompt_min"`
	PromptMax   int             `json:"prompt_max"`
	HitFraction float64         `json:"prefix_hit_fraction"` // of each prompt, aligned down by xfer
	// HitTokens, when positive, is every prompt's prefix hit in tokens
	// instead of a fraction (aligned down by xfer): the app's "Run live"
	// runs the very request its views show.
	HitTokens   int     `json:"prefix_hit_tokens,omitempty"`
	Layout      string  `json:"layout,omitempty"` // split (default) or blocks-first: attention's cache layout
	DurationS   float64 `json:"duration_s"`       // 0 runs until stopped
	Requests    int     `json:"requests"`         // 0 is unlimited
	VerifyEvery int     `json:"verify_every"`     // prove every Nth request with the oracle; 1 is every one
	Seed        uint64  `json:"seed"`
	// Agents maps watched NIXL agents (telemetry ring file names) to the
	// engine rank each belongs to, "p0" or "d3", for kvscope-agent watch
	// without --side-channel (which learns it from the engines).
	Agents map[string]string `json:"agents,omitempty"`
}

// AgentRank reads an Agents value: the side ("P" or "D") and TP rank.
func AgentRank(v string) (side string, rank int, err error) {
	if len(v) < 2 || (v[0] != 'p' && v[0] != 'd' && v[0] != 'P' && v[0] != 'D') {
		return "", 0, fmt.Errorf("want p<rank> or d<rank>")
	}
	rank, err = strconv.Atoi(v[1:])
	if err != nil || rank < 0 || rank >= 1<<16 {
		return "", 0, fmt.Errorf("want p<rank> or d<rank> with a rank below 65536")
	}
	return strings.ToUpper(v[:1]), rank, nil
}

// Default is the embedded agent's scenario: gpt-oss-20b, P at TP 2 and D at
// TP 4, small KV pools (32 MiB per rank, host memory: vLLM's start-up check
// needs one 1,024-token request to fit), 4 requests a second of 64 to 1024
// tokens, a quarter of them prefix hits, every one verified.
func Default() Scenario {
	e := func(tp int) plan.Engine {
		return plan.Engine{TensorParallelSize: tp, KVCacheMemoryBytes: 32 << 20, MaxModelLen: 1024}
	}
	return Scenario{
		Name: "default", Model: "openai/gpt-oss-20b", P: e(2), D: e(4), Connector: "nixl", Plans: "auto",
		Rate: 4, PromptMin: 64, PromptMax: 1024, HitFraction: 0.25, VerifyEvery: 1, Seed: 1,
	}
}

// maxFileBytes caps a scenario file (an inline config included).
const maxFileBytes = 4 << 20

// Load reads a scenario file over the defaults.
func Load(path string) (Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return Default(), fmt.Errorf("scenario: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return Default(), fmt.Errorf("scenario: %w", err)
	}
	if len(data) > maxFileBytes {
		return Default(), fmt.Errorf("scenario: %s: larger than the %d-byte limit", path, maxFileBytes)
	}
	s, err := Parse(data)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a scenario's JSON over the defaults and validates it.
func Parse(data []byte) (Scenario, error) {
	s := Default()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("scenario: %w", err)
	}
	if dec.More() {
		return s, fmt.Errorf("scenario: trailing data after the JSON object")
	}
	return s, s.Validate()
}

// Validate checks ranges and names the field at fault.
func (s Scenario) Validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("scenario: %s = %v: %s", field, v, why)
	}
	switch {
	case s.Model == "" && len(s.Config) == 0:
		return bad("model", `""`, "name a bundled model or give an inline config")
	case s.Rate < 0 || s.Rate > 1e5:
		return bad("rate", s.Rate, "must be between 0 and 100000 per second")
	case s.PromptMin < 2 || s.PromptMax < s.PromptMin || s.PromptMax > 1<<24:
		return bad("prompt_min/prompt_max", fmt.Sprintf("%d/%d", s.PromptMin, s.PromptMax), "need 2 <= prompt_min <= prompt_max <= 16777216")
	case s.HitFraction < 0 || s.HitFraction >= 1:
		return bad("prefix_hit_fraction", s.HitFraction, "must be in [0, 1)")
	case s.DurationS < 0 || s.Requests < 0 || s.VerifyEvery < 0:
		return bad("duration_s/requests/verify_every", fmt.Sprintf("%v/%d/%d", s.DurationS, s.Requests, s.VerifyEvery), "must not be negative")
	case s.HitTokens < 0 || s.HitTokens > 0 && s.HitTokens >= s.PromptMin:
		return bad("prefix_hit_tokens", s.HitTokens, fmt.Sprintf("must be below prompt_min (%d)", s.PromptMin))
	case s.Layout != "" && s.Layout != string(xfer.SplitKV) && s.Layout != string(xfer.BlocksFirst):
		return bad("layout", s.Layout, "want split or blocks-first")
	case s.DurationS > 1e9:
		return bad("duration_s", s.DurationS, "must be at most 1e9 seconds (0 runs until stopped)")
	}
	switch xfer.PlanChoice(s.Plans) {
	case "", xfer.AutoPlans, xfer.IndependentPlans, xfer.InvariantPlans:
	default:
		return bad("plans", s.Plans, "want auto, independent or invariant")
	}
	if _, err := xfer.ParseConnector(s.Connector); err != nil {
		return bad("connector", s.Connector, err.Error())
	}
	if len(s.Agents) > 4096 {
		return bad("agents", len(s.Agents), "at most 4096 entries")
	}
	for name, v := range s.Agents {
		side, rank, err := AgentRank(v)
		if err != nil {
			return bad("agents."+name, strconv.Quote(v), err.Error())
		}
		if tp := max(s.engine(side).TensorParallelSize, 1); rank >= tp {
			return bad("agents."+name, strconv.Quote(v), fmt.Sprintf("%s has TP %d", side, tp))
		}
	}
	return nil
}

// engine is the P or D engine's flags.
func (s Scenario) engine(side string) plan.Engine {
	if side == "P" {
		return s.P
	}
	return s.D
}

// LoadModel resolves the scenario's model and draft from the catalog.
func (s Scenario) LoadModel(cat model.Catalog) (*model.Model, error) {
	var m *model.Model
	if len(s.Config) > 0 {
		var err error
		if m, err = model.Parse(s.Config); err != nil {
			return nil, fmt.Errorf("scenario config: %w", err)
		}
		m.Name = "custom"
	} else {
		name, data, err := cat.Lookup(s.Model)
		if err != nil {
			return nil, err
		}
		if m, err = model.Parse(data); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		m.Name = name
	}
	switch s.Draft {
	case "":
		return m, nil
	case "mtp":
		return m.WithMTP()
	}
	name, data, err := cat.Lookup(s.Draft)
	if err != nil {
		return nil, fmt.Errorf("draft: %w", err)
	}
	d, err := model.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("draft %s: %w", name, err)
	}
	d.Name = name
	return m.WithDraft(d)
}

// Setup is the scenario's P/D setup without a request.
func (s Scenario) Setup(m *model.Model) (xfer.Setup, error) {
	c, err := xfer.ParseConnector(s.Connector)
	if err != nil {
		return xfer.Setup{}, err
	}
	return xfer.Setup{Model: m, P: s.P, D: s.D, Connector: c, Plans: xfer.PlanChoice(s.Plans), Layout: xfer.CacheLayout(s.Layout), KeepPairs: true}, nil
}

// Requests draws the scenario's requests: uniform prompt lengths in
// [prompt_min, prompt_max], each with its prefix-hit fraction.
type Requests struct {
	s   Scenario
	rng *rand.Rand
}

// NewRequests seeds a request stream.
func (s Scenario) NewRequests() *Requests {
	return &Requests{s: s, rng: rand.New(rand.NewPCG(s.Seed, s.Seed^0x9E3779B97F4A7C15))}
}

// Next returns the next request.
func (r *Requests) Next() xfer.Request {
	n := r.s.PromptMin + r.rng.IntN(r.s.PromptMax-r.s.PromptMin+1)
	if r.s.HitTokens > 0 {
		return xfer.Request{PromptTokens: n, PrefixHitTokens: r.s.HitTokens}
	}
	return xfer.Request{PromptTokens: n, PrefixHitTokens: int(float64(n) * r.s.HitFraction)}
}

// Describe is a one-line description for the hello event.
func (s Scenario) Describe() string {
	hits := fmt.Sprintf("%.0f%% prefix hits", 100*s.HitFraction)
	if s.HitTokens > 0 {
		hits = fmt.Sprintf("%d-token prefix hits", s.HitTokens)
	}
	model := s.Model
	if model == "" {
		model = "an inline config.json"
	}
	if s.Draft != "" {
		model += " + " + s.Draft
	}
	version := s.P.VLLMVersion
	if version == "" {
		version = vllm.Newest().Name()
	}
	return fmt.Sprintf("%s: %s, P TP%d -> D TP%d, vLLM %s, %s, %.3g req/s, %d-%d tokens, %s",
		s.Name, model, max(1, s.P.TensorParallelSize), max(1, s.D.TensorParallelSize), version, s.Connector, s.Rate, s.PromptMin, s.PromptMax, hits)
}

// UseGPUMemory sets both engines' KV cache memory to fraction of the
// smallest GPU's memory, as vLLM's --gpu-memory-utilization bounds it (the
// weights and activations' share is not subtracted: give a fraction that
// leaves room for them). It needs at least one GPU.
func (s *Scenario) UseGPUMemory(gpus []event.GPU, fraction float64) error {
	if fraction <= 0 || fraction > 1 {
		return fmt.Errorf("scenario: GPU memory fraction %v must be in (0, 1]", fraction)
	}
	if len(gpus) == 0 {
		return fmt.Errorf("scenario: no GPUs were discovered to size the KV cache from")
	}
	least := gpus[0].MemoryBytes
	for _, g := range gpus[1:] {
		least = min(least, g.MemoryBytes)
	}
	bytes := int64(float64(least) * fraction)
	s.P.KVCacheMemoryBytes, s.D.KVCacheMemoryBytes = bytes, bytes
	return nil
}

// FitHost makes both engines' KV pools fit in limit bytes of host memory
// in all (every P and D rank: the host backend allocates them in one
// process), as the embedded agent needs. When they do not fit as given,
// each side first keeps its plan (the same groups, slots and block sizes)
// and takes the blocks one request of the longest prompt needs, as
// --num-gpu-blocks-override sets them (the agent moves one request at a
// time), with max_model_len brought down to the shortest that keeps the
// plan. When no plan-preserving length fits, both sides run at the
// largest max_model_len (from the prompt up, doubling) whose pools fit,
// and the notes say how each side's plan changes there (a selector that
// weighs bytes per request at max_model_len may group differently). flag
// names the setting that raises limit, for the refusal.
func (s *Scenario) FitHost(m *model.Model, limit int64, flag string) ([]string, error) {
	var orig [2]*plan.Plan
	var total int64
	for i, e := range []plan.Engine{s.P, s.D} {
		p, err := plan.New(m, e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sideNames[i], err)
		}
		orig[i] = p
		total += poolBytes(p)
	}
	if total <= limit {
		return nil, nil
	}
	// The plans as shown, with the blocks of one request.
	var fitted [2]plan.Engine
	for i, p := range orig {
		e, _, err := fitSide(m, []plan.Engine{s.P, s.D}[i], p, s.PromptMax)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sideNames[i], err)
		}
		fitted[i] = e
	}
	kept, need, err := fittedPlans(m, &fitted)
	if err != nil {
		return nil, err
	}
	if need > limit {
		scaled, err := fitScaled(m, orig, s.PromptMax, limit)
		if err != nil {
			return nil, fmt.Errorf("one %d-token request needs %d MiB of KV pools on %d ranks with the plans as shown, over the %d MiB of host memory the agent may take, and %v: shorten the prompt, or give the agent more with %s",
				s.PromptMax, need>>20, orig[0].Engine.TensorParallelSize+orig[1].Engine.TensorParallelSize, limit>>20, err, flag)
		}
		fitted = scaled
		if kept, _, err = fittedPlans(m, &fitted); err != nil {
			return nil, err
		}
	}
	var changed []string
	for i, e := range fitted {
		was := orig[i]
		notes := []string{}
		if e.MaxModelLen != was.Engine.MaxModelLen {
			notes = append(notes, fmt.Sprintf("--max-model-len %d (was %d)", e.MaxModelLen, was.Engine.MaxModelLen))
		}
		if e.GroupSize != was.Engine.GroupSize && e.GroupSize == was.GroupSize {
			notes = append(notes, fmt.Sprintf("--kv-cache-group-size %d (the plan's g, held so that the groups stay as shown)", e.GroupSize))
		}
		notes = append(notes, fmt.Sprintf("--num-gpu-blocks-override %d (was %d blocks of %d bytes per rank)", e.NumGPUBlocksOverride, was.NumBlocks, was.BytesPerBlock))
		note := sideNames[i] + ": " + strings.Join(notes, ", ")
		if p := kept[i]; !samePlan(was, p) {
			note += fmt.Sprintf("; the plan changes there: %d groups of %d slots, block %d (was %d groups of %d, block %d): no max_model_len that keeps the plan fits",
				p.NumGroups, p.Slots, p.BlockSize, was.NumGroups, was.Slots, was.BlockSize)
		}
		changed = append(changed, note)
	}
	s.P, s.D = fitted[0], fitted[1]
	return changed, nil
}

var sideNames = [2]string{"P", "D"}

// poolBytes is what one engine's KV pools take on all its ranks.
func poolBytes(p *plan.Plan) int64 {
	return int64(max(1, p.Engine.TensorParallelSize)) * p.NumBlocks * p.BytesPerBlock
}

// fittedPlans gives the fitted engines the blocks the pair's TP-invariant
// plan needs too (holdInvariant), and plans them: the plans and the host
// memory their pools take in all.
func fittedPlans(m *model.Model, fitted *[2]plan.Engine) ([2]*plan.Plan, int64, error) {
	var ps [2]*plan.Plan
	holdInvariant(m, &fitted[0], &fitted[1])
	var need int64
	for i, e := range fitted {
		p, err := plan.New(m, e)
		if err != nil {
			return ps, 0, fmt.Errorf("%s: %w", sideNames[i], err)
		}
		ps[i] = p
		need += poolBytes(p)
	}
	return ps, need, nil
}

// fitScaled runs both sides at the largest max_model_len, from the prompt
// up by doubling to the engines' own, whose pools of one request's blocks
// fit limit, whatever that does to the plans.
func fitScaled(m *model.Model, orig [2]*plan.Plan, prompt int, limit int64) ([2]plan.Engine, error) {
	full := min(orig[0].Engine.MaxModelLen, orig[1].Engine.MaxModelLen)
	var best [2]plan.Engine
	found := false
	var last error
	lengths := []int{}
	for n := prompt; n < full; n *= 2 {
		lengths = append(lengths, n)
	}
	oneRequest := func(o *plan.Plan, n int) (plan.Engine, error) {
		e := o.Engine
		e.MaxModelLen, e.NumGPUBlocksOverride = n, 0
		p, err := plan.New(m, e)
		if err != nil {
			return e, err
		}
		e.NumGPUBlocksOverride = int(min(p.BlocksPerRequest+2, 1<<31-1)) // and the null block, with one to spare
		return e, nil
	}
	for _, n := range append(lengths, full) {
		var es [2]plan.Engine
		var err error
		if es[0], err = oneRequest(orig[0], n); err == nil {
			es[1], err = oneRequest(orig[1], n)
		}
		if err != nil {
			last = fmt.Errorf("at --max-model-len %d: %w", n, err)
			continue
		}
		_, need, err := fittedPlans(m, &es)
		if err != nil {
			last = fmt.Errorf("at --max-model-len %d: %w", n, err)
			continue
		}
		if need > limit {
			last = fmt.Errorf("at --max-model-len %d they need %d MiB", n, need>>20)
			break
		}
		best, found = es, true
	}
	if !found {
		return best, fmt.Errorf("no max_model_len from %d to %d fits (%v)", prompt, full, last)
	}
	return best, nil
}

// holdInvariant gives both fitted engines the blocks the TP-invariant
// plan of the pair needs for one request too, when it needs more than
// their own plans (every deployment plans it, whichever plans the
// transfer uses).
func holdInvariant(m *model.Model, p, d *plan.Engine) {
	pe, de := *p, *d
	pe.NumGPUBlocksOverride, de.NumGPUBlocksOverride = 0, 0
	inv, err := plan.NewInvariant(m, pe, de)
	if err != nil {
		return // planned as given (the refusal, if any, says why)
	}
	for _, side := range []struct {
		e *plan.Engine
		p *plan.Plan
	}{{p, inv.P}, {d, inv.D}} {
		if need := side.p.BlocksPerRequest + 2; side.e.NumGPUBlocksOverride > 0 && need > int64(side.e.NumGPUBlocksOverride) {
			side.e.NumGPUBlocksOverride = int(min(need, 1<<31-1))
		}
	}
}

// samePlan reports whether b places every layer as a does, in the same
// group and slot, at the same block size but for state layers, whose
// block is the whole request (max_model_len tokens) whatever it is.
func samePlan(a, b *plan.Plan) bool {
	d := plan.Compare(a, b)
	if !d.SameLayout {
		return false
	}
	for _, c := range d.Changes {
		l, ok := a.LayerByName(c.Layer)
		if !ok || !l.Kind.IsState() {
			return false
		}
	}
	return true
}

// fitSide is one engine with the fewest blocks that hold one request: at
// the smallest max_model_len, from the prompt up by doubling to the
// engine's own, at which the plan stays the one it has (a selector may
// weigh blocks per request, so a shorter max_model_len can change groups).
func fitSide(m *model.Model, e plan.Engine, orig *plan.Plan, prompt int) (plan.Engine, *plan.Plan, error) {
	full := orig.Engine.MaxModelLen
	lengths := []int{}
	for n := prompt; n < full; n *= 2 {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, full)
	var last error
	for _, n := range lengths {
		f := e
		if n != full {
			f.MaxModelLen = n
		}
		p, err := plan.New(m, f)
		if err != nil {
			last = err
			continue
		}
		if !samePlan(orig, p) && orig.GroupSize > 0 && f.GroupSize == 0 {
			// A selector that weighs bytes per request at max_model_len
			// groups a shorter engine differently: hold its g where the
			// profile takes --kv-cache-group-size, and the buckets, pages
			// and blocks stay the plan's.
			g := f
			g.GroupSize = orig.GroupSize
			if g.CheckFlags() == nil {
				if pg, err := plan.New(m, g); err == nil {
					f, p = g, pg
				}
			}
		}
		if !samePlan(orig, p) {
			last = fmt.Errorf("at --max-model-len %d the plan differs (%d layers change group, slot or block size)", n, len(plan.Compare(orig, p).Changes))
			continue
		}
		blocks := p.BlocksPerRequest + 2 // and the null block, with one to spare
		if blocks > 1<<31-1 {
			return e, nil, fmt.Errorf("%d blocks per request", p.BlocksPerRequest)
		}
		f.NumGPUBlocksOverride = int(blocks)
		if p, err = plan.New(m, f); err != nil {
			return e, nil, fmt.Errorf("%d blocks per rank for one %d-token request: %w", blocks, n, err)
		}
		if !samePlan(orig, p) {
			return e, nil, fmt.Errorf("with %d blocks the plan differs (%d layers change group, slot or block size)", blocks, len(plan.Compare(orig, p).Changes))
		}
		return f, p, nil
	}
	return e, nil, fmt.Errorf("no max_model_len from %d to %d keeps the plan as shown: %w", prompt, full, last)
}
