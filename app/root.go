package app

import (
	"encoding/json"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// Register routes the app's one page. The server and the WASM entry point
// both call it, so the page the server renders and the app the browser
// runs are the same component.
func Register(cat model.Catalog) {
	app.Route("/", func() app.Composer { return &Root{Catalog: cat} })
}

// Root is the whole app: it reads the settings from the URL, computes with
// core, and draws the current view.
type Root struct {
	app.Compo

	Catalog model.Catalog

	settings Settings
	parseErr FieldErrors
	result   *Result
	mounted  bool
	help     bool
	layer    string // the layer whose descriptors the flow view lists
	charts   *chartSet
	oracleOn bool // the oracle ran (or is running) for the current result
	keys     app.Func
	keysJS   app.Value    // the page's keydown listener that calls keys
	live     *liveSession // the live view's subscription, kept across views
	check    checkState   // the Check view's log and outcome
	tune     *tuneState   // the Tune view's search, running or done
	// hub holds the config.json of each Hub id this page fetched (or is
	// fetching), by id: kept for the session, never in the URL.
	hub map[string]*hubConfig
	// ctx is the root's own context (from OnMount): callbacks from the
	// page dispatch to it, since the element whose event started them may
	// be gone by the time they come.
	ctx app.Context
	// tuneWorker is the Tune view's search worker: "" (none: searches run
	// on the page), "starting" (loading app.wasm and warming up) or "ready".
	tuneWorker string
	tuneWarm   string // the Tune chart's option before a search (tuneWarmup)
	idleGC     bool   // a collection is waiting for the browser to be idle
	landing    bool   // the page opened without settings: the three starts show
}

// OnDismount stops listening for shortcuts.
func (c *Root) OnDismount() {
	if c.keys != nil {
		if c.keysJS != nil && c.keysJS.Truthy() {
			app.Window().Call("removeEventListener", "keydown", c.keysJS)
		}
		c.keys.Release()
		c.keys = nil
	}
}

// OnNav reads the settings from the URL and computes.
func (c *Root) OnNav(ctx app.Context) {
	q := ctx.Page().URL().Query()
	c.settings, c.parseErr = ParseQuery(q)
	c.landing = len(q) == 0 // a first visit: offer the three starts
	c.recompute(ctx)
	if !c.mounted {
		// Prerendering on the server, or before mount: draw what needs no
		// transfer; the browser adds the rest once mounted.
		if v := c.settings.View; v == "pd" || v == "flow" {
			c.result.EnsureTransfer(clock)
		}
		return
	}
	c.afterCompute(ctx)
}

// OnMount marks the root ready for tests and listens for shortcuts.
func (c *Root) OnMount(ctx app.Context) {
	c.mounted, c.ctx = true, ctx
	// The moment the app took over, on the browser's clock (make budgets
	// reads it: interactive after navigation).
	if perf := app.Window().Get("performance"); perf.Truthy() && perf.Get("mark").Truthy() {
		perf.Call("mark", "kvscope-ready")
	}
	// kvscope.onShortcut filters the keys in the page: a key typed into a
	// field never calls into WebAssembly.
	c.keys = app.FuncOf(func(this app.Value, args []app.Value) any {
		key := args[0].String()
		ctx.Dispatch(func(ctx app.Context) { c.shortcut(ctx, key) })
		return nil
	})
	if kv := app.Window().Get("kvscope"); kv.Truthy() {
		c.keysJS = kv.Call("onShortcut", c.keys)
	}
	c.afterCompute(ctx)
}

// shortcut handles one key press.
func (c *Root) shortcut(ctx app.Context, key string) {
	switch key {
	case "?":
		c.help = !c.help
	case "Escape":
		c.help = false
	case "d":
		c.change(ctx, func(s *Settings) { s.Dark = !s.Dark })
		return
	case "e":
		c.exportJSON()
	case "l":
		c.copyLink()
	default:
		if n, err := strconv.Atoi(key); err == nil && n >= 1 && n <= len(Views) {
			c.change(ctx, func(s *Settings) { s.View = Views[n-1].ID })
			return
		}
		return
	}
	ctx.Update()
}

// collectWhenIdle runs the garbage collector in a task of its own right
// after an update has been drawn: a recompute's few MB die at once, and
// collecting them while the user reads the page keeps the collection out
// of the next keystroke's recompute (WebAssembly's collector runs on the
// page's only thread).
func (c *Root) collectWhenIdle() {
	if !app.IsClient || c.idleGC {
		return
	}
	w := app.Window()
	c.idleGC = true
	var fn app.Func
	fn = app.FuncOf(func(this app.Value, args []app.Value) any {
		runtime.GC()
		c.idleGC = false
		fn.Release()
		return nil
	})
	w.Call("setTimeout", fn, 0)
}

// change applies an edit, recomputes and writes the settings into the URL.
func (c *Root) change(ctx app.Context, edit func(*Settings)) {
	defer c.collectWhenIdle()
	prev := c.settings
	c.landing = false
	edit(&c.settings)
	if presentation(c.settings) == presentation(prev) {
		// Only the view or the theme changed: nothing to recompute.
		c.writeURL()
		c.afterCompute(ctx)
		ctx.Update()
		return
	}
	c.parseErr = FieldErrors{}
	c.recompute(ctx)
	c.writeURL()
	c.afterCompute(ctx)
	ctx.Update()
}

// presentation is the settings without what only changes how they are
// drawn (the view and the theme) or what only a search reads (the Tune
// view's ranges: a search starts when asked, not on every edit).
func presentation(s Settings) string {
	s.View, s.Dark, s.Tune = "", false, TuneSettings{}
	return s.Query().Encode()
}

func (c *Root) recompute(ctx app.Context) {
	c.result = Compute(c.settings, c.models(), clock)
	for k, v := range c.parseErr {
		c.result.Errors[k] = v
	}
	c.charts = nil
	c.oracleOn = false
	c.layer = ""
}

// clock reads the browser's high-resolution timer where there is one (Go's
// time.Now in WebAssembly ticks in milliseconds), else the wall clock.
func clock() time.Time {
	if app.IsClient {
		if perf := app.Window().Get("performance"); perf.Truthy() {
			ms := perf.Call("now").Float()
			return time.Unix(0, int64(ms*1e6))
		}
	}
	return time.Now()
}

// afterCompute starts the slower work the current view needs: the byte
// oracle on the descriptor view, the chart sweeps on the charts view.
func (c *Root) afterCompute(ctx app.Context) {
	r := c.result
	if c.mounted {
		c.fetchModels()
	}
	if r == nil || !r.OK() || !c.mounted {
		return
	}
	switch c.settings.View {
	case "pd", "flow":
		r.EnsureTransfer(clock)
	}
	switch c.settings.View {
	case "flow":
		if !c.oracleOn && r.Oracle == nil && r.OracleNote == "" {
			c.oracleOn = true
			ctx.Async(func() {
				res, note := runOracle(r)
				ctx.Dispatch(func(ctx app.Context) {
					if c.result == r {
						r.Oracle, r.OracleNote = res, note
					}
				})
			})
		}
	case "charts":
		if c.charts == nil {
			set := computeCharts(r, c.Catalog)
			c.charts = &set
		}
	case "tune":
		c.warmTune(ctx)
	}
}

// runOracle proves the transfer on bytes when it is small enough for the
// browser.
func runOracle(r *Result) (*oracle.Result, string) {
	t := r.PD.Transfer
	if t == nil {
		return nil, r.PD.Note
	}
	if t.Rejection != nil {
		return &oracle.Result{Verdict: oracle.Rejected, Reason: t.Rejection.Error()}, ""
	}
	if t.Bytes > OracleLimit {
		return nil, "the transfer moves " + humanBytes(t.Bytes) + "; the browser proves transfers up to " + humanBytes(OracleLimit) + ": run " + r.Settings.CLI("oracle")
	}
	res, err := oracle.Check(r.Model, t)
	if err != nil {
		return nil, err.Error()
	}
	return res, ""
}

// writeURL replaces the address bar's query without a navigation.
func (c *Root) writeURL() {
	app.Window().Get("history").Call("replaceState", nil, "", c.settings.Link())
}

func (c *Root) exportJSON() {
	if c.result == nil || !c.result.OK() {
		return
	}
	c.result.EnsureTransfer(clock)
	p, d := c.result.Plans()
	out := map[string]any{"p": p, "d": d, "pd": c.result.PD, "settings": c.settings.Query(), "command": c.settings.CLI("pd")}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return
	}
	callJS("download", c.exportName()+".json", "application/json", string(b))
}

