package runner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch/watchtest"
)

// lines collects a watcher's log.
type lines struct {
	mu  sync.Mutex
	got []string
}

func (l *lines) logf(format string, args ...any) {
	l.mu.Lock()
	l.got = append(l.got, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// count is how many lines say all of want.
func (l *lines) count(want ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, g := range l.got {
		for _, w := range want {
			if !strings.Contains(g, w) {
				continue next
			}
		}
		n++
	}
	return n
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("no %s", what)
}

// engineLabels is a /metrics of n engines, one counter each.
func engineLabels(n int) string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:nixl_num_failed_transfers_total counter\n")
	for i := range n {
		fmt.Fprintf(&b, "vllm:nixl_num_failed_transfers_total{model_name=\"m\",engine=\"%d\"} 0\n", i)
	}
	return b.String()
}

// TestWatchMaxAgents: however many agents its inputs name (engine labels
// of a scrape, NIXL agents of a side channel's answers, junk files in the
// telemetry directory), the watcher streams at most MaxAgents, and says
// how many it refused.
func TestWatchMaxAgents(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	const maxAgents = 16
	for _, c := range []struct {
		name  string
		setup func(t *testing.T, cfg *WatchConfig)
		// done is true once the inputs were read; want is what the log
		// says of them.
		done func(l *lines) bool
		want []string
	}{
		{"8,000 engine labels in one /metrics", func(t *testing.T, cfg *WatchConfig) {
			body := engineLabels(8000)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(body)) }))
			t.Cleanup(srv.Close)
			cfg.VLLMMetrics = []string{srv.URL + "/metrics"}
		}, func(l *lines) bool { return l.count("refused so far") >= 12 }, // 2^12 < 8000-16 < 2^13
			[]string{"not streamed", "the most --max-agents allows"}},
		{"a side channel naming a new agent per answer", func(t *testing.T, cfg *WatchConfig) {
			var n atomic.Int64
			sc, err := watchtest.NewSideChannel(func(rank int) []byte {
				b, err := watchtest.Answer(watchtest.Metadata(fmt.Sprintf("agent-%d", n.Add(1)), rank, nil))
				if err != nil {
					t.Error(err)
				}
				return b
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sc.Close)
			cfg.SideChannels = []SideChannel{{Addr: sc.Addr, Side: "d", TP: 600}}
		}, func(l *lines) bool { return l.count("refused so far") >= 9 }, // 2^9 < 600-16
			[]string{"not streamed"}},
		{"2,000 junk files", func(t *testing.T, cfg *WatchConfig) {
			for i := range 2000 {
				if err := os.WriteFile(filepath.Join(cfg.Dir, fmt.Sprintf("junk-%04d", i)), []byte("junk"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, func(l *lines) bool { return l.count("refused junk-") == 2000 },
			[]string{"shorter than the 40-byte header"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var streams atomic.Int64
			log := &lines{}
			cfg := WatchConfig{Name: "gpu7", Dir: t.TempDir(), Interval: 5 * time.Millisecond, MaxAgents: maxAgents, Logf: log.logf,
				SideChannelEvery: time.Hour, sink: func(string) Sink { streams.Add(1); return discard{} }}
			c.setup(t, &cfg)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- Watch(ctx, cfg) }()
			waitFor(t, "the inputs read", func() bool { return c.done(log) })
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if n := streams.Load(); n > maxAgents {
				t.Errorf("%d streams, want at most %d", n, maxAgents)
			}
			if log.count(c.want...) == 0 {
				t.Errorf("no log line says %q: %q", c.want, log.got[:min(len(log.got), 5)])
			}
		})
	}
}

// TestWatchLogsErrorsWithoutServer: with no server, a failing scrape and
// a side channel nobody answers are logged, naming the URL and address.
func TestWatchLogsErrorsWithoutServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", 500) }))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	log := &lines{}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Name: "gpu7", Logf: log.logf, VLLMMetrics: []string{srv.URL + "/metrics"},
			SideChannels: []SideChannel{{Addr: addr, TP: 1}}, SideChannelTimeout: 200 * time.Millisecond})
	}()
	waitFor(t, "both errors logged", func() bool {
		return log.count(srv.URL+"/metrics", "HTTP 500") > 0 && log.count("--side-channel "+addr) > 0
	})
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
