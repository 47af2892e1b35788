package app

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"strconv"
	"strings"
	"time"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/tune"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// tuneState is a search the Tune view started. It runs in workers when
// the browser has them (kvscope-tune.js starts app.wasm there without a
// page), so the page's thread only draws its progress; else in the page,
// in slices of 20 ms that yield to the browser between them. Cancel
// stops it between two candidates either way.
type tuneState struct {
	cancel      func()
	started     time.Time
	worker      bool // the search runs in a worker
	done, total int
	millis      float64 // from the click to the ranked result on the page
	out         *TuneOutcome
	err         string
}

// startTune starts a search, cancelling one under way.
func (c *Root) startTune(ctx app.Context) {
	if c.tune != nil && c.tune.cancel != nil {
		c.tune.cancel()
	}
	st := &tuneState{started: clock()}
	c.tune = st
	defer c.showTune(st)
	if c.startTuneWorker(ctx, st) {
		return
	}
	sp, err := TuneSpace(c.settings, c.result.Model)
	var search *tune.Search
	if err == nil {
		search, err = tune.NewSearch(sp)
	}
	if err != nil {
		st.err = err.Error()
		return
	}
	st.done, st.total = search.Progress()
	run, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	ctx.Async(func() {
		lastDraw := clock()
		progress := func(done, total int) {
			if clock().Sub(lastDraw) > 100*time.Millisecond {
				lastDraw = clock()
				c.advanceTune(st, done, total)
			}
		}
		yield := func() { time.Sleep(time.Millisecond) } // the browser's turn: input, drawing
		out := RunTune(run, search, 20*time.Millisecond, clock, progress, yield)
		ctx.Dispatch(func(ctx app.Context) {
			c.finishTune(st, out)
			cancel()
		})
	})
}

// startTuneWorker hands the search to the page's Tune workers (one shard
// each; the first merges and ranks), reporting false where the browser has
// no workers, and for a model the page fetched from the Hub (the workers
// know the bundled models only: the search runs on the page).
func (c *Root) startTuneWorker(ctx app.Context, st *tuneState) bool {
	_, hubModel := c.hubRef(c.settings.Model)
	_, hubDraft := c.hubRef(c.settings.Draft)
	if !app.IsClient || hubModel || hubDraft {
		return false
	}
	kv := app.Window().Get("kvscope")
	if !kv.Truthy() || !kv.Get("tuneStart").Truthy() {
		return false
	}
	var fn app.Func
	fn = app.FuncOf(func(this app.Value, args []app.Value) any {
		msg := args[0]
		switch msg.Get("type").String() {
		case "progress":
			done, total := msg.Get("done").Int(), msg.Get("total").Int()
			c.advanceTune(st, done, total)
		case "result":
			fn.Release()
			// A few figures are read (the markup and the chart stay on
			// the page, the best candidates' flags JSON until one is
			// opened) and the result is drawn in place, without a render
			// of the page: go-app's render took 35–45 ms of this thread
			// in a Chromium trace, the longest task of the result, and
			// the first renders after a search have the browser compile
			// their code with its optimizing tier (60–100 ms of the
			// cores, in the same trace). The next render, when the user
			// next acts, finds the page as showTune left it.
			c.finishTune(st, tuneOutcomeFromWorker(msg))
			c.showTune(st)
		case "error":
			text := msg.Get("error").String()
			fn.Release()
			ctx.Dispatch(func(ctx app.Context) { st.err, st.cancel = text, nil })
		}
		return nil
	})
	if !kv.Call("tuneStart", c.settings.Query().Encode(), fn).Bool() {
		fn.Release()
		return false
	}
	st.worker = true
	st.cancel = func() { kv.Call("tuneCancel") }
	return true
}

