package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/tune"
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
	// VLLMVersion applies to each engine that names no version.
	VLLMVersion string `json:"vllm_version"`
}

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

func (r *PlanRequest) prepare() error  { return versioned(r.VLLMVersion, &r.Engine) }
func (r *PDRequest) prepare() error    { return versioned(r.VLLMVersion, &r.P, &r.D) }
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
	m, err := r.load(ctx, ms)
	if err != nil {
		return xfer.Setup{}, err
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
