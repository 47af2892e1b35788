package app

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// kindColor is the color of a layer kind, shared by every view.
func kindColor(k model.Kind) string {
	switch k {
	case model.Full:
		return "#3b82f6"
	case model.Sliding:
		return "#10b981"
	case model.ChunkedLocal:
		return "#f59e0b"
	case model.MLA:
		return "#8b5cf6"
	case model.GatedDeltaNet:
		return "#ec4899"
	case model.KDA:
		return "#d946ef"
	case model.Mamba1, model.Mamba2:
		return "#ef4444"
	}
	return "#6b7280"
}

func commas(n int64) string { return plan.Commas(n) }

func (c *Root) renderPlan() app.UI {
	r := c.result
	if !r.OK() {
		if r.Alone[0] == nil && r.Alone[1] == nil {
			return app.P().Class("muted").Text("Fix the settings on the Configure view to see the plans.")
		}
		// One side's bad value: the other side's plan stays.
		side := func(i int, id, title string) app.UI {
			if p := r.Alone[i]; p != nil {
				return c.renderSide(id, title+" — planned on its own", p)
			}
			var msgs []string
			for _, k := range sortedKeys(r.Errors) {
				if strings.HasPrefix(k, id+"-") || k == "vllm-version" {
					msgs = append(msgs, k+": "+userWords(r.Errors[k]))
				}
			}
			return app.Section().Class("card side error").DataSet("side", id).DataSet("testid", "side-error-"+id).Body(
				app.H2().Text(title), app.P().Class("field-error").Text(strings.Join(msgs, "; ")))
		}
		return app.Div().Class("plan-view").Body(
			app.P().Class("muted").Text("One side cannot be planned as set; the other side's plan is shown as that engine plans alone."),
			app.Div().Class("sides").Body(side(0, "p", "P (prefill)"), side(1, "d", "D (decode)")),
		)
	}
	p, d := r.Plans()
	note := "Each engine's own plan."
	if r.PD.Plans == "invariant" {
		note = "Both engines use the TP-invariant plan (inferred): the connector needs matching KV cache groups."
	}
	return app.Div().Class("plan-view").Body(
		app.P().Class("muted").Text(note),
		c.modelSource(),
		app.Div().Class("sides").Body(c.renderSide("p", "P (prefill)", p), c.renderSide("d", "D (decode)", d)),
	)
}

// renderSide draws one engine's plan: its numbers, the slot x group
// matrix, vLLM's log lines and the formulas behind the numbers.
func (c *Root) renderSide(side, title string, p *plan.Plan) app.UI {
	e := p.Engine
	stat := func(label, testid string, value int64, text string) app.UI {
		dd := app.Dd().Text(text)
		if testid != "" {
			dd = dd.DataSet("testid", testid).DataSet("value", strconv.FormatInt(value, 10))
		}
		return app.Div().Class("stat").Body(app.Dt().Text(label), dd)
	}
	return app.Section().Class("card side").DataSet("side", side).Body(
		app.H2().Text(fmt.Sprintf("%s · TP %d · PP %d", title, e.TensorParallelSize, e.PipelineParallelSize)),
		app.Dl().Class("stats").Body(
			stat("KV cache tokens", "kv-tokens-"+side, p.KVCacheTokens, commas(p.KVCacheTokens)),
			stat("groups", "groups-"+side, int64(p.NumGroups), strconv.Itoa(p.NumGroups)),
			stat("slots G", "slots-"+side, int64(p.Slots), strconv.Itoa(p.Slots)),
			stat("block size", "block-"+side, int64(p.BlockSize), strconv.Itoa(p.BlockSize)+" tokens"),
			stat("page", "", 0, commas(p.PageBytes)+" B"),
			stat("num_blocks", "num-blocks-"+side, p.NumBlocks, commas(p.NumBlocks)),
			stat("blocks / request", "", 0, commas(p.BlocksPerRequest)),
			stat("concurrency", "", 0, fmt.Sprintf("%.2fx", p.MaxConcurrency)),
			stat("padding", "", 0, fmt.Sprintf("%d slots, %s / request", p.PaddingSlots, humanBytes(p.PaddingBytesPerRequest))),
			stat("selector", "", 0, selectorText(p)),
		),
		renderMatrix(p),
		renderLegend(p),
		app.Details().Body(app.Summary().Text("vLLM's log lines"), app.Pre().Class("logs").Text(strings.Join(p.LogLines(), "\n"))),
		app.Details().Class("why").Body(app.Summary().Text("Why these numbers"), renderWhy(p)),
		inferredBadge(p.InferredReasons),
		app.If(len(p.Notes) > 0, func() app.UI {
			return app.Details().Body(app.Summary().Text(plural(len(p.Notes), "note")), app.Ul().Body(app.Range(p.Notes).Slice(func(i int) app.UI { return app.Li().Text(p.Notes[i]) })))
		}),
	)
}