// showTune draws search st as it stands into the page, without a render
// of the page: the progress bar, the buttons, and the result's summary,
// chart and table (which the page draws in frames of their own) or, while
// it runs, their empty places. It is called as a search starts and ends,
// so that the page is right whatever go-app's last render left: go-app
// compares a render with the one before, not with the page, so a render
// that finds the state of that one would leave a stale page (a search
// started again before any render since the result). A render after it
// finds the same and draws nothing again (Markup and Chart skip what
// their element was last asked to show).
func (c *Root) showTune(st *tuneState) {
	if !app.IsClient || st.err != "" {
		return
	}
	running := st.cancel != nil
	drawTuneBar(st, running)
	doc := app.Window().Get("document")
	set := func(sel, prop string, v bool) {
		if el := doc.Call("querySelector", sel); el.Truthy() {
			el.Set(prop, v)
		}
	}
	set(`[data-testid="tune-run"]`, "disabled", running)
	set(`[data-testid="tune-cancel"]`, "disabled", !running)
	set(".tune-table-card", "hidden", !st.out.shown())
	summary, chart, table := c.tuneParts(st.out)
	summary.fill()
	chart.draw()
	table.fill()
}

// warmTune starts the search workers the first time the Tune view shows:
// each loads app.wasm and runs the first candidates of the view's search
// while the user reads the form, so that the browser has compiled the
// planner's hot code with its optimizing tier before the first search.
func (c *Root) warmTune(ctx app.Context) {
	if !app.IsClient || c.tuneWorker != "" {
		return
	}
	kv := app.Window().Get("kvscope")
	if !kv.Truthy() || !kv.Get("tuneWarm").Truthy() || !app.Window().Get("Worker").Truthy() {
		return
	}
	c.tuneWorker = "starting"
	var fn app.Func
	fn = app.FuncOf(func(this app.Value, args []app.Value) any {
		if args[0].Get("type").String() == "ready" {
			fn.Release()
			ctx.Dispatch(func(ctx app.Context) { c.tuneWorker = "ready" })
		}
		return nil
	})
	kv.Call("tuneWarm", c.settings.Query().Encode(), fn)
}

// finishTune shows a search's outcome.
func (c *Root) finishTune(st *tuneState, out *TuneOutcome) {
	if st.worker {
		c.tuneWorker = "ready"
	}
	st.out, st.done, st.total = out, out.Done, out.Total
	st.millis = float64(clock().Sub(st.started).Microseconds()) / 1000
	st.cancel = nil
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
			max(s.P.TensorParallelSize, 1), max(s.D.TensorParallelSize, 1), c.profileName(), s.Prompt)),
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
		app.P().Class("muted").DataSet("testid", "tune-worker").DataSet("state", c.tuneWorker).Text(tuneWorkerText(c.tuneWorker)),
	)
	// The children keep their places in every state, and the chart and
	// the markup elements are components mounted when the view shows: a
	// result only fills them. (go-app redraws the whole page after it
	// mounts a component: one redraw more, 40–80 ms of the page's thread in
	// a Chromium trace, if they came with the result.)
	var progress app.UI
	var out *TuneOutcome
	switch {
	case st == nil:
		// The bar is there before the first search, so that starting
		// one only updates it.
		progress = tuneProgressOf(nil, false).render()
	case st.err != "":
		progress = app.Div().Class("banner error").DataSet("testid", "tune-error").Text(st.err)
	default:
		progress = tuneProgressOf(st, running).render()
		out = st.out
	}
	summary, chart, table := c.tuneParts(out)
	return app.Div().Class("tune-view").Body(form, progress, summary, chart, c.renderTuneTable(table, out.shown()))
}

// tuneParts is the Tune view's summary, Pareto chart and table of
// candidates for outcome out: empty, the chart a placeholder of the
// result's shape, before there is one.
func (c *Root) tuneParts(out *TuneOutcome) (summary *Markup, chart *Chart, table *Markup) {
	if c.tuneWarm == "" {
		c.tuneWarm = tuneWarmup()
	}
	summary, table = &Markup{ID: "tune-summary"}, &Markup{ID: "tune-table"}
	chart = &Chart{ID: "chart-tune", Option: c.tuneWarm, Dark: c.settings.Dark, Later: true, Merge: true, Offscreen: true}
	if out.shown() {
		summary.HTML, summary.Held = out.SummaryHTML, out.held("summary")
		table.HTML, table.Held = out.TableHTML, out.held("table")
		chart.Option, chart.Held = out.Chart, out.held("chart")
	}
	return summary, chart, table
}

// tuneProgress is a search's figures as its progress bar shows them.
type tuneProgress struct {
	done, total                      int
	worker                           bool
	state                            string // idle, running, canceled or done (tuneStateName)
	millis, rankMillis, searchMillis float64
}

