// Package modeltest loads the repository's real model configs (the
// bundled catalog, core/catalog/models) for tests in any package.
package modeltest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kvscope/kvscope/core/model"
)

// Dir is core/catalog/models, the bundled catalog's directory, found from
// this file's place in the source tree, so a test in any package can read
// the files the binaries embed.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "catalog", "models")
}

// Load parses core/catalog/models/<file>.json (e.g. "openai__gpt-oss-20b"),
// failing the test on any error. The model is named after the file.
func Load(t testing.TB, file string) *model.Model {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(Dir(), file+".json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Parse(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	m.Name = file
	return m
}

// LoadTestdata parses testdata/models/<file>.json: configs kvscope does
// not bundle (derived ones, and real ones it refuses), failing the test
// on a read error; the parse error is the caller's to check.
func LoadTestdata(t testing.TB, file string) (*model.Model, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(Dir(), "..", "..", "..", "testdata", "models", file+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return model.Parse(data)
}

// LoadWithDraft loads a target model and its draft (see Load) and joins
// them, failing the test on any error.
func LoadWithDraft(t testing.TB, target, draft string) *model.Model {
	t.Helper()
	m, err := Load(t, target).WithDraft(Load(t, draft))
	if err != nil {
		t.Fatalf("%s with draft %s: %v", target, draft, err)
	}
	return m
}

// Seed is the seed deployment's model: Qwen3.6-35B-A3B with its DFlash
// drafter.
func Seed(t testing.TB) *model.Model {
	t.Helper()
	return LoadWithDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
}