// inferredBadge is a badge that opens the list of what rests on vLLM
// behaviour kvscope inferred rather than read (nothing when none does).
func inferredBadge(reasons []string) app.UI {
	if len(reasons) == 0 {
		return app.Text("")
	}
	return app.Details().Class("inferred").DataSet("testid", "inferred").Body(
		app.Summary().Body(app.Span().Class("badge").Title("rests on vLLM behaviour kvscope inferred rather than read in vLLM's code").Text("inferred · "+strconv.Itoa(len(reasons)))),
		app.Ul().Body(app.Range(reasons).Slice(func(i int) app.UI { return app.Li().Text(reasons[i]) })),
	)
}

// plural is "1 note", "3 notes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// kindWords names a layer kind for the legend.
func kindWords(k model.Kind) string {
	switch k {
	case model.Full:
		return "full attention"
	case model.Sliding:
		return "sliding-window attention"
	case model.ChunkedLocal:
		return "chunked local attention"
	case model.MLA:
		return "multi-head latent attention (MLA)"
	case model.GatedDeltaNet:
		return "gated delta net (state)"
	case model.KDA:
		return "Kimi delta attention (state)"
	case model.Mamba1:
		return "Mamba (state)"
	case model.Mamba2:
		return "Mamba2 (state)"
	}
	return string(k)
}

// renderLegend says what the matrix's colours, cells and headers mean.
func renderLegend(p *plan.Plan) app.UI {
	var kinds []model.Kind
	for _, g := range p.Groups {
		if !slices.Contains(kinds, g.Kind) {
			kinds = append(kinds, g.Kind)
		}
	}
	return app.Div().Class("legend").DataSet("testid", "matrix-legend").Body(
		app.Range(kinds).Slice(func(i int) app.UI {
			k := kinds[i]
			return app.Span().Class("key").Body(app.Span().Class("swatch").Style("background", kindColor(k)), app.Text(shortKind(k)+" = "+kindWords(k)))
		}),
		app.Span().Class("key").Body(app.Span().Class("swatch pad"), app.Text("PAD = a slot no layer uses, darker the more bytes it holds per request")),
		app.Span().Class("key").Text("columns: gN = KV cache group N, kind · block size in tokens (req = a state layer's whole request); rows: slots, one tensor each"),
	)
}

func selectorText(p *plan.Plan) string {
	switch {
	case p.Engine.GroupSize > 0:
		return fmt.Sprintf("fixed g = %d", p.GroupSize)
	case p.Selector == "":
		return p.Dispatch
	}
	return fmt.Sprintf("%s, g = %d", p.Selector, p.GroupSize)
}

// renderMatrix is the slot x group matrix: a column per group, a row per
// slot; layer cells are colored by kind and padding cells shaded by the
// bytes they waste per request.
func renderMatrix(p *plan.Plan) app.UI {
	var worst int64
	for _, g := range p.Groups {
		worst = max(worst, g.BlocksPerRequest*g.PageBytes)
	}
	return app.Div().Class("matrix-wrap").Body(app.Table().Class("matrix").Body(
		app.THead().Body(app.Tr().Body(
			app.Th().Text("slot"),
			app.Range(p.Groups).Slice(func(i int) app.UI {
				g := p.Groups[i]
				return app.Th().Title(fmt.Sprintf("group %d: %s, block %d, %d blocks per request", g.Index, g.Kind, g.BlockSize, g.BlocksPerRequest)).
					Body(app.Span().Style("color", kindColor(g.Kind)).Text(fmt.Sprintf("g%d", g.Index)), app.Br(), app.Small().Text(shortKind(g.Kind)+"·"+blockWords(g.Kind, g.BlockSize)))
			}),
		)),
		app.TBody().Body(app.Range(make([]struct{}, p.Slots)).Slice(func(slot int) app.UI {
			return app.Tr().Body(
				app.Th().Text(strconv.Itoa(slot)),
				app.Range(p.Groups).Slice(func(i int) app.UI {
					g := p.Groups[i]
					if slot < len(g.Layers) {
						return app.Td().Class("layer").Style("background", kindColor(g.Kind)).Title(g.Layers[slot] + " · " + string(g.Kind)).Text(g.Layers[slot])
					}
					waste := g.BlocksPerRequest * g.PageBytes
					alpha := 0.1
					if worst > 0 {
						alpha = 0.1 + 0.8*float64(waste)/float64(worst)
					}
					return app.Td().Class("pad").Style("background", fmt.Sprintf("rgba(107,114,128,%.2f)", alpha)).
						Title(fmt.Sprintf("padding: wastes %s per request (%d blocks x %s B)", humanBytes(waste), g.BlocksPerRequest, commas(g.PageBytes))).Text("PAD")
				}),
			)
		})),
	))
}

