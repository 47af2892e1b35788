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
	return fmt.Sprintf("%s: %s, P TP%d -> D TP%d, %s, %.3g req/s, %d-%d tokens, %s",
		s.Name, s.Model, max(1, s.P.TensorParallelSize), max(1, s.D.TensorParallelSize), s.Connector, s.Rate, s.PromptMin, s.PromptMax, hits)
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
// each side keeps its plan (the same groups, slots and block sizes) and
// takes the blocks one request of the longest prompt needs, as
// --num-gpu-blocks-override sets them (the agent moves one request at a
// time), with max_model_len brought down to that prompt. It says what it
// changed, and refuses when that would change a plan or still not fit.
func (s *Scenario) FitHost(m *model.Model, limit int64) ([]string, error) {
	type side struct {
		name string
		e    *plan.Engine
		p    *plan.Plan
		tp   int64
	}
	sides := []*side{{name: "P", e: &s.P}, {name: "D", e: &s.D}}
	var total int64
	for _, sd := range sides {
		p, err := plan.New(m, *sd.e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sd.name, err)
		}
		sd.p, sd.tp = p, int64(max(1, sd.e.TensorParallelSize))
		total += sd.tp * p.NumBlocks * p.BytesPerBlock
	}
	if total <= limit {
		return nil, nil
	}
	var changed []string
	var need int64
	fitted := make([]plan.Engine, len(sides))
	for i, sd := range sides {
		e, p, err := fitSide(m, *sd.e, sd.p, s.PromptMax)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sd.name, err)
		}
		var notes []string
		if from := sd.p.Engine.MaxModelLen; e.MaxModelLen != sd.e.MaxModelLen {
			notes = append(notes, fmt.Sprintf("--max-model-len %d (was %d)", e.MaxModelLen, from))
		}
		notes = append(notes, fmt.Sprintf("--num-gpu-blocks-override %d (was %d blocks of %d bytes per rank)", p.NumBlocks, sd.p.NumBlocks, sd.p.BytesPerBlock))
		need += sd.tp * p.NumBlocks * p.BytesPerBlock
		fitted[i] = e
		changed = append(changed, sd.name+": "+strings.Join(notes, ", "))
	}
	if need > limit {
		return nil, fmt.Errorf("one %d-token request needs %d MiB of KV pools on %d ranks, over the %d MiB of host memory the agent may take: shorten the prompt, or run kvscope-agent with a larger --host-memory-mib",
			s.PromptMax, need>>20, sides[0].tp+sides[1].tp, limit>>20)
	}
	for i, sd := range sides {
		*sd.e = fitted[i]
	}
	return changed, nil
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
		if d := plan.Compare(orig, p); !d.SameLayout || !d.SameBlockSizes {
			last = fmt.Errorf("at --max-model-len %d the plan differs (%d layers change group, slot or block size)", n, len(d.Changes))
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
		if d := plan.Compare(orig, p); !d.SameLayout || !d.SameBlockSizes {
			return e, nil, fmt.Errorf("with %d blocks the plan differs (%d layers change group, slot or block size)", blocks, len(d.Changes))
		}
		return f, p, nil
	}
	return e, nil, fmt.Errorf("no max_model_len from %d to %d keeps the plan as shown: %w", prompt, full, last)
}
