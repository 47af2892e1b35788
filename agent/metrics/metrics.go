// Package metrics is a small Prometheus text-format registry for the agent
// and the server: counters and gauges with labels, and a summary whose
// quantiles come from a bounded window of recent observations. Metric names
// follow NIXL's where NIXL has one (agent_tx_bytes_total,
// agent_xfer_time_us, agent_errors_total{status}).
package metrics

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
)

// Registry holds metrics and renders them. It is safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	metrics map[string]*metric
	order   []string
}

type metric struct {
	name, help, typ string
	values          map[string]float64 // label set -> value
	window          []float64          // summary: recent observations
	next            int
	count           uint64
	sum             float64
}

// New makes an empty registry.
func New() *Registry { return &Registry{metrics: map[string]*metric{}} }

func (r *Registry) get(name, help, typ string) *metric {
	m, ok := r.metrics[name]
	if !ok {
		m = &metric{name: name, help: help, typ: typ, values: map[string]float64{}}
		r.metrics[name] = m
		r.order = append(r.order, name)
	}
	return m
}

// labels renders label pairs ("status", "ERR_MISMATCH") as {status="ERR_MISMATCH"}.
func labels(kv []string) string {
	if len(kv) == 0 {
		return ""
	}
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(kv[i+1])
		parts = append(parts, fmt.Sprintf(`%s="%s"`, kv[i], v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Add adds to a counter.
func (r *Registry) Add(name, help string, v float64, labelPairs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(name, help, "counter").values[labels(labelPairs)] += v
}

// Set sets a gauge.
func (r *Registry) Set(name, help string, v float64, labelPairs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(name, help, "gauge").values[labels(labelPairs)] = v
}

// Observe records one observation of a summary (the last 1024 give its
// quantiles).
func (r *Registry) Observe(name, help string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.get(name, help, "summary")
	if len(m.window) < 1024 {
		m.window = append(m.window, v)
	} else {
		m.window[m.next] = v
		m.next = (m.next + 1) % len(m.window)
	}
	m.count++
	m.sum += v
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

// Write renders every metric in the Prometheus text format.
func (r *Registry) Write(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range r.order {
		m := r.metrics[name]
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		if m.typ == "summary" {
			for _, q := range []float64{0.5, 0.99} {
				fmt.Fprintf(w, "%s{quantile=\"%g\"} %g\n", m.name, q, Quantile(m.window, q))
			}
			fmt.Fprintf(w, "%s_sum %g\n%s_count %d\n", m.name, m.sum, m.name, m.count)
			continue
		}
		keys := make([]string, 0, len(m.values))
		for k := range m.values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s%s %g\n", m.name, k, m.values[k])
		}
	}
}
