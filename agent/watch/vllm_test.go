package watch_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
)

// TestParseVLLMMetrics reads vLLM's NIXL histograms, failure counters and
// cache_config_info from an exposition with vLLM's real names, labels and
// buckets (testdata/vllm-metrics.txt names its source). The quantiles are
// interpolated inside the bucket by hand: p50 is rank 100 of 200, in
// (0.01, 0.025] which holds ranks 21 to 120, so 0.01 + 0.015 × 80/100 =
// 0.022; p99 is rank 198, in (0.05, 0.075] (ranks 181 to 200), so 0.05 +
// 0.025 × 18/20 = 0.0725.
func TestParseVLLMMetrics(t *testing.T) {
	f, err := os.Open("testdata/vllm-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	engines, err := watch.ParseMetrics(f)
	if err != nil {
		t.Fatal(err)
	}
	e := engines["0"]
	if e == nil || e.Model != "Qwen/Qwen3-0.6B" || e.XferSeconds.Count != 200 || e.XferSeconds.Sum != 5.1 || e.Bytes.Sum != 2.5e9 ||
		e.PostSeconds.Count != 200 || e.Descriptors.Count != 200 || e.FailedTransfers != 2 || len(e.XferSeconds.Buckets) != 13 {
		t.Fatalf("engine 0: %+v", e)
	}
	if e.Cache["block_size"] != "16" || e.Cache["num_gpu_blocks"] != "41020" || e.Cache["mamba_page_size_padded"] != "None" {
		t.Errorf("cache_config_info: %v", e.Cache)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.022}, {0.99, 0.0725}} {
		if got := e.XferSeconds.Quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("p%v = %v, want %v", c.q*100, got, c.want)
		}
	}
	// What 50 more transfers, all in (0.1, 0.2], add.
	later := e.XferSeconds
	later.Buckets = append([]watch.Bucket(nil), later.Buckets...)
	for i := range later.Buckets {
		if later.Buckets[i].LE >= 0.2 {
			later.Buckets[i].Count += 50
		}
	}
	later.Count, later.Sum = later.Count+50, later.Sum+7.5
	d := later.Since(e.XferSeconds)
	if d.Count != 50 || math.Abs(d.Sum-7.5) > 1e-9 || math.Abs(d.Quantile(0.5)-0.15) > 1e-9 {
		t.Errorf("the delta: %d transfers, %v s, p50 %v; want 50, 7.5, 0.15", d.Count, d.Sum, d.Quantile(0.5))
	}
	if r := e.XferSeconds.Since(later); r.Count != 200 {
		t.Errorf("a counter that went back (a restart) gives %d, want the whole 200", r.Count)
	}
}

// TestScrapeFailures: an endpoint that never answers, one that returns
// garbage and one that fails: each an error naming the URL.
func TestScrapeFailures(t *testing.T) {
	ok, _ := os.ReadFile("testdata/vllm-metrics.txt")
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { w.Write(ok) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("vllm:nixl_xfer_time_seconds_bucket{le=\"0.1\" 12\n<html>"))
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if engines, err := watch.Scrape(context.Background(), srv.Client(), srv.URL+"/metrics", 0); err != nil || engines["0"] == nil {
		t.Fatalf("a good scrape: %v", err)
	}
	for path, want := range map[string]string{"/slow": "deadline", "/garbage": "not Prometheus's text format", "/fail": "HTTP 500"} {
		// The endpoint that never answers meets its deadline; the others
		// answer long before theirs (a hang's ceiling, not a budget).
		limit := 10 * time.Second
		if path == "/slow" {
			limit = 200 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		_, err := watch.Scrape(ctx, srv.Client(), srv.URL+path, 0)
		cancel()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), srv.URL+path) {
			t.Errorf("%s: %v, want an error naming the URL and %q", path, err, want)
		}
	}
}

// FuzzParseMetrics: any body is parsed or refused, never a panic.
func FuzzParseMetrics(f *testing.F) {
	ok, _ := os.ReadFile("testdata/vllm-metrics.txt")
	f.Add(string(ok))
	f.Add("vllm:cache_config_info{block_size=\"16\"} 1\n")
	f.Fuzz(func(t *testing.T, body string) {
		engines, err := watch.ParseMetrics(strings.NewReader(body))
		if err != nil {
			return
		}
		for _, e := range engines {
			e.XferSeconds.Quantile(0.99)
		}
	})
}
