package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvscope/kvscope/agent/metrics"
)

// TestRegistry: what is added, set and observed reads back from the
// Prometheus text format under the same names and labels; an update that
// does not fit its metric's first use is counted, never a panic.
func TestRegistry(t *testing.T) {
	r := metrics.New()
	r.Add("agent_tx_bytes_total", "Bytes moved.", 1<<20, "agent", "a")
	r.Add("agent_tx_bytes_total", "Bytes moved.", 1<<20, "agent", "a")
	r.Add("agent_tx_bytes_total", "Bytes moved.", 7, "agent", "b")
	r.Add("agent_tx_bytes_total", "Bytes moved.", 1, "status", "x") // other label names
	r.Add("agent_tx_bytes_total", "Bytes moved.", -1, "agent", "a") // counters only grow
	r.Set("kvscope_hub_subscribers", "Browsers.", 3)
	r.Set("kvscope_hub_subscribers", "Browsers.", 2)
	r.Set("agent_tx_bytes_total", "a counter as a gauge", 1)
	for i := 1; i <= 1000; i++ {
		r.Observe("agent_xfer_time_us", "Transfer time.", float64(i))
	}
	var sb strings.Builder
	r.Write(&sb)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(sb.String()))
	if err != nil {
		t.Fatalf("%v in\n%s", err, sb.String())
	}
	value := func(name string, labels ...string) float64 {
		f, ok := families[name]
		if !ok {
			t.Fatalf("no %s in\n%s", name, sb.String())
		}
	next:
		for _, m := range f.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.Label {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
		t.Fatalf("%s%v not found", name, labels)
		return 0
	}
	if v := value("agent_tx_bytes_total", "agent", "a"); v != 2<<20 {
		t.Errorf("agent a: %g bytes, want %d", v, 2<<20)
	}
	if v := value("agent_tx_bytes_total", "agent", "b"); v != 7 {
		t.Errorf("agent b: %g", v)
	}
	if v := value("kvscope_hub_subscribers"); v != 2 {
		t.Errorf("gauge %g, want 2", v)
	}
	if v := value("kvscope_metrics_dropped_total"); v != 3 {
		t.Errorf("%g updates dropped, want 3", v)
	}
	s := families["agent_xfer_time_us"].Metric[0].Summary
	if s.GetSampleCount() != 1000 || s.GetSampleSum() != 500500 {
		t.Fatalf("summary %v", s)
	}
	for _, q := range s.Quantile {
		want := map[float64]float64{0.5: 500, 0.99: 990}[q.GetQuantile()]
		if d := q.GetValue() - want; d < -10 || d > 10 {
			t.Errorf("p%g = %g, want about %g", 100*q.GetQuantile(), q.GetValue(), want)
		}
	}
	if families["agent_xfer_time_us"].GetType().String() != "SUMMARY" {
		t.Errorf("type %v", families["agent_xfer_time_us"].GetType())
	}
}

func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		q    float64
		want float64
	}{{nil, 0.5, 0}, {[]float64{3, 1, 2}, 0.5, 2}, {[]float64{1, 2, 3, 4}, 0.99, 4}, {[]float64{5}, 0.01, 5}} {
		if got := metrics.Quantile(c.xs, c.q); got != c.want {
			t.Errorf("Quantile(%v, %g) = %g, want %g", c.xs, c.q, got, c.want)
		}
	}
}
