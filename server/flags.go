package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	modelcatalog "github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/server/api"
	"github.com/kvscope/kvscope/server/internal/hub"
)

// parseBytes reads "42949672960", "40GiB", "512MiB" or "1.5GiB".
func parseBytes(s string) (int64, error) { return plan.ParseBytes(s) }

// modelFlags are --model and --draft, and where load found them.
type modelFlags struct {
	model, draft *string
	src          *modelSources
}

// modelSources says where --model and --draft came from when the Hub
// resolver found them (nil for a file or a bundled name); plan and pd
// print it, and add it to --json beside the existing fields.
type modelSources struct {
	Model *hub.Source `json:"model_source,omitempty"`
	Draft *hub.Source `json:"draft_source,omitempty"`
}

// api is the sources as the API's answers carry them.
func (s *modelSources) api() api.ModelSources {
	if s == nil {
		return api.ModelSources{}
	}
	return api.ModelSources{Model: s.Model, Draft: s.Draft}
}

// resolved reports whether a Hub id was resolved.
func (s *modelSources) resolved() bool { return s != nil && (s.Model != nil || s.Draft != nil) }

// writeText prints one line for each config that came from the Hub or
// its cache.
func (s *modelSources) writeText(w io.Writer) {
	if s == nil {
		return
	}
	for _, c := range []struct {
		flag string
		src  *hub.Source
	}{{"model", s.Model}, {"draft", s.Draft}} {
		if c.src != nil {
			fmt.Fprintf(w, "%s config.json: %s\n", c.flag, c.src.Where())
		}
	}
}

// read reads --model and --draft without joining them (nil where not
// given, or --draft mtp), noting in src where a Hub id came from.
func (mf modelFlags) read(ms hub.Models) (target, draft *model.Model, err error) {
	if *mf.model != "" {
		if target, mf.src.Model, err = readModel(ms, *mf.model); err != nil {
			return nil, nil, err
		}
	}
	if d := *mf.draft; d != "" && d != "mtp" {
		if draft, mf.src.Draft, err = readModel(ms, d); err != nil {
			return nil, nil, fmt.Errorf("--draft: %w", err)
		}
	}
	return target, draft, nil
}

func newModelFlags(fs *flag.FlagSet) modelFlags {
	return modelFlags{
		model: fs.String("model", "", "a config.json path, a bundled model name (see kvscope models), or a Hub id org/name[@revision] (the Hugging Face cache, then the Hub)"),
		draft: fs.String("draft", "", "a draft model's config.json path, bundled name or Hub id, or \"mtp\" for the model's own MTP layers"),
		src:   &modelSources{},
	}
}

// load reads the target and attaches the draft.
func (mf modelFlags) load(ms hub.Models) (*model.Model, error) {
	if *mf.model == "" {
		return nil, fmt.Errorf("--model is required (a config.json path, a bundled name or a Hub id)")
	}
	m, src, err := readModel(ms, *mf.model)
	if err != nil {
		return nil, err
	}
	mf.src.Model = src
	switch d := *mf.draft; d {
	case "":
		return m, nil
	case "mtp":
		return m.WithMTP()
	default:
		dm, src, err := readModel(ms, d)
		if err != nil {
			return nil, fmt.Errorf("--draft: %w", err)
		}
		mf.src.Draft = src
		return m.WithDraft(dm)
	}
}

// maxConfigBytes caps a config.json read from a path: the largest real
// config is tens of KiB.
const maxConfigBytes = 4 << 20

// readModel reads ref as a config.json path, else as a bundled name,
// else as a Hub id (the Hugging Face cache, then the Hub). The source is
// nil unless the Hub resolver found it.
func readModel(ms hub.Models, ref string) (*model.Model, *hub.Source, error) {
	name := ref
	data, err := readCapped(ref, maxConfigBytes)
	var big *tooLargeError
	if errors.As(err, &big) {
		return nil, nil, fmt.Errorf("--model %w", err)
	}
	var src *hub.Source
	if err != nil {
		var lerr error
		name, data, src, lerr = ms.Lookup(context.Background(), ref)
		if lerr != nil {
			if errors.Is(err, fs.ErrNotExist) && hub.LooksLikeID(ref) {
				return nil, nil, fmt.Errorf("--model %s: %w", ref, lerr)
			}
			return nil, nil, fmt.Errorf("--model %s: not a readable file (%v), and %v", ref, err, lerr)
		}
	}
	m, err := model.Parse(data)
	if err != nil {
		if src != nil {
			return nil, nil, fmt.Errorf("--model %s: %s: %w", ref, src.Where(), err)
		}
		return nil, nil, fmt.Errorf("%s: %w", ref, err)
	}
	m.Name = model.DisplayName(name)
	if src != nil {
		m.Name = name
	}
	return m, src, nil
}

// catalog is the bundled model configs, embedded in the binary.
func catalog() model.Catalog { return modelcatalog.Bundled() }

// models is the bundled catalog, and the Hub resolver over this process's
// environment (HF_HUB_CACHE, HF_HOME, HF_ENDPOINT, HF_TOKEN,
// HF_HUB_OFFLINE) for the ids it does not bundle.
func models() hub.Models {
	return hub.Models{Catalog: catalog(), Hub: &hub.Resolver{Getenv: os.Getenv}}
}
