package app

import (
	"strconv"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vlog"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// checkState is the Check view's input and outcome. The log stays in the
// page (it is too large for a link); the plan it implies goes to the URL
// when the user loads it.
type checkState struct {
	log    string
	model  string // a bundled model to plan instead of the log's ("" = the log's)
	result *check.Result
	err    string
}

// runCheck parses and checks the pasted log with the same core as kvscope
// check.
func (c *Root) runCheck() {
	st := &c.check
	st.result, st.err = nil, ""
	if st.log == "" {
		return
	}
	l, err := vlog.Parse(st.log)
	if err != nil {
		st.err = err.Error()
		return
	}
	in := check.Input{Log: l, Catalog: c.Catalog}
	if st.model != "" {
		m, err := loadModel(c.Catalog, st.model, "")
		if err != nil {
			st.err = err.Error()
			return
		}
		in.Model = m
	}
	res, err := check.Run(in)
	if err != nil {
		st.err = err.Error()
		return
	}
	st.result = res
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
	if res.Setup.HasMem && res.Setup.MemGiB > 0 {
		eng.KVCacheMemoryBytes, _ = plan.ParseBytes(strconv.FormatFloat(res.Setup.MemGiB, 'f', 2, 64) + "GiB")
	}
	name := res.Model
	draft := ""
	if sp := res.Setup.Spec; sp != nil && sp.UsesMTP() {
		draft = "mtp"
	}
	if n, _, err := c.Catalog.Lookup(name); err == nil {
		name = n
	}
	c.change(ctx, func(s *Settings) {
		s.Model, s.Config, s.Draft, s.DraftJSON = name, "", draft, ""
		s.Version, s.P, s.D, s.View = res.Profile, eng, eng, "plan"
	})
}

func (c *Root) renderCheck() app.UI {
	st := &c.check
	models := append([]string{""}, c.Catalog.Names()...)
	return app.Div().Class("check").Body(
		app.Section().Class("card").Body(
			app.H2().Text("Check a vLLM startup log"),
			app.P().Class("muted").Text("Paste or drop an engine's startup log, prefixes and colours included. kvscope plans what the log's engine was asked for, with its vLLM version's profile and the memory it logged, and compares every figure vLLM printed."),
			textDrop("check-log", "paste or drop a vLLM startup log", st.log, func(ctx app.Context, text string) {
				st.log = text
				c.runCheck()
				ctx.Update()
			}),
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
		),
		app.If(st.err != "", func() app.UI { return app.Div().ID("check-error").Class("banner error").Text(st.err) }),
		app.If(st.result != nil, func() app.UI { return c.renderCheckResult(st.result) }),
	)
}

func (c *Root) renderCheckResult(r *check.Result) app.UI {
	return app.Section().Class("card").ID("check-result").DataSet("verdict", r.Verdict).Body(
		app.H2().Body(app.Text("vLLM "+orDash(r.VLLMVersion)+" · "+r.Model+" · "), app.Span().Class("verdict "+r.Verdict).Text(r.Verdict)),
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
		app.P().Body(app.Code().Class("cli").Text("kvscope plan --model "+r.Model+" "+joinFlags(r.Flags))),
		app.Button().ID("check-load").Text("Load this plan into the other views").OnClick(func(ctx app.Context, e app.Event) { c.loadCheckedPlan(ctx) }),
	)
}

func orDash(s string) string {
	if s == "" {
		return "(version not in the log)"
	}
	return s
}

func joinFlags(fs []string) string {
	out := ""
	for i, f := range fs {
		if i > 0 {
			out += " "
		}
		out += f
	}
	return out
}
