package model

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Catalog is a set of bundled model configs, read from a directory of
// Hugging Face config.json files named "<org>__<name>.json".
type Catalog struct {
	fsys fs.FS
	dir  string
}

// NewCatalog reads configs from dir inside fsys.
func NewCatalog(fsys fs.FS, dir string) Catalog { return Catalog{fsys: fsys, dir: dir} }

// Names lists the bundled models as "org/name", sorted.
func (c Catalog) Names() []string {
	if c.fsys == nil {
		return nil
	}
	entries, err := fs.ReadDir(c.fsys, c.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			out = append(out, strings.Replace(n, "__", "/", 1))
		}
	}
	sort.Strings(out)
	return out
}

// Lookup resolves a bundled model by "org/name", "org__name" or a unique
// case-insensitive suffix such as "gpt-oss-20b", and returns its config.
func (c Catalog) Lookup(ref string) (name string, data []byte, err error) {
	want := strings.ToLower(strings.TrimSuffix(strings.Replace(ref, "__", "/", 1), ".json"))
	var matches []string
	for _, n := range c.Names() {
		l := strings.ToLower(n)
		if l == want {
			matches = []string{n}
			break
		}
		if strings.HasSuffix(l, "/"+want) || strings.HasSuffix(l, want) && strings.Contains(want, "/") {
			matches = append(matches, n)
		}
	}
	switch len(matches) {
	case 0:
		return "", nil, fmt.Errorf("model: no bundled model %q (have %s)", ref, strings.Join(c.Names(), ", "))
	case 1:
	default:
		return "", nil, fmt.Errorf("model: %q matches %s", ref, strings.Join(matches, ", "))
	}
	data, err = fs.ReadFile(c.fsys, path.Join(c.dir, strings.Replace(matches[0], "/", "__", 1)+".json"))
	return matches[0], data, err
}

// DisplayName is the name a model is shown under when it was given as a
// reference: a config.json path's file name without ".json", and a
// bundled file's "org__name" as "org/name".
func DisplayName(ref string) string {
	base := ref
	if i := strings.LastIndexAny(base, "/\\"); i >= 0 && strings.HasSuffix(base, ".json") {
		base = base[i+1:]
	}
	base = strings.TrimSuffix(base, ".json")
	return strings.Replace(base, "__", "/", 1)
}

// Entry is one bundled model as kvscope models lists it: its model type
// and what kvscope does with its family.
type Entry struct {
	Name      string `json:"name"`            // "org/name"
	ModelType string `json:"model_type"`      // the text config's model_type
	Family    string `json:"family"`          // the family table's row, "" when unknown
	Status    Status `json:"status"`          // modelled, inferred, refused or unknown
	Error     string `json:"error,omitempty"` // why the config does not parse, if it does not
}

// Listing is the bundled models with their families' status, and the
// family table itself (kvscope models, GET /api/families).
type Listing struct {
	Models   []Entry  `json:"models"`
	Families []Family `json:"families"`
	// Unknown says what a model type in no row of the table gets.
	Unknown string `json:"unknown"`
}

// Listing parses every bundled config and reports its family.
func (c Catalog) Listing() Listing {
	out := Listing{Models: []Entry{}, Families: Families(), Unknown: UnknownRule()}
	for _, n := range c.Names() {
		e := Entry{Name: n, Status: Unknown}
		_, data, err := c.Lookup(n)
		var m *Model
		if err == nil {
			m, err = Parse(data)
		}
		if err != nil {
			e.Error = err.Error()
			var nm *NotModelledError
			if errors.As(err, &nm) {
				e.ModelType, e.Status = nm.ModelType, Refused
			}
			out.Models = append(out.Models, e)
			continue
		}
		e.ModelType = m.ModelType
		if f, ok := FamilyOf(m.ModelType, m.Architecture); ok {
			e.Family, e.Status = f.Name, f.Status
		}
		out.Models = append(out.Models, e)
	}
	return out
}