// tuneProgressOf is the progress of search st (nil: none yet).
func tuneProgressOf(st *tuneState, running bool) tuneProgress {
	if st == nil {
		return tuneProgress{state: "idle"}
	}
	p := tuneProgress{done: st.done, total: st.total, worker: st.worker, state: tuneStateName(st, running), millis: st.millis}
	if st.out != nil {
		p.rankMillis, p.searchMillis = st.out.RankMillis, st.out.SearchMillis
	}
	return p
}

// tuneBarID is the progress bar's element.
const tuneBarID = "tune-bar"

// render is the progress bar and its status line. They are markup the
// page keeps as it is (go-app compares the text, no tree), so that a
// search's progress redraws them alone, in place (advanceTune): a redraw
// of the page around them takes 30–50 ms of the page's thread in
// WebAssembly (measured in a Chromium trace), theirs a fraction of one.
func (p tuneProgress) render() app.UI {
	return app.Raw(`<div id="` + tuneBarID + `" class="tune-progress">` + p.markup() + `</div>`)
}

// markup is the bar's content.
func (p tuneProgress) markup() string {
	status := fmt.Sprintf("%s of %s candidates", commas(int64(p.done)), commas(int64(p.total)))
	where := "on this page"
	if p.worker {
		where = "in a worker of this page"
	}
	switch p.state {
	case "idle":
		status = "No search yet: set the ranges and press Search."
	case "running":
		status += " · searching " + where + "…"
	case "canceled":
		status += fmt.Sprintf(" · canceled after %.0f ms (the ranking covers those evaluated)", p.millis)
	default:
		status += fmt.Sprintf(" · %.0f ms %s", p.millis, where)
	}
	ms := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	return fmt.Sprintf(`<progress data-testid="tune-progress" max="%d" value="%d"></progress>`, max(p.total, 1), p.done) +
		fmt.Sprintf(`<span data-testid="tune-status" data-done="%d" data-total="%d" data-ms="%s" data-rank-ms="%s" data-worker="%t" data-search-ms="%s" data-state="%s">%s</span>`,
			p.done, p.total, ms(p.millis), ms(p.rankMillis), p.worker, ms(p.searchMillis), html.EscapeString(p.state), html.EscapeString(status))
}

// advanceTune records that done of total candidates of search st are
// evaluated and redraws the progress bar in place, not the page.
func (c *Root) advanceTune(st *tuneState, done, total int) {
	st.done, st.total = done, total
	if !app.IsClient || c.tune != st || st.cancel == nil {
		return
	}
	drawTuneBar(st, true)
}

// drawTuneBar redraws the progress bar of search st in place.
func drawTuneBar(st *tuneState, running bool) {
	if el := app.Window().GetElementByID(tuneBarID); el.Truthy() {
		el.Set("innerHTML", tuneProgressOf(st, running).markup())
	}
}

func tuneWorkerText(state string) string {
	switch state {
	case "starting":
		return "The search worker is starting: it loads kvscope's WebAssembly and warms up on this search's first candidates, so the browser compiles the planner before you search."
	case "ready":
		return "Searches run in a worker, off this page's thread."
	}
	return "Searches run on this page, in slices between which it answers input."
}

