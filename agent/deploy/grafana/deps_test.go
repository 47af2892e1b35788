package grafana_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinariesLeaveOutTheSDK: neither kvscope nor kvscope-agent (with or
// without the nixl tag) depends on Grafana's SDK or on Prometheus' server
// module, which only the dashboards' generator and tests use.
func TestBinariesLeaveOutTheSDK(t *testing.T) {
	forbidden := map[string]string{
		"github.com/grafana/grafana-foundation-sdk": "Grafana's SDK (the dashboards' generator only)",
		"github.com/prometheus/prometheus":          "Prometheus' server module (the dashboards' PromQL test only)",
		"github.com/kvscope/kvscope/agent/deploy":   "the deployment files' packages",
	}
	for _, tags := range []string{"", "nixl"} {
		t.Run("tags="+tags, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-tags", tags, "-f", "{{.ImportPath}}",
				"github.com/kvscope/kvscope/server", "github.com/kvscope/kvscope/agent").CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			pkgs := strings.Fields(string(out))
			if len(pkgs) < 50 {
				t.Fatalf("go list gave %d packages: %s", len(pkgs), out)
			}
			for _, pkg := range pkgs {
				for prefix, why := range forbidden {
					if pkg == prefix || strings.HasPrefix(pkg, prefix+"/") {
						t.Errorf("a binary depends on %s: %s stays out of kvscope and kvscope-agent", pkg, why)
					}
				}
			}
		})
	}
}
