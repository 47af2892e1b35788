package app

import (
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vlog"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// checkState is the Check view's input and outcome. The logs stay in the
// page (they are too large for a link); the plan they imply goes to the
// URL when the user opens it in another view.
type checkState struct {
	// logs are P's log (or the one log checked alone) and D's.
	logs   [2]string
	model  string // a bundled model to plan instead of the logs' ("" = the logs')
	prompt int    // the pair's request, in prompt tokens (0: kvscope pd's default)
	result *check.Result
	pair   *pairCheck // both logs given: their preflight
	err    string
}

// defaultCheckPrompt is kvscope pd's --prompt-tokens default: two logs
// give the verdict kvscope pd --p-log --d-log gives without flags.
const defaultCheckPrompt = 4096

// promptTokens is the pair's request size.
func (st *checkState) promptTokens() int {
	if st.prompt > 0 {
		return st.prompt
	}
	return defaultCheckPrompt
}

// pairCheck is two logs checked and preflighted as kvscope pd --p-log
// --d-log does: each side planned from its log (check.RunPair), the pair
// prepared over NIXL, the request computed, the verdict in a sentence.
type pairCheck struct {
	*check.Pair
	PD        *xfer.PD
	Transfer  *xfer.Transfer
	Preflight *xfer.Preflight
}

// runCheck parses and checks the pasted logs with the same core as kvscope
// check (one log) and kvscope pd --p-log --d-log (two).
func (c *Root) runCheck() {
	st := &c.check
	st.result, st.pair, st.err = nil, nil, ""
	var ins [2]check.Input
	sides := [2]string{"P", "D"}
	given := 0
	for i, text := range st.logs {
		if strings.TrimSpace(text) == "" {
			continue
		}
		l, err := vlog.Parse(text)
		if err != nil {
			st.err = sides[i] + "'s log: " + err.Error()
			return
		}
		ins[i] = check.Input{Log: l, Catalog: c.Catalog}
		given |= 1 << i
	}
	if given == 0 {
		return
	}
	if st.model != "" {
		m, err := loadModel(c.Catalog, st.model, "")
		if err != nil {
			st.err = "model: " + err.Error()
			return
		}
		ins[0].Model, ins[1].Model = m, m
	}
	var err error
	switch given {
	case 1:
		st.result, err = check.Run(ins[0])
	case 2:
		if st.result, err = check.Run(ins[1]); err != nil {
			err = &check.SideError{Side: "D", Err: err}
		}
	default:
		st.pair, err = checkPair(ins[0], ins[1], st.promptTokens())
	}
	if err != nil {
		st.result, st.pair, st.err = nil, nil, err.Error()
	}
}

// checkPair is kvscope pd --p-log --d-log's path: the pair each log
// implies, over NIXL with the plans vLLM would choose, and the preflight
// of one request of prompt tokens.
func checkPair(p, d check.Input, prompt int) (*pairCheck, error) {
	pair, err := check.RunPair(p, d)
	if err != nil {
		return nil, err
	}
	conn, err := xfer.ParseConnector("nixl")
	if err != nil {
		return nil, err
	}
	s := xfer.Setup{Model: pair.Model, P: pair.Engines[0], D: pair.Engines[1], Connector: conn, Plans: xfer.AutoPlans, Layout: xfer.SplitKV,
		Request: xfer.Request{PromptTokens: prompt}}
	pd, err := xfer.Prepare(s)
	if err != nil {
		return nil, err
	}
	t, err := pd.Compute(s.Request, false)
	if err != nil {
		return nil, err
	}
	return &pairCheck{Pair: pair, PD: pd, Transfer: t, Preflight: pd.PreflightOf(t)}, nil
}

// checkedModel is the model name and draft a checked log implies, as the
// other views take them.
func (c *Root) checkedModel(res *check.Result) (name, draft string) {
	name = res.Model
	if c.check.model != "" {
		name = c.check.model
	}
	if sp := res.Setup.Spec; sp != nil && sp.UsesMTP() {
		draft = "mtp"
	}
	if n, _, err := c.Catalog.Lookup(name); err == nil {
		name = n
	}
	return name, draft
}

// loadCheckedPlan shows the plan the checked log implies in the other
// views: its model, version and engine settings on both sides.
func (c *Root) loadCheckedPlan(ctx app.Context) {
	res := c.check.result
	if res == nil {
		return
	}
	// The engine the log implies, its memory as check's kvscope plan line
	// writes it (the logged GiB, to the byte).
	eng := res.Setup.Engine
	eng.VLLMVersion = ""
	switch {
	case res.Setup.MemBytes > 0: // the log's arguments state it to the byte
		eng.KVCacheMemoryBytes = res.Setup.MemBytes
	case res.Setup.HasMem && res.Setup.MemGiB > 0:
		eng.KVCacheMemoryBytes, _ = plan.ParseBytes(strconv.FormatFloat(res.Setup.MemGiB, 'f', 2, 64) + "GiB")
	}
	name, draft := c.checkedModel(res)
	c.change(ctx, func(s *Settings) {
		s.Model, s.Config, s.Draft, s.DraftJSON = name, "", draft, ""
		s.Version, s.P, s.D, s.View = res.Profile, eng, eng, "plan"
	})
}

// openPair shows the checked pair in view.
func (c *Root) openPair(ctx app.Context, view string) {
	if edit := c.pairEdit(view); edit != nil {
		c.change(ctx, edit)
	}
}

// pairEdit is the settings edit that shows the checked pair in view: the
// model, P's version, each side's engine as its log implies it (P and D
// apart) and the request; nil without a pair.
func (c *Root) pairEdit(view string) func(*Settings) {
	pc := c.check.pair
	if pc == nil {
		return nil
	}
	name, draft := c.checkedModel(pc.P)
	pe, de := pc.Engines[0], pc.Engines[1]
	pe.VLLMVersion, de.VLLMVersion = "", ""
	prompt := c.check.promptTokens()
	return func(s *Settings) {
		s.Model, s.Config, s.Draft, s.DraftJSON = name, "", draft, ""
		s.Version, s.P, s.D, s.View = pc.P.Profile, pe, de, view
		s.Connector, s.Plans, s.Layout, s.Prompt, s.Hit = "nixl", "auto", "split", prompt, 0
	}
}

func (c *Root) renderCheck() app.UI {
	st := &c.check
	models := append([]string{""}, c.Catalog.Names()...)
	return app.Div().Class("check").Body(
		app.Section().Class("card").Body(
			app.H2().Text("Check vLLM startup logs"),
			app.P().Class("muted").Text("Paste, drop or pick an engine's startup log, prefixes and colours included. kvscope plans what the log's engine was asked for, with its vLLM version's profile and the memory it logged, and compares every figure vLLM printed. Give D's log too and kvscope preflights the pair, as kvscope pd --p-log --d-log does."),
			app.Div().Class("check-slots").Body(
				c.logSlot(0, "check-log", "P's log, or the one log to check"),
				c.logSlot(1, "check-log-d", "D's log (for a P/D pair)"),
			),
			app.Label().Body(app.Text("model "), app.Select().ID("check-model").Body(app.Range(models).Slice(func(i int) app.UI {
				label := models[i]
				if label == "" {
					label = "the log's model"
				}
				return app.Option().Value(models[i]).Text(label).Selected(models[i] == st.model)
			})).OnChange(func(ctx app.Context, e app.Event) {
				st.model = ctx.JSSrc().Get("value").String()
				c.runCheck()
				ctx.Update()
			})),
			app.Label().Body(app.Text(" pair's prompt tokens "), app.Input().ID("check-prompt").Type("text").Attr("inputmode", "numeric").
				Value(strconv.Itoa(st.promptTokens())).OnChange(func(ctx app.Context, e app.Event) {
				raw := strings.TrimSpace(ctx.JSSrc().Get("value").String())
				n, err := strconv.Atoi(raw)
				if err != nil || n <= 0 {
					st.err = "prompt tokens: " + strconv.Quote(raw) + " is not a positive integer"
				} else {
					st.prompt = n
					c.runCheck()
				}
				ctx.Update()
			})),
		),
		app.If(st.err != "", func() app.UI { return app.Div().ID("check-error").Class("banner error").Text(st.err) }),
		app.If(st.pair != nil, func() app.UI { return c.renderPair(st.pair) }),
		app.If(st.result != nil, func() app.UI { return c.renderCheckResult(st.result, "check-result", "") }),
	)
}

// logSlot is one side's log: pasted, dropped or picked as a file.
func (c *Root) logSlot(i int, id, label string) app.UI {
	st := &c.check
	set := func(ctx app.Context, text string) {
		st.logs[i] = text
		c.runCheck()
		ctx.Update()
	}
	return app.Div().Class("check-slot").Body(
		app.Label().For(id).Text(label),
		textDrop(id, "paste or drop a vLLM startup log", st.logs[i], set),
		app.Input().ID(id+"-file").Type("file").Title("pick a log file").OnChange(func(ctx app.Context, e app.Event) {
			readText(ctx, ctx.JSSrc().Get("files"), set)
		}),
	)
}

// renderPair is a pair's preflight: the verdict in a sentence, each side's
// check, the handshake's checks and the values each side brings.
func (c *Root) renderPair(pc *pairCheck) app.UI {
	pf := pc.Preflight
	cmd := "kvscope pd --p-log P.log --d-log D.log --prompt-tokens " + strconv.Itoa(c.check.promptTokens())
	if c.check.model != "" {
		cmd += " --model " + c.check.model
	}
	var t xfer.Transfer
	if pc.Transfer != nil {
		t = *pc.Transfer
	}
	return app.Div().Body(
		app.Section().Class("card").ID("pair-verdict").DataSet("verdict", pf.Verdict).DataSet("descs", pf.Descs).DataSet("bytes", pf.Bytes).
			DataSet("rank-pairs", pf.RankPairs).DataSet("transfer-descs", t.Descs).DataSet("transfer-bytes", t.Bytes).Body(
			app.H2().Body(app.Text("P/D preflight · "+pc.Model.Name+" · "), app.Span().Class("verdict "+pf.Verdict).Text(pf.Verdict)),
			app.P().ID("pair-sentence").Text(pf.Sentence),
			app.If(pc.P.Profile != pc.D.Profile, func() app.UI {
				return app.P().Class("muted").Text("P vs D and Descriptor flow plan both engines with P's profile, " + pc.P.Profile + " (D's log: " + pc.D.Profile + ").")
			}),
			app.P().Body(app.Code().Class("cli").Text(cmd)),
			app.Button().ID("pair-open-pd").Text("open in P vs D").OnClick(func(ctx app.Context, e app.Event) { c.openPair(ctx, "pd") }),
			app.Button().ID("pair-open-flow").Text("open in Descriptor flow").OnClick(func(ctx app.Context, e app.Event) { c.openPair(ctx, "flow") }),
		),
		app.Div().Class("check-sides").Body(c.renderCheckResult(pc.P, "check-result-p", "P"), c.renderCheckResult(pc.D, "check-result-d", "D")),
		handshakeCard(pc.Transfer, pc.PD.Note, ""),
		app.Section().Class("card").ID("pair-facets").Body(
			app.H2().Text("What each side brings to the handshake"),
			app.Table().Class("compare").Body(
				app.THead().Body(app.Tr().Body(app.Th().Text("value"), app.Th().Text("P"), app.Th().Text("D"), app.Th().Text(""), app.Th().Text(""))),
				app.TBody().Body(app.Range(pf.Facets).Slice(func(i int) app.UI {
					f := pf.Facets[i]
					mark, cls := "same", "ok"
					if !f.Same {
						// A free value is each engine's own: no problem.
						mark, cls = "differs ("+f.Rule+")", "differs "+f.Rule
					}
					return app.Tr().Class(cls).DataSet("name", f.Name).Body(app.Td().Text(f.Name), app.Td().Text(f.P), app.Td().Text(f.D),
						app.Td().Text(mark), app.Td().Class("muted").Text(f.Note))
				})),
			),
		),
	)
}

// renderCheckResult is one log's check; side names it in a pair ("" for
// the one log, which can load its plan into the other views).
func (c *Root) renderCheckResult(r *check.Result, id, side string) app.UI {
	title := "vLLM " + orDash(r.VLLMVersion) + " · " + r.Model + " · "
	if side != "" {
		title = side + "'s log: " + title
	}
	return app.Section().Class("card").ID(id).DataSet("verdict", r.Verdict).Body(
		app.H2().Body(app.Text(title), app.Span().Class("verdict "+r.Verdict).Text(r.Verdict)),
		app.P().Class("muted").Text("profile "+r.Profile+": "+r.ProfileLabel),
		app.Table().Class("check-lines").Body(
			app.THead().Body(app.Tr().Body(app.Th().Text("line"), app.Th().Text("figure"), app.Th().Text("logged"), app.Th().Text("predicted"), app.Th().Text(""))),
			app.TBody().Body(app.Range(r.Lines).Slice(func(i int) app.UI {
				l := r.Lines[i]
				mark, cls := "ok", "ok"
				if !l.Match {
					mark, cls = "differs", "differs"
				}
				at := "—"
				if l.Line > 0 {
					at = strconv.Itoa(l.Line)
				}
				return app.Tr().Class(cls).DataSet("name", l.Name).Body(app.Td().Text(at), app.Td().Body(app.Code().Text(l.Name)),
					app.Td().Text(l.Logged), app.Td().Text(l.Predicted), app.Td().Title(l.Tolerance).Text(mark))
			})),
		),
		app.Ul().Body(
			app.Range(r.Explain).Slice(func(i int) app.UI { return app.Li().Text("explain: " + r.Explain[i]) }),
			app.Range(r.Missing).Slice(func(i int) app.UI { return app.Li().Class("missing").Text("missing: " + r.Missing[i]) }),
			app.Range(r.Assumed).Slice(func(i int) app.UI {
				a := r.Assumed[i]
				return app.Li().Class("assumed").DataSet("flag", a.Flag).Text("assumed: " + a.Flag + " " + a.Value + " (" + a.Why + ")")
			}),
			app.Range(r.Notes).Slice(func(i int) app.UI { return app.Li().Class("muted").Text("note: " + r.Notes[i]) }),
		),
		app.P().Body(app.Code().Class("cli").Text("kvscope plan --model "+r.Model+" "+strings.Join(r.Flags, " "))),
		app.If(side == "", func() app.UI {
			return app.Button().ID("check-load").Text("Load this plan into the other views").OnClick(func(ctx app.Context, e app.Event) { c.loadCheckedPlan(ctx) })
		}),
	)
}

func orDash(s string) string {
	if s == "" {
		return "(version not in the log)"
	}
	return s
}
