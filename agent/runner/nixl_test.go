//go:build nixl && cgo

package runner

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/xfer"
)

// These tests drive the runner with the nixl backend (NIXL over UCX, see
// agent/transfer/NIXL.md): the events and metrics it reports, and its
// failures.

// metricValues reads the registry's samples in the Prometheus text format:
// "name" or "name{labels}" to value.
func metricValues(t *testing.T, r *Runner) map[string]float64 {
	t.Helper()
	var buf bytes.Buffer
	r.Metrics.Write(&buf)
	out := map[string]float64{}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// nixlKinds names each of the scenario model's layers' kinds.
func nixlKinds(r *Runner) map[string]string {
	kinds := map[string]string{}
	for _, l := range r.Model.Layers {
		kinds[l.Name] = string(l.Kind)
	}
	return kinds
}

// TestNIXLRunnerMetrics: with the nixl backend every transfer_done carries
// NIXL's telemetry (measured, source nixl), and the agent's agent_* and
// descriptor metrics are sums of exactly those numbers, not of kvscope's
// own clock.
func TestNIXLRunnerMetrics(t *testing.T) {
	const n = 5
	out := &sink{}
	r := newRunner(t, testScenario(n), nil, out)
	b, err := transfer.NewNIXL("kvscope-runner-metrics", nixlKinds(r))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r.Backend = b
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var bytes, descs, merged int64
	var us float64
	var dones []*event.DoneData
	for _, e := range out.all() {
		switch e.Kind {
		case event.Error:
			t.Fatalf("error event %+v", e.Error)
		case event.Hello:
			if e.Hello.Backend != "nixl/UCX" {
				t.Fatalf("backend %q, want nixl/UCX", e.Hello.Backend)
			}
		case event.TransferDone:
			d := e.Done
			if d.Verified != "exact" || d.Timing != event.Measured || d.Source != "nixl" || d.TransferUS <= 0 {
				t.Fatalf("%s: verified %s, timing %s by %q, %.1f µs; want exact, measured by nixl, > 0", d.Request, d.Verified, d.Timing, d.Source, d.TransferUS)
			}
			dones = append(dones, d)
			bytes += d.Bytes
			descs += int64(d.Descs)
			merged += int64(d.Merged)
			us += d.TransferUS
		}
	}
	if len(dones) != n {
		t.Fatalf("%d transfers done, want %d", len(dones), n)
	}
	got := metricValues(t, r)
	for _, m := range []struct {
		name string
		want float64
	}{
		{"agent_tx_bytes_total", float64(bytes)},                    // NIXL's totalBytes
		{"agent_xfer_time_us_count", n},                             // one observation per request
		{"agent_xfer_time_us_sum", us},                              // NIXL's start to start + xferDuration
		{"kvscope_agent_descriptors_merged_total", float64(merged)}, // NIXL's descCount
		{"kvscope_agent_descriptors_total", float64(descs)},
		{`kvscope_agent_transfers_total{verified="exact"}`, n},
	} {
		v, ok := got[m.name]
		if !ok {
			t.Errorf("no %s among the metrics %v", m.name, got)
			continue
		}
		if math.Abs(v-m.want) > 1e-9*math.Max(1, math.Abs(m.want)) {
			t.Errorf("%s = %v, want %v (the transfer_done events' sum)", m.name, v, m.want)
		}
	}
	// The p50 the summary reports is one of the observations NIXL measured.
	p50, ok := got[`agent_xfer_time_us{quantile="0.5"}`]
	found := false
	for _, d := range dones {
		found = found || d.TransferUS == p50
	}
	if !ok || !found {
		t.Errorf("agent_xfer_time_us p50 %v (present %v) is none of NIXL's transfer times", p50, ok)
	}
}

// badDescriptor moves one request's transfer (the nth Prepare) with its
// last descriptor pair past the end of P's region, as a bug in the plan
// or a lying peer would, and the others untouched.
type badDescriptor struct {
	transfer.Backend
	nth      int64
	prepares atomic.Int64
}

func (b *badDescriptor) Prepare(x *xfer.Transfer) (*transfer.Prepared, error) {
	if b.prepares.Add(1) != b.nth {
		return b.Backend.Prepare(x)
	}
	bad := *x
	bad.RankPairs = append([]xfer.RankPair(nil), x.RankPairs...)
	rp := &bad.RankPairs[len(bad.RankPairs)-1]
	rp.Pairs = append([]xfer.Pair(nil), rp.Pairs...)
	q := &rp.Pairs[len(rp.Pairs)-1]
	q.Src.Offset = x.PRegs[rp.P].Regions[q.Src.Region].Bytes() - q.Len + 64
	return b.Backend.Prepare(&bad)
}

// remoteBadDescriptor is badDescriptor over D's backend of a two-agent
// deployment: P's blocks are filled by the P agent.
type remoteBadDescriptor struct{ *badDescriptor }

func (b remoteBadDescriptor) Prefill(q transfer.PrefillRequest) error {
	return b.Backend.(transfer.Prefiller).Prefill(q)
}

// renamedP is a P agent whose NIXL hello names another agent than the one
// its metadata blob describes.
type renamedP struct {
	transfer.NIXLSide
	agent string
}

func (p renamedP) NIXLHello() (transfer.NIXLHello, error) {
	h, err := p.NIXLSide.NIXLHello()
	h.Agent = p.agent
	return h, err
}

// serveNIXLP runs a P agent (the runner's ServeP over a one-sided NIXL
// backend, wrapped by wrap) on a loopback port until the test ends.
func serveNIXLP(t *testing.T, s scenario.Scenario, name string, wrap func(transfer.NIXLSide) transfer.NIXLSide) string {
	t.Helper()
	p := newRunner(t, s, nil, &sink{})
	b, err := transfer.NewNIXLSide(name, xfer.P, nixlKinds(p))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	p.Backend = wrap(b)
	go func() { done <- p.ServeP(ctx, p.Backend, ln, "tok") }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the P agent did not stop")
		}
		b.Close()
	})
	return ln.Addr().String()
}

