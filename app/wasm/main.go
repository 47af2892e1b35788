// Command wasm is the browser half of kvscope: the app and the planning
// core compiled to WebAssembly (GOOS=js GOARCH=wasm, make builds it into
// web/app.wasm). It imports nothing of the server, the agent or cgo; a test
// (app/deps_test.go) keeps it that way. Started by the Tune worker script
// (no page around it), it runs searches instead of the app.
package main

import (
	"runtime/debug"

	"github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/core/catalog"
	goapp "github.com/maxence-charriere/go-app/v10/pkg/app"
)

func main() {
	if inWorker() {
		serveTune(catalog.Bundled())
		return
	}
	// Recomputes allocate a few MB that die at once; collecting less often
	// keeps a keystroke's recompute short in the single-threaded browser.
	debug.SetGCPercent(400)
	app.Register(catalog.Bundled())
	goapp.RunWhenOnBrowser()
}
