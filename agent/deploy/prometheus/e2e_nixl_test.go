//go:build nixl && cgo

package prometheus_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/deploy/deploytest"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/runner"
	"github.com/kvscope/kvscope/agent/transfer/nixltest"
)

// TestRealPrometheusOnRealNIXL (make test-nixl): real NIXL v1.4.0 agents
// write their telemetry rings while a real pull moves a request
// (gpt-oss-20b, P TP 2 -> D TP 4, 300 tokens, proved exact on bytes); a
// watcher reads the rings, Debian's prometheus scrapes it, and PromQL
// over its HTTP API gives one transfer per rank pair that moved bytes and
// the bytes the request moved, as NIXL's own completion reported them.
func TestRealPrometheusOnRealNIXL(t *testing.T) {
	prom, why := deploytest.Prometheus()
	if prom == "" {
		deploytest.Skip(t, why)
	}
	dir := t.TempDir()
	rings := filepath.Join(dir, "rings")
	if err := os.Mkdir(rings, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NIXL_TELEMETRY_DIR", rings)
	t.Setenv("NIXL_TELEMETRY_RUN_INTERVAL", "20")
	x, st := nixltest.Pull(t, "kvscope-prom")
	want := 0
	for _, rp := range x.RankPairs {
		if len(rp.Pairs) > 0 {
			want++
		}
	}

	const pair = "pd-nixl"
	reg := metrics.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- runner.Watch(ctx, runner.WatchConfig{Name: pair, Dir: rings, Interval: 10 * time.Millisecond, Metrics: reg, Logf: t.Logf})
	}()
	defer func() { cancel(); <-watchErr }()
	promAddr := deploytest.StartPrometheus(t, prom, dir, "rules.yml", map[string]string{"kvscope-watch": serve(t, reg.Handler())})
	deploytest.Eventually(t, 60*time.Second, "the real rings' transfer through PromQL", func() error {
		n, err := deploytest.QueryOne(promAddr, `sum(kvscope_transfer_size_bytes_count{pair="`+pair+`",source="ring"})`)
		if err != nil {
			return err
		}
		got, err := deploytest.QueryOne(promAddr, `sum(kvscope_transfer_size_bytes_sum{pair="`+pair+`",source="ring"})`)
		if err != nil {
			return err
		}
		if n != float64(want) || got != float64(st.Bytes) {
			return fmt.Errorf("%g transfers of %g bytes, want %d of %d (NIXL's completion)", n, got, want, st.Bytes)
		}
		return nil
	})
}
