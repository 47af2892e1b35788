package runner

import (
	"bytes"
	"context"
	"github.com/kvscope/kvscope/core/plan"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/transfer"
	modelcatalog "github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/xfer"
)

// sink collects events.
type sink struct {
	mu     sync.Mutex
	events []event.Event
}

func (s *sink) Publish(e event.Event) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}
func (s *sink) Dropped() uint64 { return 0 }

func (s *sink) all() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events...)
}

func catalog() model.Catalog { return modelcatalog.Bundled() }

func testScenario(requests int) scenario.Scenario {
	s := scenario.Default()
	s.Rate, s.Requests = 0, requests
	return s
}

func newRunner(t *testing.T, s scenario.Scenario, be transfer.Backend, out *sink) *Runner {
	t.Helper()
	m, err := s.LoadModel(catalog())
	if err != nil {
		t.Fatal(err)
	}
	return &Runner{Scenario: s, Model: m, Backend: be, Sink: out, Metrics: metrics.New(), Role: "both", Logf: t.Logf}
}

func kinds(events []event.Event) map[event.Kind]int {
	n := map[event.Kind]int{}
	for _, e := range events {
		n[e.Kind]++
	}
	return n
}

// TestRunnerReportsVerifiedTransfers: every request is started, moved in
// batches and proved exact, and the events say so in order.
func TestRunnerReportsVerifiedTransfers(t *testing.T) {
	out := &sink{}
	r := newRunner(t, testScenario(6), transfer.NewHost(1<<30, nil), out)
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev := out.all()
	if ev[0].Kind != event.Hello || ev[0].Hello.Backend != "host" || ev[0].Hello.Model != "openai/gpt-oss-20b" {
		t.Fatalf("first event %+v, want the hello", ev[0])
	}
	n := kinds(ev)
	if n[event.Registration] != 6 || n[event.Handshake] != 1 || n[event.TransferStart] != 6 || n[event.TransferDone] != 6 || n[event.Error] != 0 {
		t.Fatalf("event counts %v, want 6 registrations (2 P + 4 D ranks), 1 handshake, 6 starts and dones, no errors", n)
	}
	var started *event.StartData
	var batchBytes int64
	for _, e := range ev {
		switch e.Kind {
		case event.TransferStart:
			started, batchBytes = e.Start, 0
		case event.DescBatch:
			if e.Batch.Request != started.Request {
				t.Fatalf("batch of %s inside %s", e.Batch.Request, started.Request)
			}
			batchBytes += e.Batch.Bytes
		case event.TransferDone:
			d := e.Done
			if d.Verified != "exact" || d.Timing != event.Measured || d.Bytes != started.Bytes || batchBytes != d.Bytes {
				t.Fatalf("%s: verified %s, timing %s, bytes %d (started %d, batches %d)", d.Request, d.Verified, d.Timing, d.Bytes, started.Bytes, batchBytes)
			}
		}
	}
	var m bytes.Buffer
	r.Metrics.Write(&m)
	for _, want := range []string{"agent_tx_bytes_total ", "agent_xfer_time_us_count 6", `kvscope_agent_transfers_total{verified="exact"} 6`} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, m.String())
		}
	}
}

// corrupting flips one byte of D after every transfer, as a faulty
// transport would.
type corrupting struct {
	*transfer.Host
	x func() *xfer.Transfer
}

func (c *corrupting) Poll(h transfer.Handle) (bool, *transfer.Stats, error) {
	done, st, err := c.Host.Poll(h)
	if done {
		if b := c.Host.Block(xfer.D, 0, 0, 1); b != nil {
			for i := range b {
				b[i] ^= 0x5a
			}
		}
	}
	return done, st, err
}

// TestRunnerReportsMismatch: when D's bytes are wrong the runner says so
// with an ERR_MISMATCH error event and a wrong verdict, and goes on.
func TestRunnerReportsMismatch(t *testing.T) {
	out := &sink{}
	r := newRunner(t, testScenario(3), &corrupting{Host: transfer.NewHost(1<<30, nil)}, out)
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	wrong, errs := 0, 0
	for _, e := range out.all() {
		if e.Kind == event.TransferDone && e.Done.Verified == "wrong" {
			wrong++
		}
		if e.Kind == event.Error && e.Error.Status == "ERR_MISMATCH" && strings.Contains(e.Error.Message, "D's bytes are wrong") {
			errs++
		}
	}
	if wrong == 0 || wrong != errs {
		t.Fatalf("%d wrong verdicts and %d ERR_MISMATCH events, want the same positive number", wrong, errs)
	}
	var m bytes.Buffer
	r.Metrics.Write(&m)
	if !strings.Contains(m.String(), `agent_errors_total{status="ERR_MISMATCH"}`) {
		t.Errorf("metrics lack the error count:\n%s", m.String())
	}
}

// TestRunnerRejectsOversizedRequest: a request that needs more blocks than
// the pool holds becomes an error event, not a panic or a corrupt copy.
// Before vLLM 0.21 a --num-gpu-blocks-override escapes the start-up check,
// so a pool can be smaller than one request.
func TestRunnerRejectsOversizedRequest(t *testing.T) {
	s := testScenario(2)
	s.PromptMin, s.PromptMax = 700, 1000
	for _, e := range []*plan.Engine{&s.P, &s.D} {
		e.VLLMVersion, e.NumGPUBlocksOverride = "0.20.0", 8
	}
	out := &sink{}
	r := newRunner(t, s, transfer.NewHost(1<<30, nil), out)
	if err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range out.all() {
		if e.Kind == event.Error {
			if e.Error.Status != "ERR_INVALID_PARAM" || !strings.Contains(e.Error.Message, "the pool has") {
				t.Fatalf("error %+v", e.Error)
			}
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d error events, want 2", n)
	}
}

// TestRunnerTwoAgents runs a P agent and a D agent in one test over
// loopback TCP: every transfer D reads is proved exact.
func TestRunnerTwoAgents(t *testing.T) {
	s := testScenario(4)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pOut := &sink{}
	p := newRunner(t, s, nil, pOut)
	host := transfer.NewHost(1<<30, nil)
	p.Backend = host
	pDone := make(chan error, 1)
	go func() { pDone <- p.ServeP(ctx, host, ln, "tok") }()

	dOut := &sink{}
	d := newRunner(t, s, transfer.NewRemote(ln.Addr().String(), "tok", 2, 1<<30, nil), dOut)
	d.Role = "d"
	if err := d.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.Backend.Close()
	cancel()
	select {
	case err := <-pDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the P agent did not stop")
	}
	n := kinds(dOut.all())
	if n[event.TransferDone] != 4 || n[event.Error] != 0 || n[event.Registration] != 4 {
		t.Fatalf("D's events %v, want 4 transfers, no errors, 4 D registrations", n)
	}
	for _, e := range dOut.all() {
		if e.Kind == event.TransferDone && e.Done.Verified != "exact" {
			t.Fatalf("%s: %s", e.Done.Request, e.Done.Verified)
		}
	}
	pn := kinds(pOut.all())
	if pn[event.Hello] != 1 || pn[event.Registration] != 2 || pn[event.Handshake] != 1 {
		t.Fatalf("P's events %v, want a hello, 2 P registrations, 1 handshake", pn)
	}
}

func TestRunnerRefusesPushBetweenTwoAgents(t *testing.T) {
	s := testScenario(1)
	s.Connector = "nixl-push"
	r := newRunner(t, s, transfer.NewHost(1<<30, nil), &sink{})
	r.Role = "d"
	if err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "pull") {
		t.Fatalf("Run = %v, want the pull-only refusal", err)
	}
}
