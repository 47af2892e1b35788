package app

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The browser build carries the app and core, not the server, the agent,
// GPU libraries, cgo or profiling; its server-side net/http code must be
// dead code the linker drops.
func TestWasmDependencies(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./wasm")
	cmd.Env = append(cmd.Environ(), "GOOS=js", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := map[string]string{
		"github.com/kvscope/kvscope/server": "server code",
		"github.com/kvscope/kvscope/agent":  "the agent",
		"github.com/NVIDIA/go-nvml":         "GPU discovery (cgo)",
		"runtime/cgo":                       "cgo",
		"net/http/pprof":                    "profiling",
		"github.com/kvscope/kvscope/static": "the server's embedded assets (ECharts is loaded by the page)",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for prefix, why := range forbidden {
			if pkg == prefix || strings.HasPrefix(pkg, prefix+"/") {
				t.Errorf("app/wasm imports %s: %s does not belong in app.wasm", pkg, why)
			}
		}
	}
}

// TestOnlyTheServerImportsTheApp: the app's packages are imported by the
// server (which serves the page) and the app's own packages, nothing else:
// the agent, core and the bundled model catalog (core/catalog) never
// depend on the UI.
func TestOnlyTheServerImportsTheApp(t *testing.T) {
	const mod = "github.com/kvscope/kvscope"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, mod+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	inApp := func(pkg string) bool { return pkg == mod+"/app" || strings.HasPrefix(pkg, mod+"/app/") }
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || inApp(fields[0]) || fields[0] == mod+"/server" {
			continue
		}
		for _, imp := range fields[1:] {
			if inApp(imp) {
				t.Errorf("%s imports %s: only the server may import the app", fields[0], imp)
			}
		}
	}
}

// TestBuiltWasmBudget checks the app.wasm make built: no net/http server
// code, and at most 3 MB gzipped.
func TestBuiltWasmBudget(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "web", "app.wasm"))
	if err != nil {
		t.Skip("web/app.wasm is not built (make builds it before the tests)")
	}
	for _, sym := range []string{"net/http.(*Server)", "net/http.(*conn).serve", "net/http.ListenAndServe"} {
		if bytes.Contains(raw, []byte(sym)) {
			t.Errorf("app.wasm carries %s", sym)
		}
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	io.Copy(zw, bytes.NewReader(raw))
	zw.Close()
	t.Logf("app.wasm: %.2f MB, %.2f MB gzipped", float64(len(raw))/1e6, float64(buf.Len())/1e6)
	if buf.Len() > 3_000_000 {
		t.Errorf("app.wasm is %.2f MB gzipped, budget 3 MB", float64(buf.Len())/1e6)
	}
}
