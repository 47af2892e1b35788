package runner

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/watch"
)

// BenchmarkWatchScrape is one Prometheus scrape of a registry holding 8
// engine pairs' watchers, each with 8 engines' 8 ranks (64 rings, one
// request in flight each) and transfers on all 64 rank pairs of a TP 8 →
// TP 8 pair: the histograms' series, the gauges read from the watchers'
// state. It reports the series per engine pair.
func BenchmarkWatchScrape(b *testing.B) {
	const pairs, engines, ranks = 8, 8, 8
	reg := metrics.New()
	for p := range pairs {
		name := fmt.Sprintf("pd-%d", p)
		w := &watcher{cfg: WatchConfig{Name: name, Metrics: reg, StuckAfter: time.Minute, MaxAgents: DefaultMaxAgents},
			agents: map[string]*watched{}, links: map[string]link{}, state: newWatchState()}
		w.initMetrics()
		for e := range engines {
			for r := range ranks {
				ring := fmt.Sprintf("e%d-r%d", e, r)
				w.agents[ring] = &watched{name: name + "/" + ring, ring: 4, inFlight: []inFlight{{at: time.Now(), id: "post-1"}}}
			}
			w.state.targets[fmt.Sprintf("http://10.0.%d.%d:8000/metrics", p, e)] = targetState{"vllm_metrics", true}
		}
		for pr := range ranks {
			for dr := range ranks {
				ps, ds := strconv.Itoa(pr), strconv.Itoa(dr)
				for i := range 4 {
					t := watch.Transfer{Bytes: uint64(1<<20) << i, XferUS: 200 << i}
					reg.ObserveHistogram(MetricTransferSeconds, helpTransferSeconds, transferSecondsBuckets, float64(t.XferUS)/1e6, nil,
						"pair", name, "p_rank", ps, "d_rank", ds, "source", sourceRing)
					reg.ObserveHistogram(MetricTransferBytes, helpTransferBytes, transferBytesBuckets, float64(t.Bytes), nil,
						"pair", name, "p_rank", ps, "d_rank", ds, "source", sourceRing)
				}
			}
		}
	}
	h := reg.Handler()
	scrape := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec
	}
	body := scrape().Body.Bytes()
	series := 0
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(line) > 0 && line[0] != '#' {
			series++
		}
	}
	for b.Loop() {
		scrape()
	}
	b.ReportMetric(float64(series)/pairs, "series/pair")
	b.ReportMetric(float64(len(body)), "bytes/scrape")
}
