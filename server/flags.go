package main

import (
	"errors"
	"flag"
	"fmt"

	modelcatalog "github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
)

// parseBytes reads "42949672960", "40GiB", "512MiB" or "1.5GiB".
func parseBytes(s string) (int64, error) { return plan.ParseBytes(s) }

// modelFlags are --model and --draft.
type modelFlags struct {
	model, draft *string
}

func newModelFlags(fs *flag.FlagSet) modelFlags {
	return modelFlags{
		model: fs.String("model", "", "a config.json path, or a bundled model name (see kvscope models)"),
		draft: fs.String("draft", "", "a draft model's config.json path or bundled name, or \"mtp\" for the model's own MTP layers"),
	}
}

// load reads the target and attaches the draft.
func (mf modelFlags) load(cat model.Catalog) (*model.Model, error) {
	if *mf.model == "" {
		return nil, fmt.Errorf("--model is required (a config.json path or a bundled name)")
	}
	m, err := readModel(cat, *mf.model)
	if err != nil {
		return nil, err
	}
	switch d := *mf.draft; d {
	case "":
		return m, nil
	case "mtp":
		return m.WithMTP()
	default:
		dm, err := readModel(cat, d)
		if err != nil {
			return nil, fmt.Errorf("--draft: %w", err)
		}
		return m.WithDraft(dm)
	}
}

// maxConfigBytes caps a config.json read from a path: the largest real
// config is tens of KiB.
const maxConfigBytes = 4 << 20

func readModel(cat model.Catalog, ref string) (*model.Model, error) {
	name := ref
	data, err := readCapped(ref, maxConfigBytes)
	var big *tooLargeError
	if errors.As(err, &big) {
		return nil, fmt.Errorf("--model %w", err)
	}
	if err != nil {
		var lerr error
		name, data, lerr = cat.Lookup(ref)
		if lerr != nil {
			return nil, fmt.Errorf("--model %s: not a readable file (%v), and %v", ref, err, lerr)
		}
	}
	m, err := model.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	m.Name = model.DisplayName(name)
	return m, nil
}

// catalog is the bundled model configs, embedded in the binary.
func catalog() model.Catalog { return modelcatalog.Bundled() }
