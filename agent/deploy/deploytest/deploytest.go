// Package deploytest fills the real registries kvscope exports for the
// deployment files' tests: a kvscope-agent watch (runner.Watch) reading
// NIXL telemetry rings written by the repository's ring writer
// (watchtest), scraping a vLLM /metrics endpoint with a plan that differs
// from kvscope's, with a request in flight past --stuck-after; and the
// server's hub counting the events such a watcher sends. The rules', the
// dashboards' and the manifests' tests hold what they name against these
// registries, not against a hand-written list.
package deploytest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/runner"
	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// Pair is the engine pair (the watcher's --name) the registries label.
const Pair = "pd-a"

// VLLM serves a vLLM engine's /metrics as vLLM names them: each scrape 10
// more transfers of 1 MB with 40 descriptors each, a failed transfer, an
// expired KV request and a failed notification, and cache_config_info's
// block size 544 (kvscope predicts 16 for the test scenario).
func VLLM(t testing.TB) *httptest.Server {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		fmt.Fprintf(w, `# TYPE vllm:nixl_xfer_time_seconds histogram
vllm:nixl_xfer_time_seconds_bucket{engine="0",le="0.025",model_name="m"} %[1]d
vllm:nixl_xfer_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} %[1]d
vllm:nixl_xfer_time_seconds_count{engine="0",model_name="m"} %[1]d
vllm:nixl_xfer_time_seconds_sum{engine="0",model_name="m"} %[2]g
# TYPE vllm:nixl_bytes_transferred histogram
vllm:nixl_bytes_transferred_bucket{engine="0",le="+Inf",model_name="m"} %[1]d
vllm:nixl_bytes_transferred_count{engine="0",model_name="m"} %[1]d
vllm:nixl_bytes_transferred_sum{engine="0",model_name="m"} %[3]d
# TYPE vllm:nixl_num_descriptors histogram
vllm:nixl_num_descriptors_bucket{engine="0",le="+Inf",model_name="m"} %[1]d
vllm:nixl_num_descriptors_count{engine="0",model_name="m"} %[1]d
vllm:nixl_num_descriptors_sum{engine="0",model_name="m"} %[4]d
# TYPE vllm:nixl_num_failed_transfers_total counter
vllm:nixl_num_failed_transfers_total{engine="0",model_name="m"} %[5]d
# TYPE vllm:nixl_num_failed_notifications_total counter
vllm:nixl_num_failed_notifications_total{engine="0",model_name="m"} %[5]d
# TYPE vllm:nixl_num_kv_expired_reqs_total counter
vllm:nixl_num_kv_expired_reqs_total{engine="0",model_name="m"} %[5]d
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="544",engine="0",model_name="m",num_gpu_blocks="2048"} 1
`, 10*k, 0.02*float64(10*k), 10*k*1_000_000, 10*k*40, k)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Watched runs a watcher until every metric family it exports exists and
// returns its registry (the watcher stopped): two D ranks' rings linked
// by the scenario (d0, d1) with transfers, a NIXL error and dropped
// events, a request posted and never completed past a 50 ms
// --stuck-after, VLLM's engine scraped as D, and a side channel (not
// compared with the plan) answering for its one rank.
func Watched(t testing.TB) *metrics.Registry {
	t.Helper()
	dir := t.TempDir()
	answer, err := watchtest.Answer(watchtest.Metadata("sc-agent", 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := watchtest.NewSideChannel(func(int) []byte { return answer })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	d0 := writer(t, dir, "d0-agent", 4)
	d1 := writer(t, dir, "d1-agent", 1)
	push(t, d0, append(watchtest.Transfer("rx", 2<<20, 15, 400), watchtest.Transfer("rx", 4<<20, 20, 900)...)...)
	push(t, d0, watch.Raw{Type: "agent_err_backend", Value: 1}, watch.Raw{Type: "agent_telemetry_events_dropped", Value: 3})
	push(t, d1, watchtest.Transfer("rx", 1<<20, 10, 300)...)
	push(t, d1, watch.Raw{Type: "agent_xfer_post_time", Value: 12}) // posted, never completed
	srv := VLLM(t)
	reg := metrics.New()
	url := srv.URL + "/metrics"
	c := runner.WatchConfig{Name: Pair, Dir: dir, Interval: 5 * time.Millisecond, VLLMMetrics: []string{url}, ScrapeEvery: 20 * time.Millisecond,
		Sides: map[string]string{url: "D"}, Model: modeltest.Load(t, "Qwen__Qwen3-0.6B"),
		P:            plan.Engine{KVCacheMemoryBytes: 2048 * 16 * 28 * 8 * 128 * 2 * 2, MaxModelLen: 4096},
		D:            plan.Engine{TensorParallelSize: 2, KVCacheMemoryBytes: 2048 * 16 * 28 * 8 * 128 * 2 * 2, MaxModelLen: 4096},
		Agents:       map[string]string{"d0-agent": "d0", "d1-agent": "d1"},
		SideChannels: []runner.SideChannel{{Addr: sc.Addr, TP: 1}},
		StuckAfter:   50 * time.Millisecond, Metrics: reg, Logf: func(string, ...any) {}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Watch(ctx, c) }()
	want := []string{runner.MetricTransferSeconds, runner.MetricTransferBytes, runner.MetricTransferFailures, runner.MetricTelemetryDropped,
		runner.MetricStuckTotal, runner.MetricInFlight, runner.MetricOldestInFlight, runner.MetricStuckNow, runner.MetricPlanMismatch,
		runner.MetricDescriptors, runner.MetricRingUp, runner.MetricTargetUp, runner.MetricRankUp, runner.MetricKVExpired, runner.MetricFailedNotifs}
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing := missingFamilies(reg, want)
		var sb strings.Builder
		reg.Write(&sb)
		stuck := strings.Contains(sb.String(), runner.MetricStuckTotal+`{pair="`+Pair+`",source="ring"} 1`)
		predicted := strings.Contains(sb.String(), `source="predicted"`)
		if len(missing) == 0 && stuck && predicted {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the watcher's registry lacks %v (stuck counted: %v, predicted descriptors: %v):\n%s", missing, stuck, predicted, sb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return reg
}

func missingFamilies(reg *metrics.Registry, want []string) []string {
	have := map[string]bool{}
	for _, n := range reg.Names() {
		have[n] = true
	}
	var out []string
	for _, w := range want {
		if !have[w] {
			out = append(out, w)
		}
	}
	return out
}

func writer(t testing.TB, dir, name string, version int32) *watchtest.Writer {
	t.Helper()
	w, err := watchtest.NewWriter(dir, name, version, 64)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func push(t testing.TB, w *watchtest.Writer, events ...watch.Raw) {
	t.Helper()
	if _, err := w.Push(events...); err != nil {
		t.Fatal(err)
	}
}

// Skip skips a test that needs Debian's prometheus package, or fails it
// where KVSCOPE_REQUIRE_PROMETHEUS is set (CI, which installs it).
func Skip(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("KVSCOPE_REQUIRE_PROMETHEUS") != "" {
		t.Fatalf("KVSCOPE_REQUIRE_PROMETHEUS is set: %s", why)
	}
	t.Skip(why)
}

// Promtool is the path of promtool, or "" with the reason the tests skip:
// Debian's prometheus package installs it (.ci/run does).
func Promtool() (path, why string) {
	return lookTool("promtool")
}

// Prometheus is the path of the prometheus server, as Promtool.
func Prometheus() (path, why string) {
	return lookTool("prometheus")
}

func lookTool(name string) (string, string) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", name + " is not installed (apt-get install prometheus; .ci/run installs it)"
	}
	return p, ""
}
