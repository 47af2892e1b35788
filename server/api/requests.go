package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/tune"
	"github.com/kvscope/kvscope/core/vlog"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/kvscope/kvscope/server/internal/hub"
)

// ModelRequest names a request's model: a bundled name, a Hub id
// (org/name[@revision], through the server's Hugging Face cache, then the
// Hub, when the server resolves Hub ids) or an inline config.json; and
// its draft: the same, or "mtp" (the model's own MTP layers).
type ModelRequest struct {
	Model       string          `json:"model"`
	Config      json.RawMessage `json:"config"` // an inline config.json instead of a name
	Draft       string          `json:"draft"`
	DraftConfig json.RawMessage `json:"draft_config"`

	src ModelSources // where load found Hub ids
}

// ModelSources says where a Hub id's config came from, for the model and
// the draft (nil for a bundled name or an inline config). Answers carry
// it beside their own fields as model_source and draft_source.
type ModelSources struct {
	Model *hub.Source `json:"model_source,omitempty"`
	Draft *hub.Source `json:"draft_source,omitempty"`
}

// Resolved reports whether a Hub id was resolved.
func (s ModelSources) Resolved() bool { return s.Model != nil || s.Draft != nil }

// PlanRequest is the body of /api/plan: a model and one engine, whose keys
// are vLLM's flag names in snake case (the engine object of plan --json).
type PlanRequest struct {
	ModelRequest
	Engine plan.Engine `json:"engine"`
	// VLLMVersion applies to the engine when it names no version.
	VLLMVersion string `json:"vllm_version"`
}

// PDRequest is the body of /api/pd and /api/oracle: a model, P's and D's
// engines, the connector and the request, as kvscope pd takes them.
type PDRequest struct {
	ModelRequest
	P         plan.Engine `json:"p"`
	D         plan.Engine `json:"d"`
	Connector string      `json:"connector"`
	Plans     string      `json:"plans"`
	Layout    string      `json:"layout"`
	Prompt    int         `json:"prompt_tokens"` // 4,096 when 0
	Hit       int         `json:"prefix_hit_tokens"`
	// VLLMVersion applies to each engine that names no version (with
	// logs: it overrides theirs).
	VLLMVersion string `json:"vllm_version"`
	// PLog and DLog are P's and D's startup logs: each engine is planned
	// from its own log as /api/check plans it, instead of from p and d.
	PLog string `json:"p_log"`
	DLog string `json:"d_log"`

	pair *check.Pair // the engines the logs imply (readLogs)
}

// hasLogs reports whether the request gives the engines as startup logs.
func (r *PDRequest) hasLogs() bool { return r.PLog != "" || r.DLog != "" }

// TuneRequest is the body of /api/tune: the engines' fixed flags, the
// ranges searched (the range flags' names in snake case), the objective
// and its mix weights, and how many candidates to list.
type TuneRequest struct {
	ModelRequest
	P           plan.Engine `json:"p"`
	D           plan.Engine `json:"d"`
	Prompt      int         `json:"prompt_tokens"` // 4,096 when 0
	Ranges      tune.Ranges `json:"ranges"`
	Objective   string      `json:"objective"`
	Weights     string      `json:"weights"`
	Top         int         `json:"top"`
	VLLMVersion string      `json:"vllm_version"`
}

// CheckRequest is the body of /api/check: a vLLM startup log, and the
// model, draft and version to plan it with instead of the log's own.
type CheckRequest struct {
	ModelRequest
	Log         string `json:"log"`
	VLLMVersion string `json:"vllm_version"`
}

func (r *PlanRequest) prepare() error { return versioned(r.VLLMVersion, &r.Engine) }
func (r *PDRequest) prepare() error {
	if !r.hasLogs() {
		return versioned(r.VLLMVersion, &r.P, &r.D)
	}
	switch {
	case r.PLog == "" || r.DLog == "":
		return fmt.Errorf("p_log (%d bytes), d_log (%d bytes): give both engines' startup logs", len(r.PLog), len(r.DLog))
	case r.P != plan.Engine{} || r.D != plan.Engine{}:
		return fmt.Errorf("p, d: the logs give the engines; send p_log and d_log without p and d")
	}
	return nil
}
func (r *TuneRequest) prepare() error  { return versioned(r.VLLMVersion, &r.P, &r.D) }
func (r *CheckRequest) prepare() error { return nil }

// versioned gives the engines the request's vLLM version where they name
// none, and refuses what that version's command line refuses.
func versioned(version string, engines ...*plan.Engine) error {
	for _, e := range engines {
		if e.VLLMVersion == "" {
			e.VLLMVersion = version
		}
		if err := e.CheckFlags(); err != nil {
			return err
		}
	}
	return nil
}

