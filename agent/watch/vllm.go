package watch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// A vLLM engine's own view of its NIXL transfers and of its KV cache, from
// its Prometheus endpoint (vLLM's names: vllm/distributed/kv_transfer/
// kv_connector/v1/nixl/stats.py, NixlPromMetrics; vllm/v1/metrics/
// loggers.py for vllm:cache_config_info). Every series carries the labels
// model_name and engine (the engine's index in its process).

// Histogram is a Prometheus histogram: cumulative buckets by upper bound.
type Histogram struct {
	Count   uint64
	Sum     float64
	Buckets []Bucket // ascending upper bounds, cumulative counts
}

// Bucket is one cumulative bucket.
type Bucket struct {
	LE    float64
	Count uint64
}

// Engine is one vLLM engine's series of one scrape.
type Engine struct {
	Model, Index string
	XferSeconds  Histogram // vllm:nixl_xfer_time_seconds
	PostSeconds  Histogram // vllm:nixl_post_time_seconds
	Bytes        Histogram // vllm:nixl_bytes_transferred
	Descriptors  Histogram // vllm:nixl_num_descriptors
	// FailedTransfers, FailedNotifications and ExpiredRequests are the
	// counters vllm:nixl_num_failed_transfers, _failed_notifications and
	// _kv_expired_reqs (running totals).
	FailedTransfers, FailedNotifications, ExpiredRequests float64
	// Cache is vllm:cache_config_info's labels: every CacheConfig field
	// (block_size, num_gpu_blocks, mamba_page_size_padded, ...), the
	// engine's observed plan. Nil when the engine exports none.
	Cache map[string]string
}

// maxMetricsBytes caps one scrape's body.
const maxMetricsBytes = 16 << 20

// maxMetricsLine caps one line of a scrape's body.
const maxMetricsLine = 1 << 20

// DefaultMaxSeries bounds the series (sample lines) of one scrape when no
// limit is given: vLLM exports a few hundred per engine.
const DefaultMaxSeries = 100_000

// SeriesError is a scrape with more series than the limit allows.
type SeriesError struct {
	Max int // the limit (--max-series)
}

// Error implements error.
func (e *SeriesError) Error() string {
	return fmt.Sprintf("more than %d series (--max-series): not read", e.Max)
}

// ParseMetrics reads vLLM's exposition text into its engines, keyed by
// their engine label, with at most DefaultMaxSeries series (see
// ParseMetricsLimit).
func ParseMetrics(r io.Reader) (map[string]*Engine, error) {
	return ParseMetricsLimit(r, DefaultMaxSeries)
}

