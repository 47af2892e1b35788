package app

import (
	"fmt"
	"strconv"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

func (c *Root) renderPD() app.UI {
	r := c.result
	if !r.OK() {
		return app.P().Class("muted").Text("Fix the settings on the Configure view to compare P and D.")
	}
	inv := r.PD.Invariant
	diff := plan.Compare(inv.PIndependent, inv.DIndependent)
	row := func(label string, f func(p *plan.Plan) string, pp, dp *plan.Plan) app.UI {
		return app.Tr().Body(app.Th().Text(label), app.Td().Text(f(pp)), app.Td().Text(f(dp)))
	}
	groups := func(p *plan.Plan) string {
		return fmt.Sprintf("%d groups × %d slots, block %d", p.NumGroups, p.Slots, p.BlockSize)
	}
	tokens := func(p *plan.Plan) string { return commas(p.KVCacheTokens) }
	pct := func(v float64) string { return fmt.Sprintf("%+.2f%%", v) }
	return app.Div().Class("pd-view").Body(
		c.renderWhy(),
		app.Section().Class("card").Body(
			app.H2().Text("Independent and TP-invariant plans"),
			app.Table().Class("compare").Body(
				app.THead().Body(app.Tr().Body(app.Th(), app.Th().Text(fmt.Sprintf("P (TP %d)", inv.PIndependent.Engine.TensorParallelSize)),
					app.Th().Text(fmt.Sprintf("D (TP %d)", inv.DIndependent.Engine.TensorParallelSize)))),
				app.TBody().Body(
					row("independent plan", groups, inv.PIndependent, inv.DIndependent),
					row("  KV cache tokens", tokens, inv.PIndependent, inv.DIndependent),
					row("TP-invariant plan (inferred)", groups, inv.P, inv.D),
					row("  KV cache tokens", tokens, inv.P, inv.D),
					app.Tr().Body(app.Th().Text("  TP-invariant vs independent"),
						app.Td().DataSet("testid", "diff-p").Text(pct(r.PD.PCost.DiffPercent)),
						app.Td().DataSet("testid", "diff-d").Text(pct(r.PD.DCost.DiffPercent))),
				),
			),
			app.P().Class("muted").Text(fmt.Sprintf("The transfer uses the %s plans (connector %s%s). Invariant block size %d: %s.",
				r.PD.Plans, r.PD.Connector, map[bool]string{true: ", which needs matching groups", false: ""}[r.PD.NeedsMatching], inv.BlockSize, inv.BlockSizeRule)),
		),
		app.Section().Class("card").Body(
			app.H2().Text("Block size"),
			app.P().DataSet("testid", "advice").Text(r.PD.Advice.Log),
		),
		app.Section().Class("card").Body(
			app.H2().Text(fmt.Sprintf("Layers that change group, slot or block size (independent plans): %d", len(diff.Changes))),
			app.If(len(diff.Changes) == 0, func() app.UI { return app.P().Text("None: P and D plan the same layout.") }),
			app.If(len(diff.Changes) > 0, func() app.UI {
				return app.Div().Class("scroll").Body(app.Table().Class("changes").Body(
					app.THead().Body(app.Tr().Body(app.Th().Text("layer"), app.Th().Text("P group"), app.Th().Text("P slot"), app.Th().Text("P block (tokens)"),
						app.Th().Text("D group"), app.Th().Text("D slot"), app.Th().Text("D block (tokens)"))),
					app.TBody().Body(app.Range(diff.Changes).Slice(func(i int) app.UI {
						ch := diff.Changes[i]
						block := func(n int) string { return strconv.Itoa(n) }
						if l, ok := inv.PIndependent.LayerByName(ch.Layer); ok && l.Kind.IsState() {
							block = func(int) string { return "whole request" } // a state layer's block is its request
						}
						return app.Tr().Body(app.Td().Text(ch.Layer), app.Td().Text(strconv.Itoa(ch.FromGroup)), app.Td().Text(strconv.Itoa(ch.FromSlot)),
							app.Td().Text(block(ch.FromBlock)), app.Td().Text(strconv.Itoa(ch.ToGroup)), app.Td().Text(strconv.Itoa(ch.ToSlot)), app.Td().Text(block(ch.ToBlock)))
					})),
				))
			}),
		),
		c.renderHandshake(),
	)
}

// renderWhy says why P's and D's own plans differ, from the planner's own
// account (xfer.PD.Explain, as kvscope pd --explain prints it): the
// engine flags that differ, each side's chosen g and its rule, the
// buckets and the alignment; then each side's full explanation.
func (c *Root) renderWhy() app.UI {
	r := c.result
	x := r.PD.Explain()
	notes := []string{}
	if r.PD.Note != "" {
		notes = append(notes, r.PD.Note)
	}
	side := func(name string, ex *plan.Explanation) app.UI {
		return app.Details().DataSet("testid", "why-"+name).Body(
			app.Summary().Text(name+": "+ex.Why),
			app.Ul().Body(app.Range(ex.Lines).Slice(func(i int) app.UI { return app.Li().Text(ex.Lines[i]) })),
		)
	}
	return app.Section().Class("card").ID("pd-why").Body(
		app.H2().Text("Why P and D differ"),
		app.If(len(x.Difference) == 0, func() app.UI {
			return app.P().DataSet("testid", "why-same").Text("P and D plan alike: the same groups, slots and block size.")
		}),
		app.Ul().DataSet("testid", "why-difference").Body(app.Range(x.Difference).Slice(func(i int) app.UI { return app.Li().Text(x.Difference[i]) })),
		side("P", x.P), side("D", x.D),
		app.Range(notes).Slice(func(i int) app.UI {
			return app.P().Class("note").DataSet("testid", "pd-note").Text("note: " + notes[i])
		}),
	)
}

func noteOr(note, fallback string) string {
	if note != "" {
		return note
	}
	return fallback
}

func (c *Root) renderHandshake() app.UI {
	pd := c.result.PD
	sentence := ""
	if pd.Transfer != nil {
		sentence = pd.PreflightOf(pd.Transfer).Sentence
	}
	return handshakeCard(pd.Transfer, pd.Note, sentence)
}

// handshakeCard is a transfer's handshake checks and its rejection, if
// any, after the preflight's sentence (when given); a nil transfer shows
// note (or that it is being computed).
func handshakeCard(t *xfer.Transfer, note, sentence string) app.UI {
	if t == nil {
		return app.Section().Class("card").Body(app.H2().Text("Handshake"), app.P().Text(noteOr(note, "computing the transfer…")))
	}
	hs := t.Handshake
	return app.Section().Class("card").ID("handshake").Body(
		app.H2().Text(fmt.Sprintf("Handshake (NIXL_CONNECTOR_VERSION %d)", hs.Protocol.Version)),
		app.If(sentence != "", func() app.UI { return app.P().DataSet("testid", "preflight").Text(sentence) }),
		app.P().Text(hs.Summary()),
		app.Table().Class("checks").Body(app.Range(hs.Checks).Slice(func(i int) app.UI {
			ch := hs.Checks[i]
			mark, cls := "ok", "ok"
			if !ch.OK {
				mark, cls = "FAIL", "fail"
			}
			return app.Tr().Class(cls).DataSet("rule", ch.Rule).Body(app.Td().Text(mark), app.Td().Body(app.Code().Text(ch.Rule)), app.Td().Text(ch.Detail))
		})),
		app.If(t.Rejection != nil, func() app.UI {
			return app.P().Class("banner error").Text(fmt.Sprintf("Rejected (%s, %s): %s. Fix: %s", t.Rejection.Rule, t.Rejection.Side, t.Rejection.Detail, t.Rejection.Fix))
		}),
	)
}
