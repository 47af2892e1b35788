package grafana_test

import (
	"encoding/json"
	"net/http/httptest"
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
	addr := deploytest.StartPrometheus(t, prom, t.TempDir(), rulesFile, map[string]string{
		"kvscope-watch": strings.TrimPrefix(watcher.URL, "http://"), "kvscope-serve": strings.TrimPrefix(hub.URL, "http://")})
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
	v, err := deploytest.Query(addr, expr)
	return len(v), err
}
