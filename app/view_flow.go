package app

import (
	"fmt"
	"html"
	"sort"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// band is every descriptor between one P rank and one D rank for one
// (P group, D group) pair.
type band struct {
	p, d, pg, dg int
	kind         model.Kind
	descs        int
	bytes        int64
	first        xfer.Pair
	layers       map[string]bool
}

// bandsOf aggregates a transfer's pairs into bands, in a stable order.
func bandsOf(t *xfer.Transfer, kindOf func(string) model.Kind) []*band {
	idx := map[[4]int]*band{}
	var out []*band
	for _, rp := range t.RankPairs {
		for _, p := range rp.Pairs {
			k := [4]int{rp.P, rp.D, p.PGroup, p.DGroup}
			b, ok := idx[k]
			if !ok {
				b = &band{p: rp.P, d: rp.D, pg: p.PGroup, dg: p.DGroup, kind: kindOf(p.Layer), first: p, layers: map[string]bool{}}
				idx[k] = b
				out = append(out, b)
			}
			b.descs++
			b.bytes += p.Len
			if p.Layer != "" {
				b.layers[p.Layer] = true
			}
		}
	}
	return out
}

// someNames is a set's first n names in order, with "…" when there are
// more.
func someNames[V any](set map[string]V, n int) []string {
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) > n {
		names = append(names[:n], "…")
	}
	return names
}

// layerTotal is one layer's share of a transfer.
type layerTotal struct {
	name  string
	kind  model.Kind
	descs int
	bytes int64
}

func (c *Root) renderFlow() app.UI {
	r := c.result
	if !r.OK() {
		return app.P().Class("muted").Text("Fix the settings on the Configure view to see the descriptor flow.")
	}
	t := r.PD.Transfer
	if t == nil {
		return app.P().Text(noteOr(r.PD.Note, "computing the transfer…"))
	}
	kinds := map[string]model.Kind{}
	for _, l := range r.Model.Layers {
		kinds[l.Name] = l.Kind
	}
	kindOf := func(name string) model.Kind { return kinds[name] }
	return app.Div().Class("flow-view").Body(
		c.renderVerdict(),
		app.P().Class("muted").Text(fmt.Sprintf("%s of %s prompt tokens (D prefix hit %s) by %s: %s. %s descriptors (%s after merging contiguous runs), %s.",
			t.Mode, commas(int64(t.Request.PromptTokens)), commas(int64(t.Request.PrefixHitTokens)), t.Path, t.PathReason,
			commas(int64(t.Descs)), commas(int64(t.Merged)), humanBytes(t.Bytes))),
		app.If(t.Rejection == nil, func() app.UI {
			return app.Div().Class("flow-grid").Body(
				renderFlowSVG(t, bandsOf(t, kindOf)),
				c.renderLayerList(t, kindOf),
			)
		}),
		app.If(c.layer != "", func() app.UI { return c.renderLayerDescs(t) }),
	)
}

func (c *Root) renderVerdict() app.UI {
	r := c.result
	switch {
	case r.Oracle != nil && r.Oracle.Verdict == oracle.Exact:
		return app.Div().Class("verdict exact").DataSet("testid", "verdict").DataSet("value", "exact").
			Text(fmt.Sprintf("Oracle: exact. %s pairs replayed on bytes; every needed head and token on D holds P's bytes and nothing else was written (%s read back).",
				commas(int64(r.Oracle.Pairs)), humanBytes(r.Oracle.Checked)))
	case r.Oracle != nil && r.Oracle.Verdict == oracle.Rejected:
		return app.Div().Class("verdict rejected").DataSet("testid", "verdict").DataSet("value", "rejected").Text("Rejected: " + r.Oracle.Reason)
	case r.Oracle != nil:
		return app.Div().Class("verdict wrong").DataSet("testid", "verdict").DataSet("value", "wrong").Text("WRONG: " + r.Oracle.Mismatch.String())
	case r.OracleNote != "":
		return app.Div().Class("verdict note").DataSet("testid", "verdict").DataSet("value", "skipped").Text("Oracle not run: " + r.OracleNote)
	}
	return app.Div().Class("verdict pending").DataSet("testid", "verdict").DataSet("value", "pending").Text("Oracle: checking…")
}

