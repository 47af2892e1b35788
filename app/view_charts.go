package app

import (
	"strconv"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// chartSet is the three charts of the charts view, as ECharts option JSON
// written from core's numbers.
type chartSet struct {
	Tokens, Groups, Descs string
}

// blockSizes are the block sizes the charts sweep (hybrid models raise the
// small ones to their aligned size, which the chart shows as a plateau).
var blockSizes = []int{16, 32, 48, 64, 96, 128, 256, 512, 1024}

func computeCharts(r *Result, _ model.Catalog) chartSet {
	s := r.Settings
	pe, de := s.Engines()
	labels := make([]string, len(blockSizes))
	for i, bs := range blockSizes {
		labels[i] = strconv.Itoa(bs)
	}

	// 1. KV cache tokens against --block-size, both sides.
	tokens := func(e plan.Engine) []chartPoint {
		var out []chartPoint
		for _, bs := range blockSizes {
			e.BlockSize = bs
			if p, err := plan.New(r.Model, e); err == nil {
				out = append(out, chartPoint{Value: p.KVCacheTokens})
			} else {
				out = append(out, chartPoint{})
			}
		}
		return out
	}
	l1 := newLineOption("KV cache tokens against --block-size", "30")
	l1.XAxis = []chartAxis{{Name: "block size", Type: "category", Data: labels}}
	l1.YAxis = []chartAxis{{Name: "tokens"}}
	l1.add("P", tokens(pe))
	l1.add("D", tokens(de))

	// 2. Groups and padding against --min-kv-cache-group-layers (P).
	var mins []string
	var groups, padding []chartPoint
	for k := 1; k <= 12; k++ {
		e := pe
		e.MinGroupLayers = k
		e.Selector = plan.PaddingBytes
		mins = append(mins, strconv.Itoa(k))
		if p, err := plan.New(r.Model, e); err == nil {
			groups = append(groups, chartPoint{Value: p.NumGroups})
			padding = append(padding, chartPoint{Value: p.PaddingSlots})
		} else {
			groups = append(groups, chartPoint{})
			padding = append(padding, chartPoint{})
		}
	}
	l2 := newLineOption("P: groups and padding slots against --min-kv-cache-group-layers (padding-bytes)", "30")
	l2.XAxis = []chartAxis{{Name: "min layers", Type: "category", Data: mins}}
	l2.YAxis = []chartAxis{{}}
	l2.add("groups", groups)
	l2.add("padding slots", padding)

	// 3. Descriptors per request against D's --block-size (P fixed).
	var descs, merged []chartPoint
	for _, bs := range blockSizes {
		e := de
		e.BlockSize = bs
		n, m := descriptorCount(r, pe, e)
		descs = append(descs, n)
		merged = append(merged, m)
	}
	l3 := newLineOption("Descriptors per request against D's --block-size", "30")
	l3.XAxis = []chartAxis{{Name: "D block size", Type: "category", Data: labels}}
	l3.YAxis = []chartAxis{{Name: "descriptors", Type: "log"}}
	l3.add("submitted", descs)
	l3.add("after merging", merged)
	return chartSet{Tokens: l1.JSON(), Groups: l2.JSON(), Descs: l3.JSON()}
}

// descriptorCount is the descriptors of the current request between two
// engines, before and after merging (none where it cannot be computed).
func descriptorCount(r *Result, pe, de plan.Engine) (chartPoint, chartPoint) {
	s := r.Settings
	conn, err := xfer.ParseConnector(s.Connector)
	if err != nil {
		return chartPoint{}, chartPoint{}
	}
	x, err := xfer.Run(xfer.Setup{Model: r.Model, P: pe, D: de, Connector: conn, Plans: xfer.PlanChoice(s.Plans),
		Request: xfer.Request{PromptTokens: s.Prompt, PrefixHitTokens: s.Hit}})
	if err != nil || x.Transfer == nil || x.Transfer.Rejection != nil {
		return chartPoint{}, chartPoint{}
	}
	return chartPoint{Value: x.Transfer.Descs}, chartPoint{Value: x.Transfer.Merged}
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
		app.P().Class("muted").Text("Options written in Go from core's numbers; drawn by ECharts served from this server, in a worker of the page."),
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