// exportName is an export's file name without its extension:
// kvscope-<model>-<view>-<P TP>to<D TP>, so that exports of different
// views and deployments do not overwrite each other.
func (c *Root) exportName() string {
	s := c.settings
	view := s.View
	if view == "" {
		view = "plan"
	}
	model := s.Model
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	slug := func(v string) string {
		b := []byte(v)
		for i, ch := range b {
			if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '.' || ch == '-' || ch == '_') {
				b[i] = '-'
			}
		}
		return string(b)
	}
	pe, de := s.Engines()
	return "kvscope-" + slug(model) + "-" + slug(view) + "-" + strconv.Itoa(max(1, pe.TensorParallelSize)) + "to" + strconv.Itoa(max(1, de.TensorParallelSize))
}

func (c *Root) copyLink() {
	callJS("copyLink", c.settings.Link())
}

// callJS calls a helper of static/assets/kvscope.js when it is loaded.
func callJS(fn string, args ...any) {
	k := app.Window().Get("kvscope")
	if !k.Truthy() {
		return
	}
	k.Call(fn, args...)
}

// Render draws the page.
func (c *Root) Render() app.UI {
	s := c.settings
	cls := "kvscope"
	if s.Dark {
		cls += " dark"
	}
	root := app.Div().ID("kvscope").Class(cls)
	if c.mounted {
		root = root.DataSet("wasm", "ready")
	}
	r := c.result
	var body app.UI = app.P().Class("muted").Text("loading…")
	if r != nil {
		switch s.View {
		case "configure":
			body = c.renderConfigure()
		case "pd":
			body = c.renderPD()
		case "flow":
			body = app.Div().Class("flow-page").Body(c.renderLive(),
				app.H2().Class("flow-title").Text("Configured transfer: the settings' request, computed in this browser"), c.renderFlow())
		case "charts":
			body = c.renderCharts()
		case "check":
			body = c.renderCheck()
		case "tune":
			body = c.renderTune()
		default:
			body = c.renderPlan()
		}
	}
	return root.Body(
		c.renderHeader(),
		app.If(r != nil && r.Err != "", func() app.UI { return app.Div().Class("banner error").Text(userWords(r.Err)) }),
		app.If(len(s.Warnings) > 0, func() app.UI {
			return app.Div().ID("legacy-keys").Class("banner warning").Text("This link is written in an older form, read as it meant: " + strings.Join(s.Warnings, "; ") + ".")
		}),
		app.If(len(s.Unknown) > 0, func() app.UI {
			return app.Div().ID("unknown-keys").Class("banner warning").Text("The link has settings kvscope does not know, ignored: " + strings.Join(s.Unknown, ", "))
		}),
		app.If(c.fetching() != "", func() app.UI { return app.Div().ID("hub-fetching").Class("banner warning").Text(c.fetching()) }),
		app.If(r != nil && len(r.Errors) > 0 && s.View != "configure" && c.fetching() == "", func() app.UI {
			return app.Div().Class("banner error").Body(
				app.Text("Some settings are invalid: "),
				app.A().Href("#").Text("open Configure").OnClick(func(ctx app.Context, e app.Event) {
					e.PreventDefault()
					c.change(ctx, func(s *Settings) { s.View = "configure" })
				}),
				app.Ul().Body(app.Range(errorLines(r.Errors)).Slice(func(i int) app.UI {
					l := errorLines(r.Errors)[i]
					return app.Li().Body(app.Code().Text(l[0]), app.Text(": "+l[1]))
				})),
			)
		}),
		app.If(c.landing, func() app.UI { return c.renderLanding() }),
		app.Main().ID("view").Body(app.P().Class("intro").DataSet("testid", "view-intro").Text(viewIntro(s.View)), body),
		c.renderFooter(),
		app.If(c.help, func() app.UI { return c.renderHelp() }),
	)
}

