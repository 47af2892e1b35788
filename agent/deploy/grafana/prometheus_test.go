package grafana_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/deploy/deploytest"
	"github.com/kvscope/kvscope/agent/deploy/grafana"
)

// TestDashboardQueriesRunOnPrometheus: Debian's prometheus server on
// loopback, with rules.yml loaded, scrapes a real watcher's and a real
// hub's registries; every query of both dashboards, with Grafana's
// variables put in (pair as deploytest.Pair), evaluates without error
// (no vector-matching or type error the parser cannot see) and returns
// series: the registries hold every kind of figure, so a query that finds
// none selects a label or value kvscope does not export.
func TestDashboardQueriesRunOnPrometheus(t *testing.T) {
	prom, why := deploytest.Prometheus()
	if prom == "" {
		deploytest.Skip(t, why)
	}
	watcher := httptest.NewServer(deploytest.Watched(t).Handler())
	defer watcher.Close()
	hub := httptest.NewServer(deploytest.Served(t).Handler())
	defer hub.Close()
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: kvscope-watch
    static_configs: [{targets: [%q]}]
  - job_name: kvscope-serve
    static_configs: [{targets: [%q]}]
`, rules, strings.TrimPrefix(watcher.URL, "http://"), strings.TrimPrefix(hub.URL, "http://"))
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prom, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	}()
	// Three scrapes of each target and the recording rules evaluated on
	// them: rate() and the rules' series exist from then on.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n, err := promQuery(addr, `count_over_time(kvscope_transfers_in_flight[1m]) >= 3 and on() count_over_time(kvscope_hub_events_total{kind="transfer_done"}[1m]) >= 3 and on() count(kvscope:transfer_gbps:ratio_to_best) > 0`)
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus has not scraped both registries three times and recorded the rules: %v", err)
		}
	}
	files, err := grafana.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			var d any
			if err := json.Unmarshal(f.JSON, &d); err != nil {
				t.Fatal(err)
			}
			for _, q := range dashboardQueries(t, d) {
				expr := strings.ReplaceAll(q.expr, `"x"`, `"`+deploytest.Pair+`"`)
				n, err := promQuery(addr, expr)
				if err != nil {
					t.Errorf("%s: %s: %v", q.where, expr, err)
				} else if n == 0 {
					t.Errorf("%s: %s returns no series (a label or value the watcher does not export?)", q.where, expr)
				}
			}
		})
	}
}

// promQuery runs an instant query and returns how many series it gave.
func promQuery(addr, expr string) (int, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s: %s", r.Status, r.Error)
	}
	if r.Data.ResultType == "scalar" {
		return 1, nil
	}
	return len(r.Data.Result), nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
