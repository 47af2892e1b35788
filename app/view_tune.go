package app

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/kvscope/kvscope/core/tune"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// tuneState is a search the Tune view started: it runs in slices of at
// most tuneSlice, yielding to the browser between them, so the page keeps
// answering while it runs and Cancel stops it between two candidates.
type tuneState struct {
	search      *tune.Search
	cancel      context.CancelFunc
	started     time.Time
	done, total int
	millis      float64 // from start to the ranked result
	rankMillis  float64 // ranking and charting the result, at the end
	result      *tune.Result
	chart       string
	err         string
	canceled    bool
}

// tuneSlice bounds the time one slice of a search holds the page.
const tuneSlice = 20 * time.Millisecond

// space builds the search from the settings and the current result's
// model.
func (c *Root) tuneSpace() (tune.Space, error) {
	s, r := c.settings, c.result
	obj, err := tune.ParseObjective(s.Tune.Objective, s.Tune.Weights)
	if err != nil {
		return tune.Space{}, err
	}
	pe, de := s.Engines()
	draft := s.Draft
	if draft == "custom" {
		draft = "draft"
	}
	return tune.Space{Model: r.Model, ModelName: s.Model, DraftName: draft, P: pe, D: de, Objective: obj,
		Request: xfer.Request{PromptTokens: s.Prompt, PrefixHitTokens: s.Hit},
		Ranges: tune.Ranges{TPPairs: s.Tune.TPPairs, BlockSizes: s.Tune.BlockSizes, PBlockSizes: s.Tune.PBlockSizes, MinGroupLayers: s.Tune.MinLayers,
			Selectors: s.Tune.Selectors, MaxBatched: s.Tune.MNBT, KVCacheDTypes: s.Tune.KVDTypes, Connectors: s.Tune.Connectors}}, nil
}

// startTune starts a search, cancelling one under way.
func (c *Root) startTune(ctx app.Context) {
	if c.tune != nil && c.tune.cancel != nil {
		c.tune.cancel()
	}
	st := &tuneState{started: clock()}
	c.tune = st
	sp, err := c.tuneSpace()
	if err == nil {
		st.search, err = tune.NewSearch(sp)
	}
	if err != nil {
		st.err = err.Error()
		return
	}
	st.done, st.total = st.search.Progress()
	run, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	search := st.search
	ctx.Async(func() {
		// Plans die young: collect less often while searching (the
		// WebAssembly collector runs on the page's only thread).
		gc := debug.SetGCPercent(400)
		defer debug.SetGCPercent(gc)
		lastDraw := clock()
		for !search.Done() && run.Err() == nil {
			t0 := clock()
			for !search.Done() && clock().Sub(t0) < tuneSlice {
				if search.Step(run, 1) != nil {
					break
				}
			}
			if done, total := search.Progress(); clock().Sub(lastDraw) > 100*time.Millisecond {
				lastDraw = clock()
				ctx.Dispatch(func(ctx app.Context) { st.done, st.total = done, total })
			}
			time.Sleep(time.Millisecond) // the browser's turn: input, drawing
		}
		t0 := clock()
		res := search.Result()
		chart := tuneChart(res)
		rank := float64(clock().Sub(t0).Microseconds()) / 1000
		done, total := search.Progress()
		ctx.Dispatch(func(ctx app.Context) {
			st.result, st.chart, st.done, st.total, st.rankMillis = res, chart, done, total, rank
			st.millis = float64(clock().Sub(st.started).Microseconds()) / 1000
			st.canceled = run.Err() != nil && done < total
			st.cancel = nil
			cancel()
		})
	})
}

