// Package core_test checks the arrows of the architecture: everything under
// core/ imports only the standard library and core itself, for the server
// and for the browser (GOOS=js GOARCH=wasm).
package core_test

import (
	"os/exec"
	"strings"
	"testing"
)

func TestCoreImportsOnlyTheStandardLibrary(t *testing.T) {
	for _, target := range []struct{ goos, goarch string }{{"linux", "amd64"}, {"js", "wasm"}} {
		t.Run(target.goos+"/"+target.goarch, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", "github.com/kvscope/kvscope/core/...")
			cmd.Env = append(cmd.Environ(), "GOOS="+target.goos, "GOARCH="+target.goarch, "CGO_ENABLED=0")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				path, std, _ := strings.Cut(line, " ")
				if std == "true" || path == "github.com/kvscope/kvscope/core" || strings.HasPrefix(path, "github.com/kvscope/kvscope/core/") {
					continue
				}
				t.Errorf("core depends on %s: core must use the standard library only", path)
			}
		})
	}
}
