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
func (s *Server) plan(ctx context.Context, req *PlanRequest) (any, error) {
	m, err := req.load(ctx, s.resolve)
	if err != nil {
		return nil, err
	}
	p, err := plan.New(m, req.Engine)
	if err != nil {
		return nil, BadData(err)
	}
	if req.src.Resolved() {
		return struct {
			*plan.Plan
			ModelSources
		}{p, req.src}, nil
	}
	return p, nil
}

// heavy plans a P/D request, estimates its transfer's cost from the plans,
// refuses it over a limit, and runs work with its memory admitted. need
// turns the estimate into the memory the endpoint will hold.
func (s *Server) heavy(ctx context.Context, req *PDRequest, keepPairs bool, need func(xfer.Cost) int64,
	work func(*xfer.PD) (any, error)) (any, error) {
	setup, err := req.Setup(ctx, s.resolve, keepPairs)
	if err != nil {
		return nil, err
	}
	if err := s.lim.precheck(setup); err != nil {
		return nil, err
	}
	pd, err := xfer.Prepare(setup)
	var refused *xfer.StartupError
	if errors.As(err, &refused) && req.pair != nil {
		// Two logs whose engines refuse the connector: the preflight's
		// answer, not an error.
		return PDLogs{P: req.pair.P, D: req.pair.D, PD: &xfer.PD{Preflight: xfer.PreflightOfStartup(refused, setup.P, setup.D)}, ModelSources: req.src}, nil
	}
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

// PDLogs is the answer of a P/D preflight from two startup logs (/api/pd
// with p_log and d_log, kvscope pd --p-log --d-log --json): each side's
// check, and the transfer between the engines the logs imply.
type PDLogs struct {
	P  *check.Result `json:"p_log"`
	D  *check.Result `json:"d_log"`
	PD *xfer.PD      `json:"pd"`
	ModelSources
}

// pd is /api/pd: kvscope pd --json; with p_log and d_log, kvscope pd
// --p-log --d-log --json (each side's check beside the transfer), the
// logs parsed and checked with the memory a check of their size holds.
func (s *Server) pd(ctx context.Context, req *PDRequest) (any, error) {
	if req.hasLogs() {
		need := checkMemory(int64(len(req.PLog) + len(req.DLog)))
		if err := s.adm.acquire(ctx, need); err != nil {
			return nil, err
		}
		err := req.readLogs(ctx, s.resolve)
		s.adm.release(need)
		if err != nil {
			return nil, err
		}
	}
	return s.heavy(ctx, req, false, PDMemory, func(pd *xfer.PD) (any, error) {
		answer := func() any {
			if req.pair != nil {
				return PDLogs{P: req.pair.P, D: req.pair.D, PD: pd, ModelSources: req.src}
			}
			if req.src.Resolved() {
				return struct {
					*xfer.PD
					ModelSources
				}{pd, req.src}
			}
			return pd
		}
		if _, ok := pd.Setup().Connector.Transport(); !ok {
			pd.Preflight = pd.PreflightOf(nil)
			return answer(), nil
		}
		var err error
		if pd.Transfer, err = pd.Compute(pd.Setup().Request, false); err != nil {
			return nil, BadData(err)
		}
		pd.Preflight = pd.PreflightOf(pd.Transfer)
		return answer(), nil
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
// estimated memory (tuneMemory: what it keeps per candidate and per
// distinct plan) and bounded in time (Limits.TuneDeadline: a search still
// running then answers what it has, marked partial).
func (s *Server) tune(ctx context.Context, req *TuneRequest) (any, error) {
	// The deadline counts the wait in the queue too: the answer must be
	// written before the server's write timeout.
	limit := s.lim.tuneDeadline()
	dctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	acquire := func(n int64) error {
		err := s.adm.acquire(dctx, n)
		if err != nil && ctx.Err() == nil && dctx.Err() != nil {
			return ErrBusy // the deadline passed in the queue
		}
		return err
	}
	// Building a search (a pasted config parsed, every candidate listed)
	// is work too: it runs in the queue with one request's base memory,
	// and is dropped once estimated, so that no built search waits in the
	// queue for its memory; it is built again once admitted.
	if err := acquire(baseBytes); err != nil {
		return nil, err
	}
	search, m, err := tuneSearch(dctx, s, req)
	var need int64
	if err == nil {
		need = tuneMemory(m, search)
	}
	search, m = nil, nil
	s.adm.release(baseBytes)
	if err != nil {
		return nil, err
	}
	if need > s.lim.MaxMemory {
		return nil, &TooBigError{What: "memory", Estimate: need, Limit: s.lim.MaxMemory, Flag: "--max-memory"}
	}
	if err := acquire(need); err != nil {
		return nil, err
	}
	defer s.adm.release(need)
	if search, _, err = tuneSearch(dctx, s, req); err != nil {
		return nil, err
	}
	_, total := search.Progress()
	if err := search.Step(dctx, total); err != nil {
		if ctx.Err() != nil {
			return nil, err // the client hung up
		}
		done, _ := search.Progress()
		res := search.Result()
		res.Partial = true
		res.Stopped = fmt.Sprintf("the search reached this server's --tune-deadline %s after %d of %d candidates: the figures rank those only; narrow a range for the whole search", limit, done, total)
		return res, nil
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

// tuneSearch is the search a /api/tune request describes, and its model.
func tuneSearch(ctx context.Context, s *Server, req *TuneRequest) (*tune.Search, *model.Model, error) {
	obj, err := tune.ParseObjective(req.Objective, req.Weights)
	if err != nil {
		return nil, nil, BadData(err)
	}
	m, err := req.load(ctx, s.resolve)
	if err != nil {
		return nil, nil, err
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
		return nil, nil, BadData(err)
	}
	return search, m, nil
}

// tuneMemory is the memory admission reserves for a search over m: what
// the search holds at its peak (TestTuneMemoryEstimate holds it above the
// heap measured over small and large models). Besides its figures per
// candidate, a search keeps per rank and layer: P's registrations of every
// distinct P engine (kept for the whole search), D's of the run under way
// and of the last one (whose memory the next takes over), and the
// planner's ranks of the run (candidates come in runs of one TP pair and D
// block size). A hostile search is one of a wide model at high TP: its
// registrations, not its candidates, are what it holds.
func tuneMemory(m *model.Model, search *tune.Search) int64 {
	layers := int64(len(m.Layers))
	type pKey struct {
		ranks, block, minLayers int
		selector, dtype, conn   string
	}
	type run struct{ p, d, block int }
	type dKey struct {
		minLayers             int
		selector, dtype, conn string
	}
	pEngines := map[pKey]bool{}
	runs := map[run]map[dKey]bool{}
	var pRankLayers, dRankLayers, plannerRankLayers int64
	cands := search.Candidates()
	for _, c := range cands {
		pe, de := search.Engines(c)
		pr := int64(max(1, pe.TensorParallelSize)) * int64(max(1, pe.PipelineParallelSize))
		dr := int64(max(1, de.TensorParallelSize)) * int64(max(1, de.PipelineParallelSize))
		if k := (pKey{int(pr), c.PBlockSize, c.MinGroupLayers, c.Selector, c.KVCacheDType, c.Connector}); !pEngines[k] {
			pEngines[k] = true
			pRankLayers = xfer.SatAdd(pRankLayers, xfer.SatMul(pr, layers))
		}
		r := run{int(pr), int(dr), c.DBlockSize}
		ds := runs[r]
		if ds == nil {
			ds = map[dKey]bool{}
			runs[r] = ds
		}
		ds[dKey{c.MinGroupLayers, c.Selector, c.KVCacheDType, c.Connector}] = true
		dRankLayers = max(dRankLayers, xfer.SatMul(xfer.SatMul(dr, layers), int64(len(ds))))
		plannerRankLayers = max(plannerRankLayers, xfer.SatMul(pr+dr, layers))
	}
	n := xfer.SatAdd(baseBytes, xfer.SatMul(int64(len(cands)), tuneCandidateBytes))
	held := xfer.SatAdd(xfer.SatAdd(pRankLayers, xfer.SatMul(dRankLayers, 2)), plannerRankLayers)
	return xfer.SatAdd(n, xfer.SatMul(held, tuneRankLayerBytes))
}

// tuneRankLayerBytes is what a search holds per rank and layer of a plan
// it keeps: the layer's registered regions (two) and the planner's ranks.
const tuneRankLayerBytes = 768

// check is /api/check: a startup log held against the plan, as kvscope
// check does. The request's model, draft and vllm_version override the
// log's. Its memory is admitted before its body is read (admitBody).
func (s *Server) check(ctx context.Context, req *CheckRequest) (any, error) {
	l, err := vlog.Parse(req.Log)
	if err != nil {
		return nil, BadData(fmt.Errorf("log: %w", err))
	}
	in := check.Input{Log: l, Version: req.VLLMVersion, Catalog: s.cat}
	if in.Model, in.Draft, err = req.targetAndDraft(ctx, s.resolve); err != nil {
		return nil, err
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

// families is GET /api/families: the bundled models with their families'
// status (modelled, inferred, refused with the layer kind, unknown) and
// core/model's family table, as kvscope models --json prints them.
func (s *Server) families() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(s.cat.Listing())
	})
}

// versions is GET /api/versions: the version profiles with their release
// dates and evidence, the handshake's version history and the table of
// behaviour changes (kvscope versions --json).
func versions() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(vllm.Describe())
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
