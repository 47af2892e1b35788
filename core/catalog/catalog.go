// Package catalog is kvscope's bundled model catalog: the Hugging Face
// config.json files in models/, named "<org>__<name>.json" after the
// Hub id they come from (each says where in its "_source" field),
// embedded into every binary that imports the package, with no build step.
//
// The kvscope server and CLI, the browser app and kvscope-agent all plan
// with these configs, and the tests read the same files (from this
// directory: core/model/modeltest.Dir). The package holds data only: it
// wraps core/model, which parses the configs and resolves names
// (model.Catalog.Lookup); ids that are not bundled (the Hub, a local
// Hugging Face cache) are resolved outside core, behind the same
// interface.
//
// To bundle a model, add its config.json here under its Hub id; the
// tests of core/model then ask for its row in their table of layers.
package catalog

import (
	"embed"

	"github.com/kvscope/kvscope/core/model"
)

// Dir is the directory of the configs, in the package's source tree and
// in its embedded file system.
const Dir = "models"

//go:embed models/*.json
var files embed.FS

// Bundled returns the embedded configs. It is the same in every build: no
// build step copies them in.
func Bundled() model.Catalog { return model.NewCatalog(files, Dir) }
