package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/tune"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// TuneOutcome is a search as the Tune view draws it: the ranked result
// (without every candidate: the chart holds what it draws of them), the
// view's summary and table of it as markup, the Pareto chart's option,
// the best candidates' flags (for Open), and how far the search got. A
// search worker sends it to the page as JSON, the result left out, the
// markup and the chart beside it.
type TuneOutcome struct {
	Result      *tune.Result     `json:"-"`
	Open        []tune.Candidate `json:"open"` // Result.Top's candidates, in order
	SummaryHTML string           `json:"-"`
	TableHTML   string           `json:"-"`
	Chart       string           `json:"-"` // the page passes it to ECharts as it is
	// Held names the summary, the table and the chart where a search
	// worker made them: the page holds them (kvscope.hold) under
	// Held+"/summary", "/table" and "/chart", and the three fields above
	// are empty. The app draws them by name: their hundreds of kilobytes
	// are not copied into WebAssembly and out again while the page draws
	// the result.
	Held       string  `json:"-"`
	Done       int     `json:"done"`
	Total      int     `json:"total"`
	Canceled   bool    `json:"canceled"`
	RankMillis float64 `json:"rank_ms"` // ranking and charting, at the end
	// SearchMillis is the search's own time, from its first candidate to
	// its chart, where it ran (the worker, or the page).
	SearchMillis float64 `json:"search_ms"`

	// openJSON is the worker's answer, Open not yet decoded from it: the
	// page decodes it when a candidate is opened, not while it draws the
	// result (Go's JSON decoding in WebAssembly took 6–17 ms of that).
	openJSON string
}

// OpenList is the best candidates' flags, in Result.Top's order: Open, or
// decoded from the worker's answer the first time they are asked for.
func (o *TuneOutcome) OpenList() ([]tune.Candidate, error) {
	if o.openJSON != "" {
		var x struct {
			Open []tune.Candidate `json:"open"`
		}
		if err := json.Unmarshal([]byte(o.openJSON), &x); err != nil {
			return nil, fmt.Errorf("the search worker's answer: %w", err)
		}
		o.Open, o.openJSON = x.Open, ""
	}
	return o.Open, nil
}

// tuneOutcomeFromWorker is the outcome a search worker posted, as the
// page passes it on (kvscope.tuneStart): msg is {type: "result", json,
// done, total, canceled, rank_ms, search_ms, held}, the figures read as
// they are, the markup and the chart's option held by the page under held
// (see TuneOutcome.Held), the best candidates' flags left in the JSON
// until they are wanted (OpenList).
func tuneOutcomeFromWorker(msg app.Value) *TuneOutcome {
	return &TuneOutcome{
		Done: msg.Get("done").Int(), Total: msg.Get("total").Int(), Canceled: msg.Get("canceled").Bool(),
		RankMillis: msg.Get("rank_ms").Float(), SearchMillis: msg.Get("search_ms").Float(),
		Held: msg.Get("held").String(), openJSON: msg.Get("json").String(),
	}
}

// shown reports whether the outcome has a result to draw.
func (o *TuneOutcome) shown() bool { return o != nil && (o.Held != "" || o.TableHTML != "") }

// held is the page's name for one of the outcome's drawings (summary,
// table or chart), or "" where the app holds them itself.
func (o *TuneOutcome) held(part string) string {
	if o == nil || o.Held == "" {
		return ""
	}
	return o.Held + "/" + part
}

