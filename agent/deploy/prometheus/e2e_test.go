package prometheus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/deploy/deploytest"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/runner"
	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// TestRealPrometheus: Debian's prometheus server on loopback, with
// kvscope's rules loaded, scrapes a watcher reading rings (written by the
// repository's ring writer, watchtest: NIXL is not needed) and a kvscope
// serve. A PromQL query over its HTTP API gives the transfer count and
// bytes the rings hold, and a request held open past --stuck-after
// fires KvscopeStuckTransfer.
func TestRealPrometheus(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	prom, why := deploytest.Prometheus()
	if prom == "" {
		deploytest.Skip(t, why)
	}
	dir := t.TempDir()
	rings := filepath.Join(dir, "rings")
	os.Mkdir(rings, 0o755)
	d0, err := watchtest.NewWriter(rings, "d0-agent", 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []uint64{2 << 20, 3 << 20, 5 << 20}
	var wantBytes uint64
	for _, n := range sizes {
		d0.Push(watchtest.Transfer("rx", n, 15, 700)...)
		wantBytes += n
	}
	d1, err := watchtest.NewWriter(rings, "d1-agent", 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	d1.Push(watch.Raw{Type: "agent_xfer_post_time", Value: 12}) // posted, held open

	const pair = "pd-e2e"
	reg := metrics.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- runner.Watch(ctx, runner.WatchConfig{Name: pair, Dir: rings, Interval: 10 * time.Millisecond, StuckAfter: time.Second,
			Agents: map[string]string{"d0-agent": "d0", "d1-agent": "d1"}, Metrics: reg, Logf: t.Logf})
	}()
	defer func() { cancel(); <-watchErr }()
	watcherAddr := serve(t, reg.Handler())

	serverAddr := kvscopeServe(t, dir)

	promAddr := deploytest.StartPrometheus(t, prom, dir, "rules.yml", map[string]string{"kvscope-watch": watcherAddr, "kvscope-serve": serverAddr})

	deploytest.Eventually(t, 60*time.Second, "the rings' transfers through PromQL", func() error {
		n, err := deploytest.QueryOne(promAddr, `sum(kvscope_transfer_size_bytes_count{pair="`+pair+`"})`)
		if err != nil {
			return err
		}
		b, err := deploytest.QueryOne(promAddr, `sum(kvscope_transfer_size_bytes_sum{pair="`+pair+`"})`)
		if err != nil {
			return err
		}
		if n != float64(len(sizes)) || b != float64(wantBytes) {
			return fmt.Errorf("%g transfers of %g bytes, want %d of %d", n, b, len(sizes), wantBytes)
		}
		return nil
	})
	deploytest.Eventually(t, 30*time.Second, "kvscope serve scraped", func() error {
		up, err := deploytest.QueryOne(promAddr, `up{job="kvscope-serve"}`)
		if err != nil || up != 1 {
			return fmt.Errorf("up %g: %v", up, err)
		}
		return nil
	})
	deploytest.Eventually(t, 60*time.Second, "KvscopeStuckTransfer firing", func() error {
		var r struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"data"`
		}
		if err := getJSON("http://"+promAddr+"/api/v1/alerts", &r); err != nil {
			return err
		}
		for _, a := range r.Data.Alerts {
			if a.Labels["alertname"] == "KvscopeStuckTransfer" && a.Labels["pair"] == pair && a.State == "firing" {
				return nil
			}
		}
		return fmt.Errorf("alerts: %+v", r.Data.Alerts)
	})
}

// kvscopeServe builds and starts kvscope serve (no embedded agent) and
// returns its address once /metrics answers.
func kvscopeServe(t *testing.T, dir string) string {
	t.Helper()
	bin := os.Getenv("KVSCOPE_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "kvscope")
		build := exec.Command("go", "build", "-o", bin, "github.com/kvscope/kvscope/server")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./server: %v\n%s", err, out)
		}
	}
	addr := livetest.FreeAddr(t)
	srv := exec.Command(bin, "serve", "--addr", addr, "--agent", "none", "--data-dir", filepath.Join(dir, "nats"))
	log, _ := os.Create(filepath.Join(dir, "serve.log"))
	srv.Stdout, srv.Stderr = log, log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	deploytest.Eventually(t, 60*time.Second, "kvscope serve's /metrics", func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
	return addr
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
