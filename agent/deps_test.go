package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestAgentImportsNoUI: kvscope-agent, with and without the nixl tag,
// depends on core and on its own packages, never on the browser app or
// the server; its model catalog is core/catalog, embedded in the binary.
func TestAgentImportsNoUI(t *testing.T) {
	forbidden := map[string]string{
		"github.com/kvscope/kvscope/app":    "the browser app (the agent has no UI)",
		"github.com/kvscope/kvscope/server": "the server",
		"github.com/kvscope/kvscope/web":    "the app's web root",
		"github.com/kvscope/kvscope/static": "the server's assets",
	}
	for _, tags := range []string{"", "nixl"} {
		t.Run("tags="+tags, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-tags", tags, "-f", "{{.ImportPath}}", ".").CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			catalog := false
			for _, pkg := range strings.Fields(string(out)) {
				catalog = catalog || pkg == "github.com/kvscope/kvscope/core/catalog"
				for prefix, why := range forbidden {
					if pkg == prefix || strings.HasPrefix(pkg, prefix+"/") {
						t.Errorf("kvscope-agent depends on %s: %s does not belong in the agent", pkg, why)
					}
				}
			}
			if !catalog {
				t.Error("kvscope-agent does not embed the model catalog (core/catalog)")
			}
		})
	}
}