// renderLive is the live panel, fed by the server's /ws/live.
func (c *Root) renderLive() app.UI {
	if c.live == nil {
		c.live = newLiveSession()
	}
	return &LivePanel{Session: c.live, Dark: c.settings.Dark, Query: c.settings.Query().Encode()}
}

func (c *Root) renderHeader() app.UI {
	s := c.settings
	return app.Header().Class("top").Body(
		app.Div().Class("brand").Body(app.Img().Src("/web/icon.svg").Alt(""), app.Span().Text("kvscope")),
		c.renderDeploymentName(),
		app.Nav().Class("tabs").Body(app.Range(Views).Slice(func(i int) app.UI {
			v := Views[i]
			cls := "tab"
			if v.ID == s.View {
				cls += " active"
			}
			return app.Button().Class(cls).DataSet("view", v.ID).Title("key " + strconv.Itoa(i+1)).Text(v.Title).
				OnClick(func(ctx app.Context, e app.Event) {
					c.change(ctx, func(s *Settings) { s.View = v.ID })
				})
		})),
		app.Div().Class("actions").Body(
			app.Button().Title("copy a link to this view (l)").Text("Link").OnClick(func(ctx app.Context, e app.Event) { c.copyLink() }),
			app.Button().Title("export the plans as JSON (e)").Text("JSON").OnClick(func(ctx app.Context, e app.Event) { c.exportJSON() }),
			app.Button().Title("export the view as PNG").Text("PNG").OnClick(func(ctx app.Context, e app.Event) { callJS("exportView", "png", c.exportName()) }),
			app.Button().Title("export the view as SVG").Text("SVG").OnClick(func(ctx app.Context, e app.Event) { callJS("exportView", "svg", c.exportName()) }),
			app.Button().Title("dark mode (d)").Text("◐").OnClick(func(ctx app.Context, e app.Event) {
				c.change(ctx, func(s *Settings) { s.Dark = !s.Dark })
			}),
			app.Button().Title("keyboard shortcuts (?)").Text("?").OnClick(func(ctx app.Context, e app.Event) { c.help = !c.help }),
		),
	)
}