// blockWords is a group's block size in the matrix: a state layer's block
// is its whole request (vLLM gives it max_model_len tokens).
func blockWords(k model.Kind, block int) string {
	if k.IsState() {
		return "req"
	}
	return strconv.Itoa(block)
}

func shortKind(k model.Kind) string {
	switch k {
	case model.Full:
		return "full"
	case model.Sliding:
		return "swa"
	case model.ChunkedLocal:
		return "chunk"
	case model.GatedDeltaNet:
		return "gdn"
	}
	return string(k)
}

// renderWhy shows the formula behind each number with its live values.
func renderWhy(p *plan.Plan) app.UI {
	e := p.Engine
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	for _, g := range p.Groups {
		s := g.Spec
		if s.Kind.IsAttention() {
			if s.Kind == "mla" {
				add("page (MLA, %s) = block %d x latent %d x %d B = %s B", g.Kind, s.BlockSize, s.HeadSize, s.DTypeBytes, commas(s.RealPageBytes()))
			} else {
				add("page (%s) = block %d x %d KV heads/rank x (%d + %d) head dims x %d B = %s B", g.Kind, s.BlockSize, s.KVHeads, s.HeadSize, s.HeadSizeV, s.DTypeBytes, commas(s.RealPageBytes()))
			}
			break
		}
	}
	if a := p.Alignment; a != nil {
		add("attention bytes per token attn_1 = %s B; state page = %s B", commas(a.AttnBytesPerToken), commas(a.StatePageBytes))
		add("block = align %d x ceil(state / (align x attn_1)) = %d; page = %d x %s = %s B (state padded %.2f%%)",
			a.Align, a.AttnBlockSize, p.BlockSize, commas(a.AttnBytesPerToken), commas(a.AttnPageBytes), a.PadPercent)
	}
	if p.Dispatch == "hybrid" || p.Dispatch == "fixed" {
		add("group size g = %d (%s): each bucket of L layers splits into ceil(L/g) strided groups", p.GroupSize, selectorText(p))
	}
	add("slots G = the longest group = %d; bytes per block id = %s B", p.Slots, commas(p.BytesPerBlock))
	add("num_blocks = %s B // %s B = %s", commas(e.KVCacheMemoryBytes), commas(p.BytesPerBlock), commas(p.NumBlocks))
	var terms []string
	for _, g := range p.Groups {
		terms = append(terms, strconv.FormatInt(g.BlocksPerRequest, 10))
	}
	if len(terms) > 12 {
		terms = append(terms[:12], "…")
	}
	add("blocks per request = Σ ceil(worst-case bytes / page) = %s = %s", strings.Join(terms, " + "), commas(p.BlocksPerRequest))
	add("  worst cases: full ceil(%s / block); sliding ceil(min(W-1+%s, %s) / block)+1; state 1+spec (none), 2+spec (align)",
		commas(int64(e.MaxModelLen)), commas(int64(e.InFlightTokens())), commas(int64(e.MaxModelLen)))
	add("concurrency = %s / %s = %.4f", commas(p.NumBlocks), commas(p.BlocksPerRequest), p.MaxConcurrency)
	add("KV cache tokens = int(%.4f x %s) = %s", p.MaxConcurrency, commas(int64(e.MaxModelLen)), commas(p.KVCacheTokens))
	return app.Pre().Class("formulas").Text(strings.Join(lines, "\n"))
}
