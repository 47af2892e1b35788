// Package web is go-app's web root: make builds the app's WebAssembly here
// (app.wasm, and app.wasm.gz compressed), and the kvscope server embeds
// whatever is present. A build without them serves a page that says so.
package web

import (
	"embed"
	"io/fs"
)

//go:embed *
var files embed.FS

// Files returns the web root.
func Files() fs.FS { return files }