// renderDeploymentName names what the views show: the model (and
// drafter) and the vLLM profile, with what the profile is.
func (c *Root) renderDeploymentName() app.UI {
	s := c.settings
	m := s.Model
	if m == "custom" {
		m = "a pasted config.json"
	}
	if s.Draft != "" {
		d := s.Draft
		if d == "custom" {
			d = "a pasted drafter"
		}
		m += " + " + d
	}
	return app.Div().Class("deployment-name").Body(
		app.Span().ID("header-model").Class("model").Title(m).Text(m),
		app.Span().ID("profile").Class("profile").Title(c.profileLabel()).Text(profileWords(c.profileName(), c.profileLabel())),
	)
}

// profileWords says what a profile is: a release or the branch.
func profileWords(name, label string) string {
	switch {
	case name == vllm.Branch:
		return name + ": the group-pair branch (" + label + ")"
	case label == "" || label == "vLLM "+name:
		return "vLLM " + name + " release"
	}
	return label
}

// errorLines is the settings' errors as the banner lists them: a message
// that several fields share (a vLLM refusal on both sides) once, after
// all their names.
func errorLines(errs FieldErrors) [][2]string {
	var out [][2]string
	at := map[string]int{}
	for _, k := range sortedKeys(errs) {
		msg := userWords(errs[k])
		if i, ok := at[msg]; ok {
			out[i][0] += ", " + k
			continue
		}
		at[msg] = len(out)
		out = append(out, [2]string{k, msg})
	}
	return out
}

// userWords is an error as the page shows it: without the Go package
// names core prefixes its errors with ("xfer: ", "kvspec: "), which say
// where in kvscope an error arose, not what to change.
func userWords(msg string) string {
	if side, rest, ok := strings.Cut(msg, ": "); ok && (side == "P" || side == "D") {
		return side + ": " + userWords(rest)
	}
	for {
		head, rest, ok := strings.Cut(msg, ": ")
		if !ok || !slices.Contains(corePackages, head) {
			return msg
		}
		msg = rest
	}
}

// corePackages are the names core's errors may start with.
var corePackages = []string{"xfer", "kvspec", "plan", "vlog", "check", "model", "catalog", "oracle", "tune", "vllm", "event", "planflag"}

