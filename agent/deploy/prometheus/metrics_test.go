package prometheus_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/agent/deploy/deploytest"
)

// TestWatcherMetricsPassPromtool: a real watcher's registry, every family
// filled (rings, a vLLM scrape, a stuck request, plan mismatches), is
// clean under promtool check metrics: names, units, _total on counters.
func TestWatcherMetricsPassPromtool(t *testing.T) {
	promtool := needPromtool(t)
	reg := deploytest.Watched(t)
	var text bytes.Buffer
	reg.Write(&text)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text.Bytes())
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics: %v\n%s\n--- the registry:\n%s", err, out, text.String())
	}
	if !strings.Contains(text.String(), "kvscope_transfer_duration_seconds_bucket") {
		t.Fatalf("no transfer histogram:\n%s", text.String())
	}
}

// needPromtool is promtool's path; the test skips without it.
func needPromtool(t *testing.T) string {
	t.Helper()
	promtool, why := deploytest.Promtool()
	if promtool == "" {
		deploytest.Skip(t, why)
	}
	return promtool
}
