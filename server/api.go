package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vlog"
	"github.com/kvscope/kvscope/core/xfer"
)

// maxBody bounds an API request body: a config.json is a few KiB, a pasted
// startup log (for /api/check) a few hundred.
const maxBody = 4 << 20

// apiError is the one JSON error envelope of the API.
type apiError struct {
	Status    string `json:"status"`
	ErrorType string `json:"error_type"` // bad_data, refused (vLLM would not start) or internal
	Error     string `json:"error"`
	// EstimatedMaxModelLen is vLLM's estimate of the longest max_model_len
	// that would start, for error_type refused.
	EstimatedMaxModelLen int `json:"estimated_max_model_len,omitempty"`
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
	// VLLMVersion applies to every engine that names no version of its own.
	VLLMVersion string `json:"vllm_version"`
	// Log is a vLLM startup log (/api/check).
	Log string `json:"log"`
}

// versioned gives the engines the request's vLLM version where they name
// none.
func (req *apiRequest) versioned() {
	for _, e := range []*plan.Engine{&req.Engine, &req.P, &req.D} {
		if e.VLLMVersion == "" {
			e.VLLMVersion = req.VLLMVersion
		}
	}
}

// badData marks an error in the request, as opposed to a server failure.
type badData struct{ err error }

func (e *badData) Error() string { return e.err.Error() }
func (e *badData) Unwrap() error { return e.err }

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
		req.versioned()
		for _, e := range []plan.Engine{req.Engine, req.P, req.D} {
			if err := e.CheckFlags(); err != nil {
				writeAPIError(w, http.StatusBadRequest, &badData{err})
				return
			}
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
	e := apiError{Status: "error", ErrorType: "internal", Error: err.Error()}
	var bd *badData
	var re *plan.RefusalError
	switch {
	case errors.As(err, &re):
		e.ErrorType, e.EstimatedMaxModelLen = "refused", re.EstimatedMaxLen
	case errors.As(err, &bd):
		e.ErrorType = "bad_data"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
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

// apiCheck holds a startup log against the plan, as kvscope check does.
// The request's model, draft and vllm_version override the log's.
func apiCheck(cat model.Catalog, req apiRequest) (any, error) {
	l, err := vlog.Parse(req.Log)
	if err != nil {
		return nil, &badData{fmt.Errorf("log: %w", err)}
	}
	in := check.Input{Log: l, Version: req.VLLMVersion, Catalog: cat}
	if req.Model != "" || len(req.Config) > 0 {
		noDraft := req
		noDraft.Draft, noDraft.DraftConfig = "", nil
		if in.Model, err = noDraft.load(cat); err != nil {
			return nil, err
		}
	}
	if req.Draft != "" && req.Draft != "mtp" || len(req.DraftConfig) > 0 {
		d := apiRequest{Model: req.Draft, Config: req.DraftConfig}
		if in.Draft, err = d.load(cat); err != nil {
			return nil, err
		}
	}
	res, err := check.Run(in)
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
