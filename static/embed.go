// Package static holds the files the kvscope server serves and embeds: CSS,
// icons, the ECharts bundle installed from npm at build time, and a copy of
// the bundled model configs (testdata/models), both written by make and
// ignored by git.
package static

import (
	"embed"
	"io/fs"
)

//go:embed *
var files embed.FS

// Files returns the embedded static tree.
func Files() fs.FS { return files }
