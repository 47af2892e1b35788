package app

import "github.com/maxence-charriere/go-app/v10/pkg/app"

// Markup is an element whose content is markup the browser parses itself,
// in a task of its own after the page has drawn the rest: go-app keeps no
// tree of it, so showing a table of hundreds of cells costs one parse, not
// hundreds of calls from WebAssembly, and later renders of the page never
// walk it. Clicks on its content bubble to the element around it.
type Markup struct {
	app.Compo
	ID   string
	HTML string
	// Held, when set, names markup the page holds (kvscope.hold), drawn
	// instead of HTML.
	Held string
}

// OnMount fills the element once it exists.
func (m *Markup) OnMount(ctx app.Context) { ctx.Defer(func(app.Context) { m.fill() }) }

// OnUpdate refills it when its markup changes.
func (m *Markup) OnUpdate(ctx app.Context) { ctx.Defer(func(app.Context) { m.fill() }) }

// fill asks the page for the markup; the page skips markup its element
// was last asked to show, so that drawing it directly (Root.showTune) and
// the render after cost one parse.
func (m *Markup) fill() { callJS("markupLater", m.ID, m.HTML, m.Held) }

// Render is the element, empty: its content is the browser's.
func (m *Markup) Render() app.UI { return app.Div().ID(m.ID).DataSet("testid", m.ID) }
