package runner

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
)

// peaks samples the process's resident set and Go heap until stop.
type peaks struct {
	rss, heap atomic.Uint64
	stop      chan struct{}
	done      chan struct{}
}

func samplePeaks() *peaks {
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM (Linux); best effort
	p := &peaks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > p.heap.Load() {
				p.heap.Store(m.HeapInuse)
			}
			if r := procStatus("VmRSS"); r > p.rss.Load() {
				p.rss.Store(r)
			}
			select {
			case <-p.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return p
}

// end stops sampling: peak RSS (the larger of VmHWM and the samples)
// and peak heap, in bytes.
func (p *peaks) end() (rss, heap uint64) {
	close(p.stop)
	<-p.done
	return max(p.rss.Load(), procStatus("VmHWM")), p.heap.Load()
}

// procStatus reads a kB field of /proc/self/status, in bytes (0 off Linux).
func procStatus(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// endlessPeer is a ZMTP 3 ROUTER (its bytes written from the spec) that
// answers every connection with a delimiter and then 1 MiB frames, each
// flagged MORE, until the client hangs up; sent counts the bytes.
func endlessPeer(t *testing.T, sent *atomic.Int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	head := append([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 0}, "NULL"...)
	head = append(head, make([]byte, 48)...)
	head = append(head, 0x04, 28, 5, 'R', 'E', 'A', 'D', 'Y', 11)
	head = append(head, "Socket-Type\x00\x00\x00\x06ROUTER"...)
	head = append(head, 0x01, 0)
	frame := binary.BigEndian.AppendUint64([]byte{0x03}, 1<<20)
	frame = append(frame, make([]byte, 1<<20)...)
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(io.Discard, c) }()
			go func() {
				defer wg.Done()
				defer c.Close()
				c.Write(head)
				for {
					n, err := c.Write(frame)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

// TestStormWatch runs the hostile inputs of issue 24's probe at the
// probe's sizes through the whole watcher, each alone, and prints a
// "soak:" line per input: its outcome, the watcher's streams, and the
// process's peak RSS and Go heap while it ran. make soak runs it.
func TestStormWatch(t *testing.T) {
	if os.Getenv("KVSCOPE_SOAK") == "" {
		t.Skip("a storm: set KVSCOPE_SOAK=1 (make soak)")
	}
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	const maxRSS = 2 << 30
	serve := func(t *testing.T, body []byte) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }))
		t.Cleanup(srv.Close)
		return srv.URL + "/metrics"
	}
	for _, c := range []struct {
		name string
		// setup fills the config; outcome is the log line that shows the
		// input was read (and refused, where it is), polled for up to run
		// plus 30 s; run is how long the input goes on (0: until outcome).
		setup   func(t *testing.T, cfg *WatchConfig) (outcome []string)
		run     time.Duration
		streams int
	}{
		{"8,000 engine labels in one /metrics", func(t *testing.T, cfg *WatchConfig) []string {
			cfg.VLLMMetrics = []string{serve(t, []byte(engineLabels(8000)))}
			return []string{"(4096 refused so far)"}
		}, 0, DefaultMaxAgents},
		{"10,000 junk files", func(t *testing.T, cfg *WatchConfig) []string {
			for i := range 10_000 {
				if err := os.WriteFile(filepath.Join(cfg.Dir, fmt.Sprintf("junk-%05d", i)), []byte("junk"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return []string{"refused junk-09999", "shorter than the 40-byte header"}
		}, 0, 0},
		{"10^6 series in one /metrics", func(t *testing.T, cfg *WatchConfig) []string {
			var b strings.Builder
			for i := range 1_000_000 {
				fmt.Fprintf(&b, "s%d 1\n", i)
			}
			url := serve(t, []byte(b.String()))
			cfg.VLLMMetrics = []string{url}
			return []string{url, "more than 100000 series"}
		}, 0, 1},
		{"10 M block_lens in a side channel answer", func(t *testing.T, cfg *WatchConfig) []string {
			lens := make([]int, 10_000_000)
			answer, err := watchtest.Answer(watchtest.Metadata("agent-big", 0, map[string]any{"block_lens": lens}))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := watchtest.NewSideChannel(func(int) []byte { return answer })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sc.Close)
			cfg.SideChannels = []SideChannel{{Addr: sc.Addr, TP: 1}}
			return []string{"--side-channel " + sc.Addr, "more than 262144 values"}
		}, 0, 1},
		{"endless multi-frame answers for 5 s", func(t *testing.T, cfg *WatchConfig) []string {
			var sent atomic.Int64
			addr := endlessPeer(t, &sent)
			cfg.SideChannels = []SideChannel{{Addr: addr, TP: 1}}
			cfg.SideChannelEvery = 50 * time.Millisecond
			t.Cleanup(func() { t.Logf("the endless peer sent %d MiB", sent.Load()>>20) })
			return []string{"--side-channel " + addr, "limit on an answer"}
		}, 5 * time.Second, 1},
		{"a side channel naming a new agent per answer for 5 s", func(t *testing.T, cfg *WatchConfig) []string {
			var n atomic.Int64
			sc, err := watchtest.NewSideChannel(func(rank int) []byte {
				b, _ := watchtest.Answer(watchtest.Metadata(fmt.Sprintf("agent-%d", n.Add(1)), rank, nil))
				return b
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sc.Close)
			cfg.SideChannels = []SideChannel{{Addr: sc.Addr, TP: 64}}
			cfg.SideChannelEvery = 10 * time.Millisecond
			return []string{"not streamed"}
		}, 5 * time.Second, DefaultMaxAgents},
		{"4 rings truncated under the mapping", func(t *testing.T, cfg *WatchConfig) []string {
			for i := range 4 {
				w, err := watchtest.NewWriter(cfg.Dir, fmt.Sprintf("ring-%d", i), 4, 4096)
				if err != nil {
					t.Fatal(err)
				}
				for range 300 {
					w.Push(watchtest.Transfer("rx", 4096, 7, 120)...)
				}
				path := w.Path
				time.AfterFunc(300*time.Millisecond, func() {
					w.Push(watchtest.Transfer("rx", 4096, 7, 120)...)
					os.Truncate(path, watch.HeaderBytes)
				})
			}
			return []string{"ring-3", "truncated or replaced under the reader"}
		}, 0, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var streams atomic.Int64
			log := &lines{}
			cfg := WatchConfig{Name: "storm", Dir: t.TempDir(), Interval: 10 * time.Millisecond, Logf: log.logf,
				SideChannelEvery: time.Hour, sink: func(string) Sink { streams.Add(1); return discard{} }}
			want := c.setup(t, &cfg)
			debug.FreeOSMemory() // what the setup built and dropped is not the watcher's
			p := samplePeaks()
			start := time.Now()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- Watch(ctx, cfg) }()
			outcome := "not seen"
			for deadline := start.Add(c.run + 30*time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if log.count(want...) > 0 && time.Since(start) >= c.run {
					outcome = "seen"
					break
				}
			}
			took := time.Since(start)
			cancel()
			err := <-errc
			rss, heap := p.end()
			line := ""
			for _, g := range log.got {
				if strings.Contains(g, want[len(want)-1]) {
					line = g
					break
				}
			}
			fmt.Printf("soak: watch %s: %s after %s, %d streams, %d log lines, peak RSS %d MiB, peak heap %d MiB; %q\n",
				c.name, outcome, took.Round(time.Millisecond), streams.Load(), len(log.got), rss>>20, heap>>20, clipLine(line))
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
			if outcome != "seen" {
				t.Errorf("no log line says %q", want)
			}
			if n := streams.Load(); n > int64(c.streams) {
				t.Errorf("%d streams, want at most %d", n, c.streams)
			}
			if rss > maxRSS {
				t.Errorf("peak RSS %d MiB, over %d", rss>>20, maxRSS>>20)
			}
		})
	}
}

// clipLine clips a log line for the soak line.
func clipLine(s string) string {
	if len(s) > 240 {
		return s[:240] + "…"
	}
	return s
}