// renderTune draws the search form, its progress, the Pareto chart and the
// best candidates.
func (c *Root) renderTune() app.UI {
	r := c.result
	if !r.OK() {
		return app.P().Class("muted").Text("Fix the settings on the Configure view to search around them.")
	}
	s := c.settings
	st := c.tune
	running := st != nil && st.cancel != nil
	field := func(i int) app.UI {
		f := tuneFields[i]
		val := *f.ptr(&s.Tune)
		return app.Label().Class("field").Body(
			app.Span().Text(strings.TrimPrefix(f.flag, "--")),
			app.Input().Type("text").Name(f.key).DataSet("testid", f.key).Value(val).Placeholder("default").Title(f.help).
				OnChange(func(ctx app.Context, e app.Event) {
					v := e.Get("target").Get("value").String()
					c.change(ctx, func(s *Settings) { *tuneFields[i].ptr(&s.Tune) = strings.TrimSpace(v) })
				}),
		)
	}
	form := app.Section().Class("card tune-form").Body(
		app.H2().Text("Search P/D engine flags"),
		app.P().Class("muted").Text(fmt.Sprintf("Every candidate keeps the Configure view's flags (P TP %d, D TP %d, vLLM %s) but what the ranges vary; "+
			"each is planned for P and D, held against vLLM's and the handshake's rules, and costed by the descriptors of a %d-token request.",
			max(s.P.TP, 1), max(s.D.TP, 1), c.profileName(), s.Prompt)),
		app.Div().Class("fields").Body(app.Range(tuneFields).Slice(field)),
		app.Div().Class("actions").Body(
			app.Button().DataSet("testid", "tune-run").Disabled(running).Text("Search").OnClick(func(ctx app.Context, e app.Event) { c.startTune(ctx) }),
			app.Button().DataSet("testid", "tune-cancel").Disabled(!running).Text("Cancel").OnClick(func(ctx app.Context, e app.Event) {
				if c.tune != nil && c.tune.cancel != nil {
					c.tune.cancel()
				}
			}),
			app.Code().Class("cli").Text(c.tuneCLI()),
		),
	)
	if st == nil {
		return app.Div().Class("tune-view").Body(form)
	}
	if st.err != "" {
		return app.Div().Class("tune-view").Body(form, app.Div().Class("banner error").DataSet("testid", "tune-error").Text(st.err))
	}
	status := fmt.Sprintf("%s of %s candidates", commas(int64(st.done)), commas(int64(st.total)))
	switch {
	case running:
		status += " · searching…"
	case st.canceled:
		status += fmt.Sprintf(" · canceled after %.0f ms (the ranking covers those evaluated)", st.millis)
	default:
		status += fmt.Sprintf(" · %.0f ms in this browser", st.millis)
	}
	progress := app.Div().Class("tune-progress").Body(
		app.Progress().DataSet("testid", "tune-progress").Max(max(st.total, 1)).Value(st.done),
		app.Span().DataSet("testid", "tune-status").DataSet("done", st.done).DataSet("total", st.total).
			DataSet("ms", strconv.FormatFloat(st.millis, 'f', 1, 64)).DataSet("rank-ms", strconv.FormatFloat(st.rankMillis, 'f', 1, 64)).DataSet("state", tuneStateName(st, running)).Text(status),
	)
	if st.result == nil {
		return app.Div().Class("tune-view").Body(form, progress)
	}
	res := st.result
	return app.Div().Class("tune-view").Body(form, progress,
		c.renderTuneSummary(res),
		&Chart{ID: "chart-tune", Option: st.chart, Dark: s.Dark},
		c.renderTuneTable(res),
	)
}

func tuneStateName(st *tuneState, running bool) string {
	switch {
	case running:
		return "running"
	case st.canceled:
		return "canceled"
	}
	return "done"
}

// tuneCLI is the kvscope tune command line of the search.
func (c *Root) tuneCLI() string {
	cli := strings.Replace(c.settings.CLI("pd"), "kvscope pd", "kvscope tune", 1)
	for _, f := range tuneFields {
		if v := *f.ptr(&c.settings.Tune); v != "" {
			cli += " " + f.flag + " " + v
		}
	}
	return cli
}