// TestNIXLRunnerFailures: failures of a NIXL deployment reach the runner's
// events as error events naming the cause, and the requests around them
// stay exact.
func TestNIXLRunnerFailures(t *testing.T) {
	const n = 4
	s := testScenario(n)
	same := func(b transfer.NIXLSide) transfer.NIXLSide { return b }

	t.Run("descriptors out of a registered region", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			backend func(t *testing.T, r *Runner) transfer.Backend
			role    string
			cause   string
		}{
			{"one process", func(t *testing.T, r *Runner) transfer.Backend {
				b, err := transfer.NewNIXL("kvscope-runner-bad", nixlKinds(r))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return &badDescriptor{Backend: b, nth: 2}
			}, "both", "outside its"},
			{"two agents: outside what P advertised", func(t *testing.T, r *Runner) transfer.Backend {
				addr := serveNIXLP(t, s, "kvscope-runner-badp", same)
				b, err := transfer.NewNIXLRemote("kvscope-runner-badd", addr, "tok", nixlKinds(r))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return remoteBadDescriptor{&badDescriptor{Backend: b, nth: 2}}
			}, "d", "advertised"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out := &sink{}
				r := newRunner(t, s, nil, out)
				r.Backend, r.Role = tc.backend(t, r), tc.role
				if err := r.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				var errs []*event.ErrorData
				exact := map[string]bool{}
				for _, e := range out.all() {
					switch e.Kind {
					case event.Error:
						errs = append(errs, e.Error)
					case event.TransferDone:
						if e.Done.Verified != "exact" {
							t.Errorf("%s: %s", e.Done.Request, e.Done.Verified)
						}
						exact[e.Done.Request] = true
					}
				}
				if len(errs) != 1 || errs[0].Request != "req-2" || errs[0].Status != "ERR_INVALID_PARAM" || !strings.Contains(errs[0].Message, tc.cause) {
					t.Fatalf("error events %+v, want one for req-2, ERR_INVALID_PARAM, naming %q", errs, tc.cause)
				}
				for _, id := range []string{"req-1", "req-3", "req-4"} {
					if !exact[id] {
						t.Errorf("%s was not proved exact (the bad descriptor must touch nothing else)", id)
					}
				}
			})
		}
	})

	t.Run("P's NIXL agent has another name", func(t *testing.T) {
		for _, tc := range []struct {
			name, agent, cause string
		}{
			{"the hello names an agent its blob is not", "kvscope-impostor-P", `the hello names agent "kvscope-impostor-P", but its metadata blob is agent "kvscope-runner-named-P"'s`},
			{"the hello names D's own agent", "kvscope-runner-named-d-D", `is named "kvscope-runner-named-d-D", as this one is`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				addr := serveNIXLP(t, s, "kvscope-runner-named", func(b transfer.NIXLSide) transfer.NIXLSide { return renamedP{b, tc.agent} })
				out := &sink{}
				r := newRunner(t, s, nil, out)
				b, err := transfer.NewNIXLRemote("kvscope-runner-named-d", addr, "tok", nixlKinds(r))
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				r.Backend, r.Role = b, "d"
				if err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), tc.cause) {
					t.Fatalf("Run: %v, want a refusal naming %q", err, tc.cause)
				}
				var errs []*event.ErrorData
				for _, e := range out.all() {
					switch e.Kind {
					case event.Error:
						errs = append(errs, e.Error)
					case event.TransferStart, event.Handshake:
						t.Errorf("a %s event after a refused handshake", e.Kind)
					}
				}
				if len(errs) != 1 || !strings.HasPrefix(errs[0].Status, "ERR_") || !strings.Contains(errs[0].Message, tc.cause) {
					t.Fatalf("error events %+v, want one naming %q", errs, tc.cause)
				}
				t.Logf("the error event: %s: %s", errs[0].Status, errs[0].Message)
			})
		}
	})
}
