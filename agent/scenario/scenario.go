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
	DurationS   float64         `json:"duration_s"`          // 0 runs until stopped
	Requests    int             `json:"requests"`            // 0 is unlimited
	VerifyEvery int             `json:"verify_every"`        // prove every Nth request with the oracle; 1 is every one
	Seed        uint64          `json:"seed"`
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
	return xfer.Setup{Model: m, P: s.P, D: s.D, Connector: c, Plans: xfer.PlanChoice(s.Plans), KeepPairs: true}, nil
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
	return xfer.Request{PromptTokens: n, PrefixHitTokens: int(float64(n) * r.s.HitFraction)}
}

// Describe is a one-line description for the hello event.
func (s Scenario) Describe() string {
	return fmt.Sprintf("%s: %s, P TP%d -> D TP%d, %s, %.3g req/s, %d-%d tokens, %.0f%% prefix hits",
		s.Name, s.Model, max(1, s.P.TensorParallelSize), max(1, s.D.TensorParallelSize), s.Connector, s.Rate, s.PromptMin, s.PromptMax, 100*s.HitFraction)
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