// renderTuneSummary says what was refused and why, and names the best
// candidate whose pages divide.
func (c *Root) renderTuneSummary(res *tune.Result) app.UI {
	var items []app.UI
	items = append(items, app.P().DataSet("testid", "tune-counts").Text(fmt.Sprintf("%s candidates: %s accepted, ranked by %s.",
		commas(int64(res.Evaluated)), commas(int64(res.Feasible)), res.Objective.Name)))
	if len(res.Refused) > 0 {
		items = append(items, app.Ul().DataSet("testid", "tune-refused").Body(app.Range(res.Refused).Slice(func(i int) app.UI {
			x := res.Refused[i]
			return app.Li().Title(x.Example).Text(fmt.Sprintf("%s refused: %s", commas(int64(x.Count)), x.Reason))
		})))
	}
	if d := res.Dividing; d != nil {
		items = append(items, app.P().DataSet("testid", "tune-dividing").DataSet("block", d.DBlock).Text(fmt.Sprintf(
			"P and D pages divide with D --block-size %s (planned %d, P %d) at TP %s: %s D KV tokens, %s descriptors.",
			autoOr(d.DBlockSize), d.DBlock, d.PBlock, d.TP, commas(d.DKVTokens), commas(int64(d.Descs)))))
	} else if res.Feasible > 0 {
		items = append(items, app.P().DataSet("testid", "tune-dividing").Text("No accepted candidate has P and D pages that divide."))
	}
	if len(res.Inferred) > 0 {
		items = append(items, app.P().Class("muted inferred").Text("Inferred, not read from vLLM's code: "+strings.Join(res.Inferred, "; ")))
	}
	return app.Section().Class("card").Body(items...)
}

func autoOr(v int) string {
	if v == 0 {
		return "auto"
	}
	return strconv.Itoa(v)
}

