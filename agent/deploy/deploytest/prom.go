package deploytest

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kvscope/kvscope/server/live/livetest"
)

// StartPrometheus runs the prometheus server prom on loopback with the
// rule file rules, scraping each job's target (job name: host:port) every
// second, until the test ends; its log is printed when the test fails. It
// returns the server's address.
func StartPrometheus(t testing.TB, prom, dir, rules string, jobs map[string]string) string {
	t.Helper()
	addr := livetest.FreeAddr(t)
	rules, err := filepath.Abs(rules)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [%q]\nscrape_configs:\n", rules)
	for job, target := range jobs {
		cfg += fmt.Sprintf("  - job_name: %s\n    static_configs: [{targets: [%q]}]\n", job, target)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prom, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	return addr
}

// Query runs an instant PromQL query on the prometheus server at addr and
// returns its samples' values: one for a scalar, one a series for a
// vector (NaN for each series of a range vector).
func Query(addr, expr string) ([]float64, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
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
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", expr, r.Status, r.Error)
	}
	number := func(raw json.RawMessage) (float64, error) {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("%s: sample value %s: %w", expr, raw, err)
		}
		return strconv.ParseFloat(s, 64)
	}
	if r.Data.ResultType == "scalar" { // the result is the sample itself: [time, "value"]
		if len(r.Data.Result) != 2 {
			return nil, fmt.Errorf("%s: a scalar of %d parts", expr, len(r.Data.Result))
		}
		v, err := number(r.Data.Result[1])
		return []float64{v}, err
	}
	values := make([]float64, 0, len(r.Data.Result))
	for _, raw := range r.Data.Result {
		var series struct {
			Value []json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &series); err != nil {
			return nil, fmt.Errorf("%s: %w", expr, err)
		}
		if len(series.Value) != 2 { // a range vector's series: values, not a value
			values = append(values, math.NaN())
			continue
		}
		v, err := number(series.Value[1])
		if err != nil {
			return nil, err
		}
		values = append(values, v)
	}
	return values, nil
}

// QueryOne is Query for an expression that gives one sample.
func QueryOne(addr, expr string) (float64, error) {
	v, err := Query(addr, expr)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("%s: %d results, want 1", expr, len(v))
	}
	return v[0], nil
}

// Eventually calls f every 250 ms until it returns nil, failing t with
// f's last error if that takes longer than within.
func Eventually(t testing.TB, within time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, within, err)
}