// renderFlowSVG draws P ranks on the left, D ranks on the right, their
// regions, and a band per rank pair and group pair, colored by kind and as
// wide as its bytes. It is SVG markup (go-app builds HTML elements, and SVG
// needs its own namespace), with a tooltip on every region and band.
func renderFlowSVG(t *xfer.Transfer, bands []*band) app.UI {
	return app.Raw(flowSVG(t, bands))
}

func flowSVG(t *xfer.Transfer, bands []*band) string {
	const width, boxW, gap, top = 900.0, 130.0, 18.0, 30.0
	// A rank's box grows with its regions up to a cap: a model of many
	// layers (hundreds of regions) would otherwise stretch the drawing
	// thousands of pixels tall.
	regionH := func(n int) float64 { return min(max(80, float64(n)*7), 260) }
	pH, dH := regionH(len(t.PRegs[0].Regions)), regionH(len(t.DRegs[0].Regions))
	height := top + max(float64(len(t.PRegs))*(pH+gap), float64(len(t.DRegs))*(dH+gap)) + 10
	var maxBytes int64
	for _, b := range bands {
		maxBytes = max(maxBytes, b.bytes)
	}
	y := func(rank int, h float64, region, regions int) float64 {
		return top + float64(rank)*(h+gap) + (float64(region)+0.5)*h/float64(regions)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg id="flow-svg" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" class="flow">`, width, height)
	box := func(x float64, rank int, h float64, label string, regs []xfer.Region) {
		y0 := top + float64(rank)*(h+gap)
		// Presentation attributes give an exported SVG or PNG (which has no
		// stylesheet) the page's light colours; the page's CSS overrides them.
		fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" rx="6" class="rank" fill="#f8fafc" stroke="#64748b"/>`, x, y0, boxW, h)
		for i, r := range regs {
			ry := y0 + float64(i)*h/float64(len(regs))
			fmt.Fprintf(&sb, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.1f" class="region" fill="#e2e8f0"><title>%s</title></rect>`,
				x+4, ry+1, boxW-8, max(1, h/float64(len(regs))-2),
				html.EscapeString(fmt.Sprintf("%s region %d: base %#x, block_len %s B, %s blocks", label, i, r.Base, commas(r.BlockLen), commas(r.NumBlocks))))
		}
		fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" class="rank-label" fill="#0f172a" text-anchor="middle" font-size="12">%s · %s</text>`,
			x+boxW/2, y0-6, html.EscapeString(label), plural(len(regs), "region"))
	}
	for r, reg := range t.PRegs {
		box(10, r, pH, "P rank "+strconv.Itoa(r), reg.Regions)
	}
	for r, reg := range t.DRegs {
		box(width-10-boxW, r, dH, "D rank "+strconv.Itoa(r), reg.Regions)
	}
	x1, x2 := 10+boxW, width-10-boxW
	pGroups, dGroups := t.PRegs[0].Plan().NumGroups, t.DRegs[0].Plan().NumGroups
	for _, b := range bands {
		// Bands leave P at the height of their P group and reach D at the
		// height of their D group, so group pairs fan out.
		y1 := y(b.p, pH, b.pg, pGroups)
		y2 := y(b.d, dH, b.dg, dGroups)
		w := 1.5
		if maxBytes > 0 {
			w += 16 * float64(b.bytes) / float64(maxBytes)
		}
		mid := (x1 + x2) / 2
		names := someNames(b.layers, 6)
		title := fmt.Sprintf("P%d → D%d · P g%d → D g%d (%s): %d layers %v · %s descriptors · %s · first r%d+%#x → r%d+%#x",
			b.p, b.d, b.pg, b.dg, b.kind, len(b.layers), names, commas(int64(b.descs)), humanBytes(b.bytes),
			b.first.Src.Region, b.first.Src.Offset, b.first.Dst.Region, b.first.Dst.Offset)
		fmt.Fprintf(&sb, `<path d="M %.1f %.1f C %.1f %.1f, %.1f %.1f, %.1f %.1f" class="band" stroke="%s" stroke-width="%.1f" data-p="%d" data-d="%d" data-pg="%d" data-dg="%d" data-bytes="%d"><title>%s</title></path>`,
			x1, y1, mid, y1, mid, y2, x2, y2, kindColor(b.kind), w, b.p, b.d, b.pg, b.dg, b.bytes, html.EscapeString(title))
	}
	sb.WriteString(`</svg>`)
	return sb.String()
}