// ParseMetricsLimit reads vLLM's exposition text into its engines, keyed
// by their engine label. Series vLLM does not export are left zero. The
// text is read line by line first: more than maxSeries sample lines (0:
// DefaultMaxSeries) is a *SeriesError before anything is decoded, and only
// the families read here (vllm:nixl_* and vllm:cache_config_info) go to
// the Prometheus parser, so a body of other series costs its lines, not
// their decoding.
func ParseMetricsLimit(r io.Reader, maxSeries int) (map[string]*Engine, error) {
	if maxSeries <= 0 {
		maxSeries = DefaultMaxSeries
	}
	var kept bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMetricsLine)
	series := 0
	for sc.Scan() {
		line := sc.Bytes()
		name := line
		if c, ok := bytes.CutPrefix(line, []byte("#")); ok {
			f := bytes.Fields(c)
			if len(f) < 2 {
				continue // a comment
			}
			name = f[1] // # HELP name ..., # TYPE name ...
		} else if len(bytes.TrimSpace(line)) > 0 {
			if series++; series > maxSeries {
				return nil, &SeriesError{maxSeries}
			}
		}
		if bytes.HasPrefix(name, []byte("vllm:nixl_")) || bytes.HasPrefix(name, []byte("vllm:cache_config_info")) {
			kept.Write(line)
			kept.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w (lines are read up to %d bytes)", series+1, err, maxMetricsLine)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return nil, err
	}
	engines := map[string]*Engine{}
	engine := func(m *dto.Metric) *Engine {
		var name, index string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "model_name":
				name = l.GetValue()
			case "engine":
				index = l.GetValue()
			}
		}
		e, ok := engines[index]
		if !ok {
			e = &Engine{Model: name, Index: index}
			engines[index] = e
		}
		return e
	}
	histograms := map[string]func(*Engine) *Histogram{
		"vllm:nixl_xfer_time_seconds": func(e *Engine) *Histogram { return &e.XferSeconds },
		"vllm:nixl_post_time_seconds": func(e *Engine) *Histogram { return &e.PostSeconds },
		"vllm:nixl_bytes_transferred": func(e *Engine) *Histogram { return &e.Bytes },
		"vllm:nixl_num_descriptors":   func(e *Engine) *Histogram { return &e.Descriptors },
	}
	counters := map[string]func(*Engine) *float64{
		"vllm:nixl_num_failed_transfers":     func(e *Engine) *float64 { return &e.FailedTransfers },
		"vllm:nixl_num_failed_notifications": func(e *Engine) *float64 { return &e.FailedNotifications },
		"vllm:nixl_num_kv_expired_reqs":      func(e *Engine) *float64 { return &e.ExpiredRequests },
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case histograms[name] != nil && m.GetHistogram() != nil:
				h := histograms[name](engine(m))
				ph := m.GetHistogram()
				h.Count, h.Sum = ph.GetSampleCount(), ph.GetSampleSum()
				h.Buckets = h.Buckets[:0]
				for _, b := range ph.GetBucket() {
					h.Buckets = append(h.Buckets, Bucket{LE: b.GetUpperBound(), Count: b.GetCumulativeCount()})
				}
				sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].LE < h.Buckets[j].LE })
			case counters[strings.TrimSuffix(name, "_total")] != nil && m.GetCounter() != nil:
				*counters[strings.TrimSuffix(name, "_total")](engine(m)) = m.GetCounter().GetValue()
			case name == "vllm:cache_config_info":
				e := engine(m)
				e.Cache = map[string]string{}
				for _, l := range m.GetLabel() {
					if l.GetName() != "model_name" && l.GetName() != "engine" {
						e.Cache[l.GetName()] = l.GetValue()
					}
				}
			}
		}
	}
	return engines, nil
}

// Scrape fetches and parses one engine process's /metrics. ctx bounds it
// (an engine that does not answer); a body over 16 MiB, of more than
// maxSeries series (0: DefaultMaxSeries) or that is not the exposition
// format is an error naming the URL.
func Scrape(ctx context.Context, client *http.Client, url string, maxSeries int) (map[string]*Engine, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("watch: --vllm-metrics %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("watch: --vllm-metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("watch: --vllm-metrics %s: HTTP %s", url, resp.Status)
	}
	body := io.LimitReader(resp.Body, maxMetricsBytes+1)
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("watch: --vllm-metrics %s: %w", url, err)
	}
	if len(data) > maxMetricsBytes {
		return nil, fmt.Errorf("watch: --vllm-metrics %s: larger than %d bytes", url, maxMetricsBytes)
	}
	engines, err := ParseMetricsLimit(bytes.NewReader(data), maxSeries)
	var se *SeriesError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("watch: --vllm-metrics %s: %w", url, err)
	}
	if err != nil {
		return nil, fmt.Errorf("watch: --vllm-metrics %s: not Prometheus's text format: %w", url, err)
	}
	return engines, nil
}

// Since is what a histogram gained since an earlier scrape of it (all of
// it when the counter went back: the engine restarted).
func (h Histogram) Since(prev Histogram) Histogram {
	if h.Count < prev.Count || len(h.Buckets) != len(prev.Buckets) {
		return h
	}
	out := Histogram{Count: h.Count - prev.Count, Sum: h.Sum - prev.Sum, Buckets: make([]Bucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		out.Buckets[i] = Bucket{LE: b.LE, Count: b.Count - min(b.Count, prev.Buckets[i].Count)}
	}
	return out
}

// Quantile estimates the q-quantile from the buckets, interpolating
// linearly inside the bucket it falls in (as Prometheus's
// histogram_quantile does); NaN without observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Buckets) == 0 {
		return math.NaN()
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, uint64(0)
	for _, b := range h.Buckets {
		if float64(b.Count) >= rank {
			if math.IsInf(b.LE, 1) {
				return lower // above the highest finite bound: its bound
			}
			in := b.Count - below
			if in == 0 {
				return b.LE
			}
			return lower + (b.LE-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = b.LE, b.Count
	}
	return lower
}
