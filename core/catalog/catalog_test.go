package catalog_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model"
)

// TestBundledIsTheDirectory: the embedded catalog lists every config of
// models/ under its Hub id, and each resolves to that file's bytes.
func TestBundledIsTheDirectory(t *testing.T) {
	entries, err := os.ReadDir(catalog.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || !strings.Contains(name, "__") {
			t.Errorf("%s/%s is not a config named <org>__<name>.json", catalog.Dir, e.Name())
			continue
		}
		want = append(want, strings.Replace(name, "__", "/", 1))
	}
	if len(want) < 40 {
		t.Errorf("%s holds %d configs, want the 40 bundled ones at least", catalog.Dir, len(want))
	}
	slices.Sort(want)
	cat := catalog.Bundled()
	if got := cat.Names(); !slices.Equal(got, want) {
		t.Fatalf("catalog.Bundled lists\n%v\nthe directory holds\n%v", got, want)
	}
	for _, name := range want {
		t.Run(name, func(t *testing.T) {
			got, data, err := cat.Lookup(name)
			if err != nil || got != name {
				t.Fatalf("Lookup(%q) = %q, %v", name, got, err)
			}
			file, err := os.ReadFile(filepath.Join(catalog.Dir, strings.Replace(name, "/", "__", 1)+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, file) {
				t.Errorf("the embedded config of %s differs from its file", name)
			}
			if _, err := model.Parse(data); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
}
