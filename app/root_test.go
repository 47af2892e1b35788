package app

import (
	"testing"

	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// TestRootComponent mounts the app outside a browser (go-app's test
// engine) and checks it computes the default view and answers shortcuts.
func TestRootComponent(t *testing.T) {
	e := app.NewTestEngine()
	root := &Root{Catalog: testCatalog()}
	if err := e.Load(root); err != nil {
		t.Fatal(err)
	}
	e.ConsumeAll()
	if root.result == nil {
		// The test engine does not navigate; do what OnNav does.
		root.settings = DefaultSettings()
		root.recompute(app.Context{})
	}
	if root.result == nil || !root.result.OK() {
		t.Fatalf("no result: %+v", root.result)
	}
	p, _ := root.result.Plans()
	if p.KVCacheTokens <= 0 {
		t.Errorf("P KV tokens %d", p.KVCacheTokens)
	}
	if err := app.Match(app.Div().ID("kvscope").Class("kvscope"), root.Render()); err != nil {
		t.Errorf("root element: %v", err)
	}
}
