package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/tune"
	"github.com/kvscope/kvscope/core/vllm"
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
	// Estimate and Limit are the request's estimated cost and the limit it
	// passed, for error_type too_large (bytes, or descriptor pairs).
	Estimate int64 `json:"estimate,omitempty"`
	Limit    int64 `json:"limit,omitempty"`
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
	// The search of /api/tune: its ranges, objective, mix weights and
	// how many candidates to list.
	Ranges    tune.Ranges `json:"ranges"`
	Objective string      `json:"objective"`
	Weights   string      `json:"weights"`
	Top       int         `json:"top"`
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

// apiServer is what the API's endpoints share: the model catalog, the
// limits and the admission of heavy work.
type apiServer struct {
	cat model.Catalog
	lim limits
	adm *admission
}

func newAPIServer(cat model.Catalog, lim limits) *apiServer {
	return &apiServer{cat: cat, lim: lim, adm: newAdmission(lim)}
}

// api wraps an endpoint: it reads and bounds the body, and writes the result
// or the error envelope. fn gets the request's context, which ends when the
// client hangs up.
func (a *apiServer) api(fn func(ctx context.Context, a *apiServer, req apiRequest) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeAPIError(w, http.StatusMethodNotAllowed, &badData{fmt.Errorf("use POST with a JSON body")})
			return
		}
		var req apiRequest
		if !readBody(w, r, &req, "the request JSON") {
			return
		}
		req.versioned()
		for _, e := range []plan.Engine{req.Engine, req.P, req.D} {
			if err := e.CheckFlags(); err != nil {
				writeAPIError(w, http.StatusBadRequest, &badData{err})
				return
			}
		}
		res, err := fn(r.Context(), a, req)
		if err != nil {
			var bd *badData
			var big *tooBigError
			status := http.StatusInternalServerError
			switch {
			case r.Context().Err() != nil:
				return // the client hung up: nobody reads an answer
			case errors.As(err, &big):
				status = http.StatusRequestEntityTooLarge
			case errors.Is(err, errBusy):
				status = http.StatusTooManyRequests
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(a.lim.QueueWait/time.Second))))
			case errors.As(err, &bd):
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

// readBody reads a request's JSON body (at most maxBody bytes) into v,
// or answers the error (413 for too large, 400 naming what was expected)
// and returns false.
func readBody(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeAPIError(w, http.StatusRequestEntityTooLarge, &badData{fmt.Errorf("body: %w", err)})
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeAPIError(w, http.StatusBadRequest, &badData{fmt.Errorf("body is not %s: %w", what, err)})
		return false
	}
	return true
}

