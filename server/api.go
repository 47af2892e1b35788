package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// maxBody bounds an API request body: a config.json is a few KiB.
const maxBody = 1 << 20

// apiError is the one JSON error envelope of the API.
type apiError struct {
	Status    string `json:"status"`
	ErrorType string `json:"error_type"` // bad_data or internal
	Error     string `json:"error"`
}

// apiRequest is the body of /api/plan, /api/pd and /api/oracle: a model by
// bundled name or as an inline config, and engine settings with vLLM's
// flag names in snake case (the `engine` object of plan --json).
type apiRequest struct {
	Model       string          `json:"model"`
	Config      json.RawMessage `json:"config"` // an inline config.json instead of a bundled name
	Draft       string          `json:"draft"`  // a bundled name or "mtp"
	DraftConfig json.RawMessage `json:"draft_config"`
	Engine      plan.Engine     `json:"engine"` // /api/plan
	P           plan.Engine     `json:"p"`      // /api/pd, /api/oracle
	D           plan.Engine     `json:"d"`
	Connector   string          `json:"connector"`
	Plans       string          `json:"plans"`
	Layout      string          `json:"layout"`
	Prompt      int             `json:"prompt_tokens"`
	Hit         int             `json:"prefix_hit_tokens"`
}

// badData marks an error in the request, as opposed to a server failure.
type badData struct{ err error }

func (e *badData) Error() string { return e.err.Error() }

// api wraps an endpoint: it reads and bounds the body, and writes the result
// or the error envelope.
func api(cat model.Catalog, fn func(cat model.Catalog, req apiRequest) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeAPIError(w, http.StatusMethodNotAllowed, &badData{fmt.Errorf("use POST with a JSON body")})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeAPIError(w, http.StatusRequestEntityTooLarge, &badData{fmt.Errorf("body: %w", err)})
			return
		}
		var req apiRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeAPIError(w, http.StatusBadRequest, &badData{fmt.Errorf("body is not the request JSON: %w", err)})
			return
		}
		res, err := fn(cat, req)
		if err != nil {
			var bd *badData
			status := http.StatusInternalServerError
			if errors.As(err, &bd) {
				status = http.StatusBadRequest
			}
			writeAPIError(w, status, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	})
}

func writeAPIError(w http.ResponseWriter, status int, err error) {
	typ := "internal"
	var bd *badData
	if errors.As(err, &bd) {
		typ = "bad_data"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(apiError{Status: "error", ErrorType: typ, Error: err.Error()})
}

// loadAPIModel resolves the request's model and draft.
func (req apiRequest) load(cat model.Catalog) (*model.Model, error) {
	parse := func(name string, inline json.RawMessage) (*model.Model, error) {
		if len(inline) > 0 {
			return model.Parse(inline)
		}
		full, data, err := cat.Lookup(name)
		if err != nil {
			return nil, err
		}
		m, err := model.Parse(data)
		if err == nil {
			m.Name = full
		}
		return m, err
	}
	m, err := parse(req.Model, req.Config)
	if err != nil {
		return nil, &badData{fmt.Errorf("model: %w", err)}
	}
	switch {
	case req.Draft == "mtp":
		m, err = m.WithMTP()
	case req.Draft != "" || len(req.DraftConfig) > 0:
		var d *model.Model
		if d, err = parse(req.Draft, req.DraftConfig); err == nil {
			m, err = m.WithDraft(d)
		}
	}
	if err != nil {
		return nil, &badData{fmt.Errorf("draft: %w", err)}
	}
	return m, nil
}

func apiPlan(cat model.Catalog, req apiRequest) (any, error) {
	m, err := req.load(cat)
	if err != nil {
		return nil, err
	}
	p, err := plan.New(m, req.Engine)
	if err != nil {
		return nil, &badData{err}
	}
	return p, nil
}

func (req apiRequest) setup(cat model.Catalog, keepPairs bool) (xfer.Setup, error) {
	m, err := req.load(cat)
	if err != nil {
		return xfer.Setup{}, err
	}
	conn, err := xfer.ParseConnector(req.Connector)
	if err != nil {
		return xfer.Setup{}, &badData{err}
	}
	layout := xfer.SplitKV
	if req.Layout == "blocks-first" {
		layout = xfer.BlocksFirst
	}
	if req.Prompt == 0 {
		req.Prompt = 4096
	}
	return xfer.Setup{Model: m, P: req.P, D: req.D, Connector: conn, Plans: xfer.PlanChoice(req.Plans), Layout: layout, KeepPairs: keepPairs,
		Request: xfer.Request{PromptTokens: req.Prompt, PrefixHitTokens: req.Hit}}, nil
}

func apiPD(cat model.Catalog, req apiRequest) (any, error) {
	s, err := req.setup(cat, false)
	if err != nil {
		return nil, err
	}
	r, err := xfer.Run(s)
	if err != nil {
		return nil, &badData{err}
	}
	return r, nil
}

func apiOracle(cat model.Catalog, req apiRequest) (any, error) {
	s, err := req.setup(cat, true)
	if err != nil {
		return nil, err
	}
	r, err := xfer.Run(s)
	if err != nil {
		return nil, &badData{err}
	}
	if r.Transfer == nil {
		return nil, &badData{fmt.Errorf("%s", r.Note)}
	}
	res, err := oracle.Check(s.Model, r.Transfer)
	if err != nil {
		return nil, &badData{err}
	}
	return res, nil
}

func apiModels(cat model.Catalog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(cat.Names())
	})
}
