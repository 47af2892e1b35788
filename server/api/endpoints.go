package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// plan is /api/plan: kvscope plan --json.
func (s *Server) plan(_ context.Context, req *PlanRequest) (any, error) {
	m, err := req.load(s.cat)
	if err != nil {
		return nil, err
	}
	p, err := plan.New(m, req.Engine)
	if err != nil {
		return nil, BadData(err)
	}
	return p, nil
}

// heavy plans a P/D request, estimates its transfer's cost from the plans,
// refuses it over a limit, and runs work with its memory admitted. need
// turns the estimate into the memory the endpoint will hold.
func (s *Server) heavy(ctx context.Context, req *PDRequest, keepPairs bool, need func(xfer.Cost) int64,
	work func(*xfer.PD) (any, error)) (any, error) {
	setup, err := req.Setup(ctx, s.cat, keepPairs)
	if err != nil {
		return nil, err
	}
	if err := s.lim.precheck(setup); err != nil {
		return nil, err
	}
	pd, err := xfer.Prepare(setup)
	if err != nil {
		return nil, BadData(err)
	}
	if _, ok := setup.Connector.Transport(); !ok {
		return work(pd)
	}
	n, err := s.lim.Admit(setup, pd, true, need)
	if err != nil {
		return nil, err
	}
	if err := s.adm.acquire(ctx, n); err != nil {
		return nil, err
	}
	defer s.adm.release(n)
	return work(pd)
}

// pd is /api/pd: kvscope pd --json.
func (s *Server) pd(ctx context.Context, req *PDRequest) (any, error) {
	return s.heavy(ctx, req, false, PDMemory, func(pd *xfer.PD) (any, error) {
		if _, ok := pd.Setup().Connector.Transport(); !ok {
			return pd, nil
		}
		var err error
		if pd.Transfer, err = pd.Compute(pd.Setup().Request, false); err != nil {
			return nil, BadData(err)
		}
		return pd, nil
	})
}

// oracle is /api/oracle: kvscope oracle --json.
func (s *Server) oracle(ctx context.Context, req *PDRequest) (any, error) {
	return s.heavy(ctx, req, true, OracleMemory, func(pd *xfer.PD) (any, error) {
		setup := pd.Setup()
		if _, ok := setup.Connector.Transport(); !ok {
			return nil, BadData(fmt.Errorf("%s", pd.Note))
		}
		x, err := pd.Compute(setup.Request, true)
		if err != nil {
			return nil, BadData(err)
		}
		res, err := oracle.CheckContext(ctx, setup.Model, x)
		if err != nil {
			return nil, BadData(err)
		}
		return res, nil
	})
}

// tuneCandidateBytes bounds what a search keeps per candidate: its figures
// and flags, and a distinct transfer's cache entry.
const tuneCandidateBytes = 2 << 10

// tune is /api/tune: a search as kvscope tune runs it, admitted by its
// estimated memory (what it keeps per candidate and per distinct plan).
func (s *Server) tune(ctx context.Context, req *TuneRequest) (any, error) {
	obj, err := tune.ParseObjective(req.Objective, req.Weights)
	if err != nil {
		return nil, BadData(err)
	}
	m, err := req.load(s.cat)
	if err != nil {
		return nil, err
	}
	prompt := req.Prompt
	if prompt == 0 {
		prompt = 4096
	}
	draft := req.Draft
	if draft != "" && draft != "mtp" {
		draft = model.DisplayName(draft)
	}
	search, err := tune.NewSearch(tune.Space{Model: m, ModelName: m.Name, DraftName: draft, P: req.P, D: req.D, Ranges: req.Ranges,
		Request: xfer.Request{PromptTokens: prompt}, Objective: obj, Top: req.Top})
	if err != nil {
		return nil, BadData(err)
	}
	_, total := search.Progress()
	need := baseBytes + int64(total)*tuneCandidateBytes
	if need > s.lim.MaxMemory {
		return nil, &TooBigError{What: "memory", Estimate: need, Limit: s.lim.MaxMemory, Flag: "--max-memory"}
	}
	if err := s.adm.acquire(ctx, need); err != nil {
		return nil, err
	}
	defer s.adm.release(need)
	if err := search.Step(ctx, total); err != nil {
		return nil, err
	}
	return search.Result(), nil
}

// checkBodyFactor is what a check holds per byte of its body, beside
// baseBytes: the body read, the decoded log and its lines, and what the
// parser keeps of them (TestCheckMemoryEstimate holds it above measured
// allocations).
const checkBodyFactor = 12

// checkMemory is the memory admission reserves for a check whose body is
// bodyBytes long.
func checkMemory(bodyBytes int64) int64 {
	return xfer.SatAdd(baseBytes, xfer.SatMul(bodyBytes, checkBodyFactor))
}

// admitBody admits an /api/check by its body's size before the body is
// read or decoded: a Content-Length over the 4 MiB body limit is refused
// (413) at once, and otherwise the request waits in the heavy requests'
// queue for checkMemory of its length (of the limit when the length is not
// given), so a storm of large logs is read and parsed a few at a time.
func (s *Server) admitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		size := r.ContentLength
		if size > maxBody {
			WriteError(w, http.StatusRequestEntityTooLarge, BadData(fmt.Errorf("body: Content-Length %d is over the %d-byte limit of a request body", size, maxBody)))
			return
		}
		if size < 0 {
			size = maxBody
		}
		need := checkMemory(size)
		if err := s.adm.acquire(r.Context(), need); err != nil {
			var big *TooBigError
			switch {
			case r.Context().Err() != nil:
			case errors.As(err, &big):
				WriteError(w, http.StatusRequestEntityTooLarge, err)
			default:
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.lim.QueueWait/time.Second))))
				WriteError(w, http.StatusTooManyRequests, err)
			}
			return
		}
		defer s.adm.release(need)
		next.ServeHTTP(w, r)
	})
}

// check is /api/check: a startup log held against the plan, as kvscope
// check does. The request's model, draft and vllm_version override the
// log's. Its memory is admitted before its body is read (admitBody).
func (s *Server) check(ctx context.Context, req *CheckRequest) (any, error) {
	l, err := vlog.Parse(req.Log)
	if err != nil {
		return nil, BadData(fmt.Errorf("log: %w", err))
	}
	in := check.Input{Log: l, Version: req.VLLMVersion, Catalog: s.cat}
	if req.Model != "" || len(req.Config) > 0 {
		target := ModelRequest{Model: req.Model, Config: req.Config}
		if in.Model, err = target.load(s.cat); err != nil {
			return nil, err
		}
	}
	if req.Draft != "" && req.Draft != "mtp" || len(req.DraftConfig) > 0 {
		d := ModelRequest{Model: req.Draft, Config: req.DraftConfig}
		if in.Draft, err = d.load(s.cat); err != nil {
			return nil, err
		}
	}
	res, err := check.Run(in)
	if err != nil {
		return nil, BadData(err)
	}
	return res, nil
}

// models is GET /api/models: the bundled model names.
func (s *Server) models() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.cat.Names())
	})
}

// flags is GET /api/flags: the engine flags (the engine-flag table) with
// their defaults in the version the query names (?vllm_version=0.19.0;
// the newest release by default), what every engine JSON, command line,
// URL and form field takes.
func flags() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		prof, err := vllm.Lookup(r.URL.Query().Get("vllm_version"))
		if err != nil {
			WriteError(w, http.StatusBadRequest, BadData(fmt.Errorf("vllm_version: %w", err)))
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