func writeAPIError(w http.ResponseWriter, status int, err error) {
	e := apiError{Status: "error", ErrorType: "internal", Error: err.Error()}
	var bd *badData
	var re *plan.RefusalError
	var big *tooBigError
	switch {
	case errors.As(err, &re):
		e.ErrorType, e.EstimatedMaxModelLen = "refused", re.EstimatedMaxLen
	case errors.As(err, &big):
		e.ErrorType, e.Estimate, e.Limit = "too_large", big.estimate, big.limit
	case errors.Is(err, errBusy):
		e.ErrorType = "busy"
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

func apiPlan(_ context.Context, a *apiServer, req apiRequest) (any, error) {
	m, err := req.load(a.cat)
	if err != nil {
		return nil, err
	}
	p, err := plan.New(m, req.Engine)
	if err != nil {
		return nil, &badData{err}
	}
	return p, nil
}

func (req apiRequest) setup(ctx context.Context, cat model.Catalog, keepPairs bool) (xfer.Setup, error) {
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
		Request: xfer.Request{PromptTokens: req.Prompt, PrefixHitTokens: req.Hit}, Ctx: ctx}, nil
}

// heavy plans a P/D request, estimates its transfer's cost from the plans,
// refuses it over a limit, and runs work with its memory admitted. need
// turns the estimate into the memory the endpoint will hold.
func (a *apiServer) heavy(ctx context.Context, req apiRequest, keepPairs bool, need func(xfer.Cost) int64,
	work func(*xfer.PD) (any, error)) (any, error) {
	s, err := req.setup(ctx, a.cat, keepPairs)
	if err != nil {
		return nil, err
	}
	if err := a.lim.precheck(s); err != nil {
		return nil, err
	}
	pd, err := xfer.Prepare(s)
	if err != nil {
		return nil, &badData{err}
	}
	if _, ok := s.Connector.Transport(); !ok {
		return work(pd)
	}
	n, err := a.lim.admit(s, pd, true, need)
	if err != nil {
		return nil, err
	}
	if err := a.adm.acquire(ctx, n); err != nil {
		return nil, err
	}
	defer a.adm.release(n)
	return work(pd)
}

// regionJSONBytes bounds one registered region's JSON in a response, and
// regionBytes its memory while the transfer is built.
const (
	regionJSONBytes = 320
	regionBytes     = 1 << 10
	pairBytes       = 256 // one kept descriptor pair
	baseBytes       = 32 << 20
)

func apiPD(ctx context.Context, a *apiServer, req apiRequest) (any, error) {
	return a.heavy(ctx, req, false, pdMemory, func(pd *xfer.PD) (any, error) {
		if _, ok := pd.Setup().Connector.Transport(); !ok {
			return pd, nil
		}
		var err error
		if pd.Transfer, err = pd.Compute(pd.Setup().Request, false); err != nil {
			return nil, &badData{err}
		}
		return pd, nil
	})
}

// apiTune runs a search as kvscope tune does, admitted by its estimated
// memory (what it keeps per candidate and per distinct plan).
func apiTune(ctx context.Context, a *apiServer, req apiRequest) (any, error) {
	obj, err := tune.ParseObjective(req.Objective, req.Weights)
	if err != nil {
		return nil, &badData{err}
	}
	m, err := req.load(a.cat)
	if err != nil {
		return nil, err
	}
	prompt := req.Prompt
	if prompt == 0 {
		prompt = 4096
	}
	draft := req.Draft
	if draft != "" && draft != "mtp" {
		draft = displayName(draft)
	}
	s, err := tune.NewSearch(tune.Space{Model: m, ModelName: m.Name, DraftName: draft, P: req.P, D: req.D, Ranges: req.Ranges,
		Request: xfer.Request{PromptTokens: prompt}, Objective: obj, Top: req.Top})
	if err != nil {
		return nil, &badData{err}
	}
	_, total := s.Progress()
	need := baseBytes + int64(total)*tuneCandidateBytes
	if need > a.lim.MaxMemory {
		return nil, &tooBigError{what: "memory", estimate: need, limit: a.lim.MaxMemory, flag: "--max-memory"}
	}
	if err := a.adm.acquire(ctx, need); err != nil {
		return nil, err
	}
	defer a.adm.release(need)
	if err := s.Step(ctx, total); err != nil {
		return nil, err
	}
	return s.Result(), nil
}

// tuneCandidateBytes bounds what a search keeps per candidate: its figures
// and flags, and a distinct transfer's cache entry.
const tuneCandidateBytes = 2 << 10

func apiOracle(ctx context.Context, a *apiServer, req apiRequest) (any, error) {
	return a.heavy(ctx, req, true, oracleMemory, func(pd *xfer.PD) (any, error) {
		s := pd.Setup()
		if _, ok := s.Connector.Transport(); !ok {
			return nil, &badData{fmt.Errorf("%s", pd.Note)}
		}
		x, err := pd.Compute(s.Request, true)
		if err != nil {
			return nil, &badData{err}
		}
		res, err := oracle.CheckContext(ctx, s.Model, x)
		if err != nil {
			return nil, &badData{err}
		}
		return res, nil
	})
}

// apiCheck holds a startup log against the plan, as kvscope check does.
// The request's model, draft and vllm_version override the log's.
func apiCheck(ctx context.Context, a *apiServer, req apiRequest) (any, error) {
	// A check plans the logged engine under every version: bounded work,
	// admitted as one base unit so a storm of checks queues too.
	if err := a.adm.acquire(ctx, baseBytes); err != nil {
		return nil, err
	}
	defer a.adm.release(baseBytes)
	cat := a.cat
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

// apiFlags lists the engine flags (the engine-flag table) with their
// defaults in the version the query names (?vllm_version=0.19.0; the
// newest release by default): what every engine JSON, command line, URL
// and form field takes.
func apiFlags() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		prof, err := vllm.Lookup(r.URL.Query().Get("vllm_version"))
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, &badData{fmt.Errorf("vllm_version: %w", err)})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			VLLMVersion string         `json:"vllm_version"`
			Flags       []plan.FlagDoc `json:"flags"`
		}{prof.Name, plan.Docs(&prof)})
	})
}
