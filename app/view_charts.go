package app

import (
	"slices"
	"strconv"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// chartSet is the three charts of the charts view, as ECharts option JSON
// built from core's numbers (echart.go).
type chartSet struct {
	Tokens, Groups, Descs string
}

// blockSizes are the block sizes the charts sweep (hybrid models raise the
// small ones to their aligned size, which the chart shows as a plateau),
// on a log2 axis: they span six doublings.
var blockSizes = []int{16, 32, 48, 64, 96, 128, 256, 512, 1024}

// sweep is blockSizes with the current setting in its place.
func sweep(current int) []int {
	out := append([]int(nil), blockSizes...)
	if current > 0 && !slices.Contains(out, current) {
		out = append(out, current)
		slices.Sort(out)
	}
	return out
}

// logAxis is a log2 axis over the block sizes.
func logAxis(name string) echartAxis {
	return echartAxis{Name: name, NameLocation: "middle", NameGap: 28, Type: "log", LogBase: 2, Min: 16, Max: 1024}
}

func computeCharts(r *Result, _ model.Catalog) chartSet {
	s := r.Settings
	pe, de := s.Engines()
	inv := r.PD.Invariant
	pNow, dNow := inv.PIndependent, inv.DIndependent
	legend := echartLegend{Show: true, Top: "30"}
	tooltip := echartTooltip{Show: true, Trigger: "axis"}

	// 1. KV cache tokens against --block-size, both sides, the current
	// block sizes marked.
	tokens := func(name string, e plan.Engine, now *plan.Plan) echartSeries {
		var data [][2]any
		for _, bs := range sweep(now.BlockSize) {
			e.BlockSize = bs
			var y any
			if p, err := plan.New(r.Model, e); err == nil {
				y = p.KVCacheTokens
			}
			data = append(data, [2]any{bs, y})
		}
		ser := lineSeries(name, data, 0, 0)
		ser.MarkLine = markAt(now.BlockSize, name+" now: "+strconv.Itoa(now.BlockSize))
		return ser
	}
	c1 := echartOption{Title: echartTitle{Text: "KV cache tokens against --block-size", Subtext: "each engine on its own; the current block size marked"}, Tooltip: tooltip, Legend: legend,
		XAxis:  []echartAxis{logAxis("block size (tokens, log scale)")},
		YAxis:  []echartAxis{{Name: "KV cache tokens", Type: "value"}},
		Series: []echartSeries{tokens("P", pe, pNow), tokens("D", de, dNow)}}

	// 2. Groups and padding slots against --min-kv-cache-group-layers,
	// both sides (the padding-bytes selector).
	var series2 []echartSeries
	for _, side := range []struct {
		name string
		e    plan.Engine
	}{{"P", pe}, {"D", de}} {
		var groups, padding [][2]any
		for k := 1; k <= 12; k++ {
			e := side.e
			e.MinGroupLayers, e.Selector = k, plan.PaddingBytes
			var g, pad any
			if p, err := plan.New(r.Model, e); err == nil {
				g, pad = p.NumGroups, p.PaddingSlots
			}
			groups, padding = append(groups, [2]any{k, g}), append(padding, [2]any{k, pad})
		}
		gs, ps := lineSeries(side.name+" groups", groups, 0, 0), lineSeries(side.name+" padding slots", padding, 0, 0)
		ps.LineStyle = &echartLineStyle{Type: "dashed"}
		if side.name == "D" {
			gs.Symbol, ps.Symbol = "triangle", "triangle"
		}
		series2 = append(series2, gs, ps)
	}
	if pNow.Engine.MinGroupLayers > 0 {
		series2[0].MarkLine = markAt(pNow.Engine.MinGroupLayers, "now: "+strconv.Itoa(pNow.Engine.MinGroupLayers))
	}
	c2 := echartOption{Title: echartTitle{Text: "Groups and padding slots against --min-kv-cache-group-layers", Subtext: "the padding-bytes selector; P circles, D triangles, padding dashed"}, Tooltip: tooltip, Legend: legend,
		XAxis:  []echartAxis{{Name: "--min-kv-cache-group-layers", NameLocation: "middle", NameGap: 28, Type: "value", Min: 1, Max: 12, Interval: 1}},
		YAxis:  []echartAxis{{Name: "count", Type: "value", MinInterval: 1}},
		Series: series2}

	// 3. Descriptors per request against D's --block-size (P fixed): as
	// submitted and after NIXL merges contiguous runs; one line when
	// merging changes nothing.
	var descs, merged [][2]any
	same := true
	for _, bs := range sweep(dNow.BlockSize) {
		e := de
		e.BlockSize = bs
		n, m := descriptorCount(r, pe, e)
		descs, merged = append(descs, [2]any{bs, n}), append(merged, [2]any{bs, m})
		same = same && n == m
	}
	sub := lineSeries("submitted", descs, 0, 0)
	sub.MarkLine = markAt(dNow.BlockSize, "D now: "+strconv.Itoa(dNow.BlockSize))
	series3 := []echartSeries{sub}
	subtext := "after merging: dashed"
	if same {
		series3[0].Name, subtext = "submitted = after merging", "NIXL's merging of contiguous runs changes no count here"
	} else {
		ms := lineSeries("after merging", merged, 0, 0)
		ms.LineStyle, ms.Symbol = &echartLineStyle{Type: "dashed"}, "diamond"
		series3 = append(series3, ms)
	}
	c3 := echartOption{Title: echartTitle{Text: "Descriptors per request against D's --block-size", Subtext: subtext}, Tooltip: tooltip, Legend: legend,
		XAxis:  []echartAxis{logAxis("D block size (tokens, log scale)")},
		YAxis:  []echartAxis{{Name: "descriptors (log scale)", Type: "log"}},
		Series: series3}
	return chartSet{Tokens: c1.JSON(), Groups: c2.JSON(), Descs: c3.JSON()}
}

// descriptorCount is the descriptors of the current request between two
// engines, before and after merging (nil where it cannot be computed).
func descriptorCount(r *Result, pe, de plan.Engine) (any, any) {
	s := r.Settings
	conn, err := xfer.ParseConnector(s.Connector)
	if err != nil {
		return nil, nil
	}
	x, err := xfer.Run(xfer.Setup{Model: r.Model, P: pe, D: de, Connector: conn, Plans: xfer.PlanChoice(s.Plans),
		Request: xfer.Request{PromptTokens: s.Prompt, PrefixHitTokens: s.Hit}})
	if err != nil || x.Transfer == nil || x.Transfer.Rejection != nil {
		return nil, nil
	}
	return x.Transfer.Descs, x.Transfer.Merged
}

func (c *Root) renderCharts() app.UI {
	if !c.result.OK() {
		return app.P().Class("muted").Text("Fix the settings on the Configure view to see the charts.")
	}
	if c.charts == nil {
		return app.P().Class("muted").Text("computing the charts…")
	}
	// The charts draw in the chart worker: ECharts' first chart of a page
	// holds a thread for half a second and more.
	dark := c.settings.Dark
	return app.Div().Class("charts-view").Body(
		&Chart{ID: "chart-tokens", Option: c.charts.Tokens, Dark: dark, Offscreen: true},
		&Chart{ID: "chart-groups", Option: c.charts.Groups, Dark: dark, Offscreen: true},
		&Chart{ID: "chart-descs", Option: c.charts.Descs, Dark: dark, Offscreen: true},
		app.P().Class("muted").Text("Options built in Go from core's numbers; drawn by ECharts served from this server, in a worker of the page."),
	)
}

// Chart hands one ECharts option (JSON) to the ECharts bundle.
type Chart struct {
	app.Compo
	ID     string
	Option string
	Dark   bool
	// Later draws it in a task of its own, after the browser has laid out
	// what was drawn with it (a chart of many points next to a new table:
	// two shorter waits for input, not one long one).
	Later bool
	// Merge draws an option into the chart drawn before (ECharts keeps
	// its title, axes, legend and tooltip and replaces the series' data)
	// instead of drawing it afresh: for options of one shape.
	Merge bool
	// Offscreen draws it in the chart worker, on an OffscreenCanvas (see
	// kvscope.chartOff), where the browser has one: the page's thread does
	// not wait for the drawing. Later is then moot.
	Offscreen bool
	// Held, when set, names an option the page holds (kvscope.hold), drawn
	// instead of Option.
	Held string
}

// OnMount draws the chart once its element exists.
func (c *Chart) OnMount(ctx app.Context) { ctx.Defer(func(app.Context) { c.draw() }) }

// OnUpdate redraws the chart when its option or theme changes.
func (c *Chart) OnUpdate(ctx app.Context) { ctx.Defer(func(app.Context) { c.draw() }) }

// draw asks the page to draw the chart; the page skips an option the
// chart was last asked to draw (with the same theme and merging).
func (c *Chart) draw() {
	fn := "chart"
	switch {
	case c.Offscreen:
		fn = "chartOff"
	case c.Later:
		fn = "chartLater"
	}
	callJS(fn, c.ID, c.Option, c.Dark, c.Merge, c.Held)
}

// Render is the chart's container.
func (c *Chart) Render() app.UI {
	return app.Div().ID(c.ID).Class("chart").DataSet("testid", c.ID)
}
