// Package metrics is the agent's and the server's Prometheus registry, on
// github.com/prometheus/client_golang: counters and gauges created on
// first use with the label names of their first use, and summaries
// (p50/p99 over the last ten minutes), and histograms with exemplars.
// Metric names follow NIXL's where
// NIXL has one (agent_tx_bytes_total, agent_xfer_time_us,
// agent_errors_total{status}).
package metrics

import (
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// Registry holds metrics and renders them. It is safe for concurrent use.
type Registry struct {
	reg       *prometheus.Registry
	mu        sync.Mutex
	counters  map[string]*vec[*prometheus.CounterVec]
	gauges    map[string]*vec[*prometheus.GaugeVec]
	summaries map[string]*vec[prometheus.Summary]
	hists     map[string]*vec[*prometheus.HistogramVec]
	dropped   prometheus.Counter
}

// vec is a metric with labels and the label names it was created with.
type vec[V any] struct {
	v     V
	names []string
}

// New makes an empty registry.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry(), counters: map[string]*vec[*prometheus.CounterVec]{},
		gauges: map[string]*vec[*prometheus.GaugeVec]{}, summaries: map[string]*vec[prometheus.Summary]{},
		hists: map[string]*vec[*prometheus.HistogramVec]{}}
	r.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "kvscope_metrics_dropped_total",
		Help: "Updates the registry refused: label names or a type other than the metric's first use, or a negative counter increment."})
	r.reg.MustRegister(r.dropped)
	return r
}

// split reads label pairs ("status", "ERR_MISMATCH") into names and values.
func split(kv []string) (names, values []string) {
	for i := 0; i+1 < len(kv); i += 2 {
		names, values = append(names, kv[i]), append(values, kv[i+1])
	}
	return names, values
}

// lookup finds metric name in m, or makes it with newVec and registers it
// (false: the registry refused it, a name already taken by another type).
func lookup[V prometheus.Collector](r *Registry, m map[string]*vec[V], name string, names []string, newVec func() V) (*vec[V], bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := m[name]; ok {
		return v, true
	}
	v := &vec[V]{newVec(), names}
	if r.reg.Register(v.v) != nil {
		return nil, false
	}
	m[name] = v
	return v, true
}

// Add adds v (not negative) to a counter.
func (r *Registry) Add(name, help string, v float64, labelPairs ...string) {
	names, values := split(labelPairs)
	c, ok := lookup(r, r.counters, name, names, func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, names)
	})
	if !ok || v < 0 || math.IsNaN(v) || !slices.Equal(c.names, names) {
		r.dropped.Inc()
		return
	}
	c.v.WithLabelValues(values...).Add(v)
}

// Set sets a gauge.
func (r *Registry) Set(name, help string, v float64, labelPairs ...string) {
	names, values := split(labelPairs)
	g, ok := lookup(r, r.gauges, name, names, func() *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, names)
	})
	if !ok || !slices.Equal(g.names, names) {
		r.dropped.Inc()
		return
	}
	g.v.WithLabelValues(values...).Set(v)
}

// Observe records one observation of a summary: its p50 and p99 cover the
// last ten minutes.
func (r *Registry) Observe(name, help string, v float64) {
	s, ok := lookup(r, r.summaries, name, nil, func() prometheus.Summary {
		return prometheus.NewSummary(prometheus.SummaryOpts{Name: name, Help: help, Objectives: map[float64]float64{0.5: 0.01, 0.99: 0.001},
			MaxAge: 10 * time.Minute})
	})
	if !ok {
		r.dropped.Inc()
		return
	}
	s.v.Observe(v)
}

// ObserveHistogram records one observation of a histogram with labels,
// its buckets those of its first use. A non-empty exemplar (at most 128
// runes of names and values together, Prometheus' limit) rides on the
// observation: the OpenMetrics exposition shows the last one per bucket.
func (r *Registry) ObserveHistogram(name, help string, buckets []float64, v float64, exemplar prometheus.Labels, labelPairs ...string) {
	names, values := split(labelPairs)
	h, ok := lookup(r, r.hists, name, names, func() *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, names)
	})
	if !ok || math.IsNaN(v) || !slices.Equal(h.names, names) {
		r.dropped.Inc()
		return
	}
	o := h.v.WithLabelValues(values...)
	if eo, ok := o.(prometheus.ExemplarObserver); ok && len(exemplar) > 0 {
		eo.ObserveWithExemplar(v, exemplar)
		return
	}
	o.Observe(v)
}

// Names lists the metric families the registry holds now, sorted (a
// histogram is its family's name, not its _bucket, _sum and _count).
func (r *Registry) Names() []string {
	families, _ := r.reg.Gather()
	out := make([]string, 0, len(families))
	for _, f := range families {
		out = append(out, f.GetName())
	}
	return out
}

// Register adds a collector (the event log's figures, read when scraped).
func (r *Registry) Register(c prometheus.Collector) error { return r.reg.Register(c) }

// Handler serves the registry: the Prometheus text format, or
// OpenMetrics (with the histograms' exemplars) to a scraper that asks.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true})
}

// Write renders every metric in the Prometheus text format.
func (r *Registry) Write(w io.Writer) {
	families, _ := r.reg.Gather() // what gathered is written even when a collector failed
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		enc.Encode(f)
	}
}

// Quantile returns a quantile of a list of observations.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