// renderTuneTable lists the best candidates with their vllm serve lines
// and a button that opens one in the other views.
func (c *Root) renderTuneTable(res *tune.Result) app.UI {
	return app.Section().Class("card").Body(
		app.H2().Text("Best candidates"),
		app.Div().Class("scroll").Body(app.Table().Class("tune-top").DataSet("testid", "tune-top").Body(
			app.THead().Body(app.Tr().Body(app.Th().Text("#"), app.Th().Text("TP P:D"), app.Th().Text("D block"), app.Th().Text("P block"),
				app.Th().Text("selector"), app.Th().Text("min layers"), app.Th().Text("mnbt"), app.Th().Text("dtype"), app.Th().Text("connector"),
				app.Th().Text("D KV tokens"), app.Th().Text("descriptors"), app.Th().Text("pages divide"), app.Th().Text("flags"), app.Th())),
			app.TBody().Body(app.Range(res.Top).Slice(func(i int) app.UI {
				x := res.Top[i]
				return app.Tr().DataSet("testid", "tune-row").DataSet("index", x.Index).Body(
					app.Td().Text(strconv.Itoa(i+1)), app.Td().Text(x.TP.String()),
					app.Td().Text(fmt.Sprintf("%s → %d", autoOr(x.DBlockSize), x.DBlock)), app.Td().Text(strconv.Itoa(x.PBlock)),
					app.Td().Text(orDefault(x.Selector)), app.Td().Text(autoOr(x.MinGroupLayers)), app.Td().Text(autoOr(x.MaxBatched)),
					app.Td().Text(orDefault(x.KVCacheDType)), app.Td().Text(x.Connector),
					app.Td().Text(commas(x.DKVTokens)), app.Td().Text(commas(int64(x.Descs))), app.Td().Text(yesNo(x.PagesDivide)),
					app.Td().Body(app.Details().Body(app.Summary().Text("vllm serve"),
						app.Pre().Class("serve").Text("# P\n"+x.PServe+"\n# D\n"+x.DServe))),
					app.Td().Body(app.Button().DataSet("testid", "tune-open").Text("Open").Title("open this candidate in the P vs D view").
						OnClick(func(ctx app.Context, e app.Event) { c.openCandidate(ctx, x.Candidate) })),
				)
			})),
		)),
	)
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// openCandidate sets the engines to a candidate's flags and shows the P
// vs D view.
func (c *Root) openCandidate(ctx app.Context, x tune.Candidate) {
	c.change(ctx, func(s *Settings) {
		s.P.TP, s.D.TP = x.TP.P, x.TP.D
		if x.PBlockSize != 0 {
			s.P.BlockSize = x.PBlockSize
		}
		s.D.BlockSize = x.DBlockSize
		if x.MinGroupLayers != 0 {
			s.P.MinLayers, s.D.MinLayers = x.MinGroupLayers, x.MinGroupLayers
		}
		if x.Selector != "" {
			s.P.Selector, s.D.Selector = x.Selector, x.Selector
		}
		if x.MaxBatched != 0 {
			s.D.MNBT = x.MaxBatched
		}
		if x.KVCacheDType != "" {
			s.P.KVDType, s.D.KVDType = x.KVCacheDType, x.KVCacheDType
		}
		s.Connector = x.Connector
		s.View = "pd"
	})
}

// tuneChart is the Pareto chart: every accepted candidate's D KV tokens
// against its descriptors per request, coloured by whether P's and D's
// pages divide, the front drawn over them; hovering a point names its
// flags. Candidates that land on one point (flags that plan alike) are
// one point, named by the first of them and their count: a search of
// thousands draws hundreds of points.
func tuneChart(res *tune.Result) string {
	label := func(x tune.Scored) string {
		return fmt.Sprintf("TP %s · D block %s→%d · P block %d · %s · min %s · mnbt %s · %s · %s", x.TP, autoOr(x.DBlockSize), x.DBlock, x.PBlock,
			orDefault(x.Selector), autoOr(x.MinGroupLayers), autoOr(x.MaxBatched), orDefault(x.KVCacheDType), x.Connector)
	}
	type point struct {
		descs  int
		kv     int64
		divide bool
	}
	first := map[point]tune.Scored{}
	count := map[point]int{}
	var order []point
	for _, x := range res.All {
		p := point{x.Descs, x.DKVTokens, x.PagesDivide}
		if count[p] == 0 {
			first[p] = x
			order = append(order, p)
		}
		count[p]++
	}
	// The option is written by hand, not through go-echarts' reflection:
	// thousands of points cost the page a few milliseconds, not hundreds.
	series := func(b []byte, name string, pts []point, names []string, extra string) []byte {
		b = append(b, `{"type":"scatter","name":`...)
		b = appendJSONString(b, name)
		b = append(b, extra...)
		b = append(b, `,"data":[`...)
		for i, p := range pts {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendJSONString(b, names[i])
			b = append(b, `,"value":[`...)
			b = strconv.AppendInt(b, int64(p.descs), 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, p.kv, 10)
			b = append(b, "]}"...)
		}
		return append(b, "]}"...)
	}
	var divide, split, front []point
	var divideNames, splitNames, frontNames []string
	for _, p := range order {
		name := label(first[p])
		if n := count[p]; n > 1 {
			name = fmt.Sprintf("%d candidates, e.g. %s", n, name)
		}
		if p.divide {
			divide, divideNames = append(divide, p), append(divideNames, name)
		} else {
			split, splitNames = append(split, p), append(splitNames, name)
		}
	}
	for _, x := range res.Front {
		front, frontNames = append(front, point{x.Descs, x.DKVTokens, x.PagesDivide}), append(frontNames, label(x))
	}
	b := make([]byte, 0, 256+120*(len(order)+len(front)))
	b = append(b, `{"title":{"text":"D KV tokens against descriptors per request","subtext":"the Pareto front: more tokens, fewer descriptors"},`+
		`"tooltip":{"show":true,"trigger":"item","formatter":"{b}<br/>{c}"},"legend":{"show":true,"top":"40"},`+
		`"xAxis":{"name":"descriptors per request","type":"value","scale":true},"yAxis":{"name":"D KV tokens","type":"value","scale":true},"series":[`...)
	b = series(b, "pages divide", divide, divideNames, `,"symbolSize":7`)
	b = append(b, ',')
	b = series(b, "pages do not divide", split, splitNames, `,"symbolSize":7`)
	b = append(b, ',')
	b = series(b, "Pareto front", front, frontNames, `,"symbolSize":13,"symbol":"diamond"`)
	return string(append(b, "]}"...))
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}