// TuneSpace is the search the settings' Tune ranges describe around their
// engines, over m (the settings' model with its draft).
func TuneSpace(s Settings, m *model.Model) (tune.Space, error) {
	obj, err := tune.ParseObjective(s.Tune.Objective, s.Tune.Weights)
	if err != nil {
		return tune.Space{}, err
	}
	pe, de := s.Engines()
	draft := s.Draft
	if draft == "custom" {
		draft = "draft"
	}
	return tune.Space{Model: m, ModelName: s.Model, DraftName: draft, P: pe, D: de, Objective: obj,
		Request: xfer.Request{PromptTokens: s.Prompt, PrefixHitTokens: s.Hit},
		Ranges: tune.Ranges{TPPairs: s.Tune.TPPairs, BlockSizes: s.Tune.BlockSizes, PBlockSizes: s.Tune.PBlockSizes, MinGroupLayers: s.Tune.MinLayers,
			Selectors: s.Tune.Selectors, MaxBatched: s.Tune.MNBT, KVCacheDTypes: s.Tune.KVDTypes, Connectors: s.Tune.Connectors}}, nil
}

// NewTuneSearch starts the search that an app URL's query describes (the
// Tune workers' input: the page sends its settings as the URL holds them),
// or its shard of shards (see tune.Space).
func NewTuneSearch(query string, cat model.Catalog, shard, shards int) (*tune.Search, error) {
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("tune: the settings' query: %w", err)
	}
	s, errs := ParseQuery(q)
	if len(errs) > 0 {
		keys := make([]string, 0, len(errs))
		for k := range errs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var msgs []string
		for _, k := range keys {
			msgs = append(msgs, k+": "+errs[k])
		}
		return nil, fmt.Errorf("tune: %s", strings.Join(msgs, "; "))
	}
	m, field, err := modelOf(s, cat)
	if err != nil {
		return nil, fmt.Errorf("tune: %s: %w", field, err)
	}
	sp, err := TuneSpace(s, m)
	if err != nil {
		return nil, err
	}
	sp.Shard, sp.Shards = shard, shards
	return tune.NewSearch(sp)
}

// RunTune runs a search to its end or until ctx is done, in slices of
// about slice: after each it calls progress and yield (when not nil: the
// thread's event loop gets its turn there). Then it ranks and charts what
// it evaluated.
func RunTune(ctx context.Context, search *tune.Search, slice time.Duration, clock func() time.Time, progress func(done, total int), yield func()) *TuneOutcome {
	start := clock()
	RunSlices(ctx, search, slice, clock, progress, yield)
	out := TuneOutcomeOf(search, clock, ctx.Err() != nil)
	out.SearchMillis = float64(clock().Sub(start).Microseconds()) / 1000
	return out
}

// RunSlices is RunTune's search without the ranking: it evaluates the
// search's candidates in slices until they are done or ctx ends.
func RunSlices(ctx context.Context, search *tune.Search, slice time.Duration, clock func() time.Time, progress func(done, total int), yield func()) {
	// Plans die young: collecting less often than Go's default costs a
	// little more memory and saves WebAssembly's single thread the marking.
	gc := debug.SetGCPercent(200)
	defer debug.SetGCPercent(gc)
	for !search.Done() && ctx.Err() == nil {
		t0 := clock()
		for !search.Done() && clock().Sub(t0) < slice {
			if search.Step(ctx, 1) != nil {
				break
			}
		}
		if progress != nil {
			progress(search.Progress())
		}
		if yield != nil {
			yield()
		}
	}
}

// TuneOutcomeOf ranks and charts what the search evaluated so far.
func TuneOutcomeOf(search *tune.Search, clock func() time.Time, canceled bool) *TuneOutcome {
	t0 := clock()
	res := search.Result()
	chart := tuneChart(res)
	res.All = nil                           // the chart has them; the rest of the result is what the view lists
	done, total := res.Evaluated, res.Total // merged shards' included
	open := make([]tune.Candidate, len(res.Top))
	for i, x := range res.Top {
		open[i] = x.Candidate
	}
	return &TuneOutcome{Result: res, Open: open, SummaryHTML: tuneSummaryHTML(res), TableHTML: tuneTableHTML(res), Chart: chart,
		Done: done, Total: total, Canceled: canceled && done < total,
		RankMillis: float64(clock().Sub(t0).Microseconds()) / 1000}
}
