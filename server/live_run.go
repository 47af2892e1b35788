package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/kvscope/kvscope/agent/scenario"
	kvapp "github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/kvscope/kvscope/server/api"
)

// DefaultAgentMemoryMiB is the host memory the embedded agent's KV pools
// may take in all (P's ranks and D's) unless kvscope serve
// --agent-memory-mib says: enough for one request of the default view's
// deployment with its plans as shown (about 1.9 GiB at 1,024 tokens).
const DefaultAgentMemoryMiB = 2048

// embeddedHostLimit is DefaultAgentMemoryMiB in bytes.
const embeddedHostLimit = DefaultAgentMemoryMiB << 20

// embeddedAgent is the agent kvscope serve runs in its own process: the
// scenario it streams and how to start it again on another one ("Run
// live" in the app). One run at a time: a restart stops the running agent
// and waits for it before the next starts, so the live view never holds
// two scenarios under one agent name.
type embeddedAgent struct {
	memory  int64 // bytes its KV pools may take (--agent-memory-mib)
	mu      sync.Mutex
	run     func(ctx context.Context, s scenario.Scenario) // set once the server listens
	base    context.Context
	stop    context.CancelFunc
	done    chan struct{}
	current liveRun
}

// liveRun is what the embedded agent runs, as /api/live/run reports it.
type liveRun struct {
	Scenario scenario.Scenario `json:"scenario"`
	Describe string            `json:"describe"`
	// Adjusted says what differs from the view's configuration so that the
	// KV pools fit the agent's host memory (the plans themselves do not).
	Adjusted []string  `json:"adjusted"`
	Started  time.Time `json:"started"`
	Runs     int       `json:"runs"`
}

// begin starts the first run once the server listens; ctx ends every run.
func (e *embeddedAgent) begin(ctx context.Context, run func(ctx context.Context, s scenario.Scenario), s scenario.Scenario) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.base, e.run = ctx, run
	e.startLocked(s, nil)
}

func (e *embeddedAgent) startLocked(s scenario.Scenario, adjusted []string) {
	ctx, stop := context.WithCancel(e.base)
	done := make(chan struct{})
	e.stop, e.done = stop, done
	e.current = liveRun{Scenario: s, Describe: s.Describe(), Adjusted: adjusted, Started: time.Now(), Runs: e.current.Runs + 1}
	go func() {
		defer close(done)
		e.run(ctx, s)
	}()
}

// restart stops the running agent (waiting up to 15 s for it) and starts
// one on s.
func (e *embeddedAgent) restart(s scenario.Scenario, adjusted []string) (liveRun, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.run == nil {
		return liveRun{}, errors.New("the embedded agent has not started yet")
	}
	if e.base.Err() != nil {
		return liveRun{}, errors.New("the server is shutting down")
	}
	e.stop()
	select {
	case <-e.done:
	case <-time.After(15 * time.Second):
		return liveRun{}, errors.New("the running embedded agent did not stop within 15 s")
	}
	e.startLocked(s, adjusted)
	return e.current, nil
}

// liveRunRequest is /api/live/run's body: the app's settings as its URL
// query, so the server reads them with the very code the views use.
type liveRunRequest struct {
	Query string `json:"query"`
}

// liveRunHandler is POST /api/live/run: restart the embedded agent on the
// configuration the app's views show (the model, draft, both engines'
// flags, connector, plans, layout, and the request's prompt and prefix
// hit), fitted to the agent's host memory. It is behind the access rules
// of every API POST: same origin, JSON, and the token when there is one.
//
// A pasted configuration can ask for any model and ranks, so the run is
// admitted as /api/pd is, before anything is prepared: from the engines'
// own plans (a setup far over --max-pairs or over --max-memory is 413
// too_large), then in the heavy requests' queue (429 busy), holding its
// estimated memory while its plans and registrations are prepared.
func liveRunHandler(e *embeddedAgent, cat model.Catalog, a *api.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e == nil {
			api.WriteError(w, http.StatusConflict, api.BadData(errors.New("this server runs no embedded agent (kvscope serve --agent none): start one with --agent embedded, or run kvscope-agent with a scenario")))
			return
		}
		var req liveRunRequest
		if !api.ReadBody(w, r, &req, `{"query": "..."}`) {
			return
		}
		s, adjusted, err := liveScenario(r.Context(), req.Query, cat, e.memory, a)
		var big *api.TooBigError
		switch {
		case err == nil:
		case r.Context().Err() != nil:
			return // the client hung up
		case errors.As(err, &big):
			api.WriteError(w, http.StatusRequestEntityTooLarge, err)
			return
		case errors.Is(err, api.ErrBusy):
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(a.Limits().QueueWait/time.Second))))
			api.WriteError(w, http.StatusTooManyRequests, err)
			return
		default:
			api.WriteError(w, http.StatusBadRequest, api.BadData(err))
			return
		}
		run, err := e.restart(s, adjusted)
		if err != nil {
			api.WriteError(w, http.StatusServiceUnavailable, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(run)
	})
}