func tuneStateName(st *tuneState, running bool) string {
	switch {
	case st.started.IsZero():
		return "idle"
	case running:
		return "running"
	case st.out != nil && st.out.Canceled:
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

// tuneSummaryHTML says what was refused and why, and names the best
// candidate whose pages divide, as markup (see renderTuneResult).
func tuneSummaryHTML(res *tune.Result) string {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString(`<section class="card">`)
	fmt.Fprintf(&b, `<p data-testid="tune-counts">%s</p>`, esc(fmt.Sprintf("%s candidates: %s accepted, ranked by %s.",
		commas(int64(res.Evaluated)), commas(int64(res.Feasible)), res.Objective.Name)))
	if len(res.Refused) > 0 {
		b.WriteString(`<ul data-testid="tune-refused">`)
		for _, x := range res.Refused {
			fmt.Fprintf(&b, `<li title="%s">%s</li>`, esc(x.Example), esc(fmt.Sprintf("%s refused: %s", commas(int64(x.Count)), x.Reason)))
		}
		b.WriteString(`</ul>`)
	}
	if d := res.Dividing; d != nil {
		fmt.Fprintf(&b, `<p data-testid="tune-dividing" data-block="%d">%s</p>`, d.DBlock, esc(fmt.Sprintf(
			"P and D pages divide with D --block-size %s (planned %d, P %d) at TP %s: %s D KV tokens, %s descriptors.",
			autoOr(d.DBlockSize), d.DBlock, d.PBlock, d.TP, commas(d.DKVTokens), commas(int64(d.Descs)))))
	} else if res.Feasible > 0 {
		b.WriteString(`<p data-testid="tune-dividing">No accepted candidate has P and D pages that divide.</p>`)
	}
	if len(res.Inferred) > 0 {
		fmt.Fprintf(&b, `<p class="muted inferred">%s</p>`, esc("Inferred, not read from vLLM's code: "+strings.Join(res.Inferred, "; ")))
	}
	b.WriteString(`</section>`)
	return b.String()
}

func autoOr(v int) string {
	if v == 0 {
		return "auto"
	}
	return strconv.Itoa(v)
}

// renderTuneTable shows a search's best candidates: markup made with the
// result (in the search's worker, where it has one) that the browser
// parses itself (Markup), not hundreds of elements made one call at a
// time from WebAssembly (a hundred milliseconds and more on a slow
// machine, holding the page); one click handler around the table finds
// the Open button pressed. Without a result the table is there, empty,
// its card hidden.
func (c *Root) renderTuneTable(table *Markup, shown bool) app.UI {
	return app.Section().Class("card tune-table-card").Hidden(!shown).Body(
		app.H2().Text("Best candidates"),
		app.Div().Class("scroll").Body(table).
			OnClick(func(ctx app.Context, e app.Event) {
				btn := e.Get("target").Call("closest", `[data-testid="tune-open"]`)
				if !btn.Truthy() || c.tune == nil || c.tune.out == nil {
					return
				}
				open, err := c.tune.out.OpenList()
				if err != nil {
					c.tune.err = err.Error()
					ctx.Update()
					return
				}
				i, err := strconv.Atoi(btn.Get("dataset").Get("row").String())
				if err != nil || i < 0 || i >= len(open) {
					return
				}
				c.openCandidate(ctx, open[i])
			}),
	)
}

// tuneTableHTML is the best candidates' table as markup.
func tuneTableHTML(res *tune.Result) string {
	var b strings.Builder
	b.WriteString(`<table class="tune-top" data-testid="tune-top"><thead><tr>`)
	// The widths (in characters, the flags' column takes the rest) let the
	// table be laid out a row at a time (table-layout: fixed).
	for _, h := range []struct {
		name  string
		width int
	}{{"#", 4}, {"TP P:D", 8}, {"D block", 12}, {"P block", 9}, {"selector", 15}, {"min layers", 12}, {"mnbt", 8}, {"dtype", 8},
		{"connector", 11}, {"D KV tokens", 14}, {"descriptors", 13}, {"pages divide", 14}, {"flags", 0}, {"", 8}} {
		if h.width == 0 {
			b.WriteString("<th>" + html.EscapeString(h.name) + "</th>")
			continue
		}
		fmt.Fprintf(&b, `<th style="width:%dch">%s</th>`, h.width, html.EscapeString(h.name))
	}
	b.WriteString("</tr></thead><tbody>")
	// Candidates whose flags differ but whose plans and transfer are the
	// same (a --min-kv-cache-group-layers the selector never reaches)
	// are one row, with how many it stands for.
	type figures struct {
		tp                               string
		pBlock, dBlock, pGroups, dGroups int
		dKV, pKV, pad                    int64
		descs, merged                    int
		divide                           bool
		conn                             string
	}
	key := func(x tune.Scored) figures {
		return figures{x.TP.String(), x.PBlock, x.DBlock, x.PGroups, x.DGroups, x.DKVTokens, x.PKVTokens, x.PaddingBytes, x.Descs, x.Merged, x.PagesDivide, x.Connector}
	}
	alike := map[figures]int{}
	for _, x := range res.Top {
		alike[key(x)]++
	}
	shown := map[figures]bool{}
	row := 0
	for i, x := range res.Top {
		k := key(x)
		if shown[k] {
			continue
		}
		shown[k] = true
		row++
		rank := strconv.Itoa(row)
		if n := alike[k]; n > 1 {
			rank += fmt.Sprintf(" ×%d", n)
		}
		fmt.Fprintf(&b, `<tr data-testid="tune-row" data-index="%d" data-alike="%d">`, x.Index, alike[k])
		for _, cell := range []string{rank, x.TP.String(), fmt.Sprintf("%s → %d", autoOr(x.DBlockSize), x.DBlock), strconv.Itoa(x.PBlock),
			orDefault(x.Selector), autoOr(x.MinGroupLayers), autoOr(x.MaxBatched), orDefault(x.KVCacheDType), x.Connector,
			commas(x.DKVTokens), commas(int64(x.Descs)), yesNo(x.PagesDivide)} {
			b.WriteString("<td>" + html.EscapeString(cell) + "</td>")
		}
		b.WriteString(`<td><details><summary>vllm serve</summary><pre class="serve">`)
		b.WriteString(html.EscapeString("# P\n" + x.PServe + "\n# D\n" + x.DServe))
		fmt.Fprintf(&b, `</pre></details></td><td><button data-testid="tune-open" data-row="%d" title="open this candidate in the P vs D view">Open</button></td></tr>`, i)
	}
	b.WriteString("</tbody></table>")
	return b.String()
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
		s.P.TensorParallelSize, s.D.TensorParallelSize = x.TP.P, x.TP.D
		if x.PBlockSize != 0 {
			s.P.BlockSize = x.PBlockSize
		}
		s.D.BlockSize = x.DBlockSize
		if x.MinGroupLayers != 0 {
			s.P.MinGroupLayers, s.D.MinGroupLayers = x.MinGroupLayers, x.MinGroupLayers
		}
		if x.Selector != "" {
			s.P.Selector, s.D.Selector = plan.Selector(x.Selector), plan.Selector(x.Selector)
		}
		if x.MaxBatched != 0 {
			s.D.MaxNumBatchedTokens = x.MaxBatched
		}
		if x.KVCacheDType != "" {
			s.P.KVCacheDType, s.D.KVCacheDType = x.KVCacheDType, x.KVCacheDType
		}
		s.Connector = x.Connector
		s.View = "pd"
	})
}