// targetAndDraft resolves the request's model and draft apart (nil for
// what it does not name): a log check attaches the draft itself.
func (r *ModelRequest) targetAndDraft(ctx context.Context, ms hub.Models) (target, draft *model.Model, err error) {
	if r.Model != "" || len(r.Config) > 0 {
		t := ModelRequest{Model: r.Model, Config: r.Config}
		if target, err = t.load(ctx, ms); err != nil {
			return nil, nil, err
		}
		r.src.Model = t.src.Model
	}
	if r.Draft != "" && r.Draft != "mtp" || len(r.DraftConfig) > 0 {
		d := ModelRequest{Model: r.Draft, Config: r.DraftConfig}
		if draft, err = d.load(ctx, ms); err != nil {
			return nil, nil, err
		}
		r.src.Draft = d.src.Model
	}
	return target, draft, nil
}

// readLogs plans P and D from their startup logs (check.RunPair) and
// takes the engines they imply.
func (r *PDRequest) readLogs(ctx context.Context, ms hub.Models) error {
	target, draft, err := r.targetAndDraft(ctx, ms)
	if err != nil {
		return err
	}
	var in [2]check.Input
	for i, text := range []string{r.PLog, r.DLog} {
		l, err := vlog.Parse(text)
		if err != nil {
			return BadData(fmt.Errorf("%s: %w", []string{"p_log", "d_log"}[i], err))
		}
		in[i] = check.Input{Log: l, Version: r.VLLMVersion, Model: target, Draft: draft, Catalog: ms.Catalog}
	}
	pair, err := check.RunPair(in[0], in[1])
	var se *check.SideError
	switch {
	case errors.As(err, &se):
		return BadData(fmt.Errorf("%s_log: %w", strings.ToLower(se.Side), se.Err))
	case err != nil:
		return BadData(fmt.Errorf("p_log, d_log: %w", err))
	}
	r.pair, r.P, r.D = pair, pair.Engines[0], pair.Engines[1]
	return nil
}

// load resolves the request's model and draft, and records where Hub
// ids came from.
func (r *ModelRequest) load(ctx context.Context, ms hub.Models) (*model.Model, error) {
	parse := func(name string, inline json.RawMessage) (*model.Model, *hub.Source, error) {
		if len(inline) > 0 {
			m, err := model.Parse(inline)
			return m, nil, err
		}
		full, data, src, err := ms.Lookup(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		m, err := model.Parse(data)
		if err != nil && src != nil {
			return nil, nil, fmt.Errorf("%s: %w", src.Where(), err)
		}
		if err == nil {
			m.Name = full
		}
		return m, src, err
	}
	m, src, err := parse(r.Model, r.Config)
	if err != nil {
		return nil, BadData(fmt.Errorf("model: %w", err))
	}
	r.src.Model = src
	switch {
	case r.Draft == "mtp":
		m, err = m.WithMTP()
	case r.Draft != "" || len(r.DraftConfig) > 0:
		var d *model.Model
		if d, src, err = parse(r.Draft, r.DraftConfig); err == nil {
			r.src.Draft = src
			m, err = m.WithDraft(d)
		}
	}
	if err != nil {
		return nil, BadData(fmt.Errorf("draft: %w", err))
	}
	return m, nil
}

// Setup is the P/D setup a request describes, with its pairs kept or not.
func (r *PDRequest) Setup(ctx context.Context, ms hub.Models, keepPairs bool) (xfer.Setup, error) {
	var m *model.Model
	if r.pair == nil {
		var err error
		if m, err = r.load(ctx, ms); err != nil {
			return xfer.Setup{}, err
		}
	}
	conn, err := xfer.ParseConnector(r.Connector)
	if err != nil {
		return xfer.Setup{}, BadData(err)
	}
	layout := xfer.SplitKV
	if r.Layout == "blocks-first" {
		layout = xfer.BlocksFirst
	}
	prompt := r.Prompt
	if prompt == 0 {
		prompt = 4096
	}
	if r.pair != nil {
		m = r.pair.Model
	}
	return xfer.Setup{Model: m, P: r.P, D: r.D, Connector: conn, Plans: xfer.PlanChoice(r.Plans), Layout: layout, KeepPairs: keepPairs,
		Request: xfer.Request{PromptTokens: prompt, PrefixHitTokens: r.Hit}, Ctx: ctx}, nil
}

// decodeStrict reads one JSON value into v: a key that is none of v's
// fields, or anything after the value, is an error.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}
