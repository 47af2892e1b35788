// Package bundled embeds the model configs of testdata/models (make copies
// them here before building), so the browser app and the kvscope binary
// work offline with every bundled model.
package bundled

import (
	"embed"

	"github.com/kvscope/kvscope/core/model"
)

//go:embed *
var files embed.FS

// Catalog returns the embedded configs; it is empty in a build that make
// did not prepare.
func Catalog() model.Catalog { return model.NewCatalog(files, ".") }