// tuneChart is the Pareto chart: every accepted candidate's D KV tokens
// against its descriptors per request, coloured by whether P's and D's
// pages divide, the front drawn over them; hovering a point names its
// flags. Candidates whose points would overlap on the chart (one cell of
// a chartCells grid over the axes' ranges: flags that plan alike, or
// nearly) are drawn once, at the first one's exact values, and named by it
// with their count: a search of thousands draws hundreds of points, and
// the page draws them in tens of milliseconds, not hundreds. The front is
// drawn whole. The clouds are ECharts' large series (one shape for all
// their points, each still named on hover): drawing ~500 points as one
// element each held the page 130–265 ms in a Chromium trace, as large
// series 45–115 ms.
func tuneChart(res *tune.Result) string {
	return tuneChartOption(res, "the Pareto front: more tokens, fewer descriptors", `,"itemStyle":{"opacity":1}`, true)
}

// tuneChartOption is tuneChart's option with the given subtitle and
// extra properties for every series.
func tuneChartOption(res *tune.Result, subtext, extra string, labels bool) string {
	label := func(x tune.Scored) string {
		return fmt.Sprintf("TP %s · D block %s→%d · P block %d · %s · min %s · mnbt %s · %s · %s", x.TP, autoOr(x.DBlockSize), x.DBlock, x.PBlock,
			orDefault(x.Selector), autoOr(x.MinGroupLayers), autoOr(x.MaxBatched), orDefault(x.KVCacheDType), x.Connector)
	}
	type point struct {
		descs  int
		kv     int64
		divide bool
	}
	type cell struct {
		x, y   int
		divide bool
	}
	grid := newChartGrid(res.All)
	first := map[cell]tune.Scored{}
	count := map[cell]int{}
	var order []cell
	for _, x := range res.All {
		c := cell{grid.x(x.Descs), grid.y(x.DKVTokens), x.PagesDivide}
		if count[c] == 0 {
			first[c] = x
			order = append(order, c)
		}
		count[c]++
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
	for _, c := range order {
		x := first[c]
		name := label(x)
		if n := count[c]; n > 1 {
			name = fmt.Sprintf("%d candidates at or next to this point, e.g. %s", n, name)
		}
		p := point{x.Descs, x.DKVTokens, x.PagesDivide}
		if p.divide {
			divide, divideNames = append(divide, p), append(divideNames, name)
		} else {
			split, splitNames = append(split, p), append(splitNames, name)
		}
	}
	for _, x := range res.Front {
		front, frontNames = append(front, point{x.Descs, x.DKVTokens, x.PagesDivide}), append(frontNames, label(x))
	}
	b := make([]byte, 0, 256+160*(len(order)+len(front)))
	b = append(b, `{"title":{"text":"D KV tokens against descriptors per request","subtext":`...)
	b = appendJSONString(b, subtext)
	b = append(b, `},"animation":false,"tooltip":{"show":true,"trigger":"item","formatter":"{b}<br/>{c}"},"legend":{"show":true,"top":"40"},`+
		`"xAxis":{"name":"descriptors per request","type":"value","scale":true,"axisLabel":{"show":`+strconv.FormatBool(labels)+`}},`+
		`"yAxis":{"name":"D KV tokens","type":"value","scale":true,"axisLabel":{"show":`+strconv.FormatBool(labels)+`}},"series":[`...)
	const many = `,"symbolSize":7,"large":true,"largeThreshold":0`
	b = series(b, "pages divide", divide, divideNames, many+extra)
	b = append(b, ',')
	b = series(b, "pages do not divide", split, splitNames, many+extra)
	b = append(b, ',')
	b = series(b, "Pareto front", front, frontNames, `,"symbolSize":13,"symbol":"diamond"`+extra)
	return string(append(b, "]}"...))
}

// chartCells is how many cells the Pareto chart's axes are cut into for
// drawing: a cell is about a point's width (7 px) on a chart a page shows.
const chartCells = 160

// chartGrid maps candidates' values to cells of the chart.
type chartGrid struct {
	minX, minY   float64
	stepX, stepY float64
}

func newChartGrid(all []tune.Scored) chartGrid {
	if len(all) == 0 {
		return chartGrid{stepX: 1, stepY: 1}
	}
	minX, maxX := float64(all[0].Descs), float64(all[0].Descs)
	minY, maxY := float64(all[0].DKVTokens), float64(all[0].DKVTokens)
	for _, x := range all {
		minX, maxX = min(minX, float64(x.Descs)), max(maxX, float64(x.Descs))
		minY, maxY = min(minY, float64(x.DKVTokens)), max(maxY, float64(x.DKVTokens))
	}
	return chartGrid{minX: minX, minY: minY, stepX: max((maxX-minX)/chartCells, 1), stepY: max((maxY-minY)/chartCells, 1)}
}

func (g chartGrid) x(descs int) int { return int((float64(descs) - g.minX) / g.stepX) }
func (g chartGrid) y(kv int64) int  { return int((float64(kv) - g.minY) / g.stepY) }

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// tuneWarmup is the Pareto chart's option before a search: the chart a
// search of about the usual size draws, of the same shape, its points
// invisible. The browser then runs (and compiles) the code that draws
// hundreds of named points when the view shows, not when a result comes;
// the result is drawn into this chart (Chart.Merge), which keeps its
// axes, legend and tooltip. (In a Chromium trace, a result drawn on a
// placeholder of two points took 90–120 ms, on this one 45–55 ms.)
func tuneWarmup() string {
	var res tune.Result
	for i := 0; i < 512; i++ {
		x := tune.Scored{Descs: 100 + i%32*7, DKVTokens: int64(1000 + i/32*97 + i%7), PagesDivide: i%2 == 0}
		res.All = append(res.All, x)
		if i < 12 {
			res.Front = append(res.Front, x)
		}
	}
	return tuneChartOption(&res, "no search yet: press Search to draw the candidates", `,"itemStyle":{"opacity":0}`, false)
}