// renderLanding offers three ways in on a first visit: a model on the
// newest release, the published deployment the page shows, or the user's
// own startup logs.
func (c *Root) renderLanding() app.UI {
	newest := vllm.Newest().Name()
	start := func(id, title, text string, edit func(*Settings)) app.UI {
		return app.Button().Class("start").DataSet("testid", "start-"+id).Body(app.Strong().Text(title), app.Span().Text(text)).
			OnClick(func(ctx app.Context, e app.Event) { c.change(ctx, edit) })
	}
	return app.Section().Class("card landing").DataSet("testid", "landing").Body(
		app.H2().Text("Where do you start?"),
		app.Div().Class("starts").Body(
			start("release", "My model on a release", "vLLM "+newest+" (the newest release kvscope has read), a bundled model or a Hugging Face id, P TP 1 → D TP 2: set it on Configure.",
				func(s *Settings) {
					s.Version, s.Draft, s.DraftJSON, s.View = newest, "", "", "configure"
					s.P, s.D = plan.Engine{TensorParallelSize: 1}, plan.Engine{TensorParallelSize: 2}
				}),
			start("published", "The published P TP 2 → D TP 4 deployment", "Qwen3.6-35B-A3B with its DFlash drafter on the group-pair branch: what this page shows now.",
				func(s *Settings) { s.View = "plan" }),
			start("logs", "Check my logs", "Paste a vLLM startup log, or a P and a D log, and see whether they will transfer and why not.",
				func(s *Settings) { s.View = "check" }),
		),
	)
}

// viewIntro is the sentence each view opens with: what it shows and what
// to look at.
func viewIntro(view string) string {
	switch view {
	case "configure":
		return "The deployment: a model (bundled, a Hugging Face id or a pasted config.json), the vLLM version and each engine's flags. Every other view follows from these settings."
	case "pd":
		return "P and D side by side: why their plans differ, what each plan costs against the TP-invariant plan, the layers that move between groups, and whether the handshake accepts the pair."
	case "flow":
		return "One request's KV moving from P's ranks to D's: each band is a rank pair and group pair, as wide as its bytes; click a layer for its descriptors."
	case "charts":
		return "How the numbers move with a flag: KV cache tokens and descriptors against the block size, groups and padding against --min-kv-cache-group-layers; the current setting is marked."
	case "check":
		return "A vLLM startup log (or a P and a D log) held against kvscope's plan: every figure vLLM printed, logged against predicted."
	case "tune":
		return "A search over engine flags for the plans that cost least: each candidate's capacity, descriptors and the vllm serve line that runs it."
	}
	return "Each engine's KV cache groups: a column per group, a row per slot tensor, coloured by layer kind; PAD cells are slots no layer uses."
}

// profileName is the vLLM profile the current plans follow.
func (c *Root) profileName() string {
	if r := c.result; r != nil && r.PD != nil {
		return r.PD.VLLMVersion
	}
	if c.settings.Version != "" {
		return c.settings.Version
	}
	return vllm.Newest().Name()
}

func (c *Root) profileLabel() string {
	if r := c.result; r != nil && r.PD != nil {
		return r.PD.VLLMProfile
	}
	return ""
}

func (c *Root) renderFooter() app.UI {
	r := c.result
	ms, where := "", "in this browser by kvscope's Go core (WebAssembly), the same code as the CLI"
	if r != nil {
		ms = strconv.FormatFloat(r.Millis, 'f', 2, 64)
	}
	if !c.mounted {
		where = "on the server by kvscope's Go core, the same code the browser runs"
	}
	return app.Footer().Body(
		app.Span().ID("recompute").DataSet("ms", ms).Text("computed in "+ms+" ms "+where+" · "),
		app.Code().Class("cli").Text(c.settings.CLI("pd")),
	)
}

func (c *Root) renderHelp() app.UI {
	keys := [][2]string{{"1 … 7", "switch view"}, {"d", "dark mode"}, {"e", "export the plans as JSON"}, {"l", "copy a link to this view"}, {"?", "this help"}, {"Esc", "close"}}
	return app.Div().Class("overlay").OnClick(func(ctx app.Context, e app.Event) { c.help = false }).Body(
		app.Div().Class("help").Body(
			app.H2().Text("Keyboard shortcuts"),
			app.Table().Body(app.Range(keys).Slice(func(i int) app.UI {
				return app.Tr().Body(app.Td().Body(app.Kbd().Text(keys[i][0])), app.Td().Text(keys[i][1]))
			})),
			app.P().Class("muted").Text("Every setting lives in the URL: copy the address to share this exact view."),
		),
	)
}
