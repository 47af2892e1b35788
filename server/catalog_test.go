package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
)

// TestFreshCloneListsEveryModel builds the server as a fresh clone would:
// the files git would hold for this tree (tracked and not ignored, so
// nothing make generated: no app.wasm, no ECharts bundle), then a plain
// `go build ./server`, without make. Its `models --json`, run outside any
// source tree, lists every config of the catalog's directory, each of a
// family kvscope plans.
func TestFreshCloneListsEveryModel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the server from a copy of the tree (half a minute)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	listed, err := ls.Output()
	if err != nil {
		t.Skipf("git ls-files (the files of a clone): %v", err)
	}
	clone := t.TempDir()
	copied := 0
	for _, name := range strings.Split(strings.TrimRight(string(listed), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in git
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(clone, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
		copied++
	}
	for _, generated := range []string{"web/app.wasm", "static/assets/vendor"} {
		if _, err := os.Stat(filepath.Join(clone, generated)); err == nil {
			t.Fatalf("the clone holds %s, which make generates", generated)
		}
	}
	bin := filepath.Join(t.TempDir(), "kvscope")
	build := exec.Command("go", "build", "-o", bin, "./server")
	build.Dir = clone
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./server in a clone of %d files: %v\n%s", copied, err, out)
	}
	run := exec.Command(bin, "models", "--json")
	run.Dir = t.TempDir()
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("kvscope models: %v\n%s", err, stderr.Bytes())
	}
	files, err := filepath.Glob(filepath.Join(modeltest.Dir(), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no configs in %s: %v", modeltest.Dir(), err)
	}
	var want []string
	for _, f := range files {
		want = append(want, strings.Replace(strings.TrimSuffix(filepath.Base(f), ".json"), "__", "/", 1))
	}
	slices.Sort(want)
	var listing model.Listing
	if err := json.Unmarshal(out, &listing); err != nil {
		t.Fatalf("kvscope models --json: %v\n%s", err, out)
	}
	var got []string
	for _, e := range listing.Models {
		got = append(got, e.Name)
		if e.Status != model.Modelled && e.Status != model.Inferred {
			t.Errorf("bundled %s is %s: %s", e.Name, e.Status, e.Error)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("kvscope models from a fresh clone lists %d models:\n%s\nthe catalog's directory holds %d:\n%s",
			len(got), out, len(want), strings.Join(want, "\n"))
	}
}
