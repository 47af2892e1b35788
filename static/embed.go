// Package static holds the files the kvscope server serves under /web/:
// the app's CSS and JavaScript helpers, its icons, and the ECharts bundle
// that make installs from npm (static/package.json) into assets/vendor.
package static

import (
	"embed"
	"io/fs"
)

//go:embed assets
var files embed.FS

// Files returns the embedded assets, rooted at assets/.
func Files() fs.FS {
	sub, err := fs.Sub(files, "assets")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return sub
}