// renderLayerList lists the transferred layers; clicking one lists its
// descriptors.
func (c *Root) renderLayerList(t *xfer.Transfer, kindOf func(string) model.Kind) app.UI {
	totals := map[string]*layerTotal{}
	var order []string
	for _, rp := range t.RankPairs {
		for _, p := range rp.Pairs {
			if p.Layer == "" {
				continue
			}
			lt, ok := totals[p.Layer]
			if !ok {
				lt = &layerTotal{name: p.Layer, kind: kindOf(p.Layer)}
				totals[p.Layer] = lt
				order = append(order, p.Layer)
			}
			lt.descs++
			lt.bytes += p.Len
		}
	}
	return app.Div().Class("layer-list").Body(
		app.H3().Text("Layers"),
		app.Ul().Body(app.Range(order).Slice(func(i int) app.UI {
			lt := totals[order[i]]
			cls := "layer-item"
			if lt.name == c.layer {
				cls += " selected"
			}
			return app.Li().Class(cls).DataSet("layer", lt.name).Body(
				app.Span().Class("swatch").Style("background", kindColor(lt.kind)),
				app.Text(fmt.Sprintf("%s · %s descs · %s", lt.name, commas(int64(lt.descs)), humanBytes(lt.bytes))),
			).OnClick(func(ctx app.Context, e app.Event) {
				c.layer = lt.name
				ctx.Update()
			})
		})),
	)
}

// renderLayerDescs lists the first descriptors of the selected layer.
func (c *Root) renderLayerDescs(t *xfer.Transfer) app.UI {
	const limit = 200
	type row struct {
		p, d int
		op   string
		pair xfer.Pair
	}
	var rows []row
	total := 0
	for _, rp := range t.RankPairs {
		for _, p := range rp.Pairs {
			if p.Layer == c.layer {
				total++
				if len(rows) < limit {
					rows = append(rows, row{rp.P, rp.D, rp.Op, p})
				}
			}
		}
	}
	return app.Section().Class("card").ID("layer-descs").Body(
		app.H3().Text(fmt.Sprintf("%s: %s descriptors (showing %d)", c.layer, commas(int64(total)), len(rows))),
		app.Div().Class("scroll").Body(app.Table().Class("descs").Body(
			app.THead().Body(app.Tr().Body(app.Th().Text("ranks"), app.Th().Text("source (P)"), app.Th().Text("destination (D)"), app.Th().Text("bytes"),
				app.Th().Text("segment"), app.Th().Text("heads"), app.Th().Text("tokens"), app.Th().Text("groups"), app.Th().Text("vLLM ids"))),
			app.TBody().Body(app.Range(rows).Slice(func(i int) app.UI {
				x := rows[i]
				p := x.pair
				ids := "—"
				if p.SrcID >= 0 {
					ids = fmt.Sprintf("%d ← %d", p.DstID, p.SrcID)
				}
				tokens := "state"
				if p.Tokens.Hi > 0 {
					tokens = fmt.Sprintf("[%d, %d)", p.Tokens.Lo, p.Tokens.Hi)
				}
				return app.Tr().Body(
					app.Td().Text(fmt.Sprintf("P%d → D%d %s", x.p, x.d, x.op)),
					app.Td().Text(fmt.Sprintf("r%d +%#x", p.Src.Region, p.Src.Offset)),
					app.Td().Text(fmt.Sprintf("r%d +%#x", p.Dst.Region, p.Dst.Offset)),
					app.Td().Text(commas(p.Len)),
					app.Td().Text(string(p.Seg)),
					app.Td().Text(fmt.Sprintf("[%d, %d)", p.Lo, p.Hi)),
					app.Td().Text(tokens),
					app.Td().Text(fmt.Sprintf("g%d → g%d", p.PGroup, p.DGroup)),
					app.Td().Text(ids),
				)
			})),
		)),
	)
}
