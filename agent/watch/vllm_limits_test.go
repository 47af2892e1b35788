package watch_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/agent/watch"
)

// seriesBody is n sample lines of a family named name, one engine label each.
func seriesBody(name string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE %s counter\n", name)
	for i := range n {
		fmt.Fprintf(&b, "%s{model_name=\"m\",engine=\"%d\"} 1\n", name, i)
	}
	return b.String()
}

// TestScrapeSeriesLimit: a /metrics of more series than --max-series is
// refused, naming the URL and the limit, before it is decoded; one within
// it is read, every engine label an engine.
func TestScrapeSeriesLimit(t *testing.T) {
	for _, c := range []struct {
		name      string
		body      string
		maxSeries int
		engines   int    // when read
		want      string // when refused
	}{
		{"8,000 engine labels within the limit", seriesBody("vllm:nixl_num_failed_transfers_total", 8000), 10_000, 8000, ""},
		{"one series over the limit", seriesBody("vllm:nixl_num_failed_transfers_total", 501), 500, 0, "more than 500 series (--max-series)"},
		{"200,000 series of other families at the default", seriesBody("other_total", 200_000), 0, 0, fmt.Sprintf("more than %d series", watch.DefaultMaxSeries)},
		{"other families are not decoded", seriesBody("other_total", 50_000) + "\n" + seriesBody("vllm:nixl_num_failed_transfers_total", 2), 0, 2, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(c.body)) }))
			defer srv.Close()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			engines, err := watch.Scrape(context.Background(), srv.Client(), srv.URL+"/metrics", c.maxSeries)
			runtime.ReadMemStats(&after)
			if c.want != "" {
				var se *watch.SeriesError
				if err == nil || !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), srv.URL) {
					t.Fatalf("err %v: want a *watch.SeriesError naming %s and saying %q", err, srv.URL, c.want)
				}
			} else if err != nil || len(engines) != c.engines {
				t.Fatalf("%d engines, %v: want %d", len(engines), err, c.engines)
			}
			// The body is at most a few MiB; decoding every series of it
			// into Prometheus's structures would cost some fifty times more.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(c.body))+(16<<20) {
				t.Errorf("allocated %d bytes for a body of %d", alloc, len(c.body))
			}
		})
	}
}