// liveScenario turns the app's settings (a URL query) into the embedded
// agent's scenario: the same model and plans, every request the view's
// prompt and prefix hit, the KV pools fitted to limit bytes of host memory.
// It is admitted by a (AdmitPD): the pools are fitted (which plans each
// engine) in the heavy requests' queue, and the transfer's estimate from
// those plans is admitted before it is prepared.
func liveScenario(ctx context.Context, query string, cat model.Catalog, limit int64, a *api.Server) (scenario.Scenario, []string, error) {
	maxPairs := a.Limits().MaxPairs
	q, err := url.ParseQuery(query)
	if err != nil {
		return scenario.Scenario{}, nil, fmt.Errorf("query: %w", err)
	}
	set, errs := kvapp.ParseQuery(q)
	if len(errs) > 0 {
		keys := make([]string, 0, len(errs))
		for k := range errs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return scenario.Scenario{}, nil, fmt.Errorf("%s: %s", keys[0], errs[keys[0]])
	}
	s := scenario.Default()
	s.Name = "run live"
	s.Model, s.Config, s.Draft = set.Model, nil, set.Draft
	if set.Model == "custom" {
		s.Model, s.Config = "", json.RawMessage(set.Config)
	}
	if set.Draft == "custom" {
		return s, nil, errors.New("draft: the embedded agent runs a bundled draft model or mtp, not a pasted draft config")
	}
	s.P, s.D = set.Engines()
	s.Connector, s.Plans, s.Layout = set.Connector, set.Plans, set.Layout
	if set.Prompt < 2 {
		return s, nil, fmt.Errorf("prompt-tokens %d: the agent needs at least 2", set.Prompt)
	}
	s.PromptMin, s.PromptMax, s.HitFraction, s.HitTokens = set.Prompt, set.Prompt, 0, set.Hit
	if err := s.Validate(); err != nil {
		return s, nil, err
	}
	m, err := s.LoadModel(cat)
	if err != nil {
		return s, nil, err
	}
	var adjusted []string
	setup, release, err := a.AdmitPD(ctx, func() (xfer.Setup, error) {
		var err error
		if adjusted, err = s.FitHost(m, limit, "kvscope serve --agent-memory-mib"); err != nil {
			return xfer.Setup{}, err
		}
		setup, err := s.Setup(m)
		setup.Ctx = ctx
		setup.Request = xfer.Request{PromptTokens: set.Prompt, PrefixHitTokens: set.Hit}
		return setup, err
	})
	if err != nil {
		var big *api.TooBigError
		if errors.As(err, &big) && big.What == "descriptor pairs" {
			return s, nil, &livePairsError{big, set.Prompt}
		}
		return s, nil, err
	}
	defer release()
	pd, err := xfer.Prepare(setup)
	if err != nil {
		return s, nil, err
	}
	pp, dp := pd.UsedPlans()
	r := xfer.Request{PromptTokens: set.Prompt, PrefixHitTokens: set.Hit}
	if err := r.Check(pp, dp); err != nil {
		return s, nil, err
	}
	if c := xfer.EstimateCost(m, pp, dp, r); c.Pairs > maxPairs {
		return s, nil, &livePairsError{&api.TooBigError{What: "descriptor pairs", Estimate: c.Pairs, Limit: maxPairs, Flag: "--max-pairs"}, set.Prompt}
	}
	return s, adjusted, nil
}

// livePairsError is a Run live request over --max-pairs, said in the
// view's terms (its prompt); it is the TooBigError beneath (413).
type livePairsError struct {
	big    *api.TooBigError
	prompt int
}

func (e *livePairsError) Error() string {
	return fmt.Sprintf("a %d-token request is up to %d descriptor pairs, over this server's --max-pairs %d: shorten the prompt, or ask for fewer ranks or layers",
		e.prompt, e.big.Estimate, e.big.Limit)
}

func (e *livePairsError) Unwrap() error { return e.big }
