// Package runner drives an agent: it plans the scenario's deployment,
// registers both sides' KV regions with a transfer backend, and then, for
// each request, fills P's blocks as a prefill would, posts the transfer,
// polls it, proves D's bytes with the oracle (every request, or a sample),
// and reports every step as events.
package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/transfer"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// Sink takes the runner's events; it must never block.
type Sink interface {
	Publish(e event.Event)
	// Dropped is how many events the sink had to drop so far.
	Dropped() uint64
}

// Runner runs one scenario. Its fields are set before Run.
type Runner struct {
	Scenario scenario.Scenario
	Model    *model.Model
	Backend  transfer.Backend
	Sink     Sink
	Metrics  *metrics.Registry // may be nil
	GPUs     []event.GPU
	NoGPU    string // why there are none
	Role     string // both, p or d
	Logf     func(format string, args ...any)
	Clock    func() time.Time
	// Pair labels the transfer metrics (kvscope_transfer_*{pair}): the
	// agent's name.
	Pair string

	mu      sync.Mutex
	window  []done // the last second's transfers, for samples
	started time.Time
	served  int
}

type done struct {
	at    time.Time
	bytes int64
	us    float64
	descs int
}

func (r *Runner) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

func (r *Runner) emit(e event.Event) {
	if e.TS == 0 {
		e.TS = r.now().UnixNano()
	}
	r.Sink.Publish(e)
}

func (r *Runner) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// Run plans, registers and serves requests until the scenario ends or ctx
// is cancelled. A request that fails is reported as an error event and the
// runner goes on.
func (r *Runner) Run(ctx context.Context) error {
	s := r.Scenario
	if pp, ok := r.Backend.(transfer.PeerPusher); r.Role == "d" && s.Connector == "nixl-push" && !(ok && pp.PeerPushes()) {
		return fmt.Errorf("runner: two agents over TCP move the bytes by D reading from P (pull); run connector nixl-push with --backend nixl, or with --role both")
	}
	pd, reqs, firstReq, first, err := r.begin()
	if err != nil {
		return err
	}
	regs := append(append([]*xfer.Registration(nil), first.PRegs...), first.DRegs...)
	if err := r.Backend.Register(regs); err != nil {
		// Registration includes the two-agent handshake: a refused peer
		// (its token, plan or NIXL agent) is reported, not only logged.
		r.emit(event.Event{Kind: event.Error, Error: &event.ErrorData{Status: statusOf(err), Message: event.Clip(err.Error(), maxMessage)}})
		return err
	}
	for _, reg := range regs {
		if reg.Side == xfer.D || r.Role != "d" {
			r.registered(reg)
		}
	}
	md, err := r.Backend.Metadata()
	if err == nil {
		err = r.Backend.LoadRemote(md)
	}
	if err != nil {
		return fmt.Errorf("runner: metadata exchange: %w", err)
	}
	r.emit(event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{Summary: first.Handshake.Summary(), Path: string(first.Path),
		PTP: len(first.PRegs), DTP: len(first.DRegs)}})

	r.started = r.now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.DurationS > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(s.DurationS*float64(time.Second)))
		defer cancel()
	}
	go r.sample(ctx)
	var interval time.Duration
	if s.Rate > 0 {
		interval = time.Duration(float64(time.Second) / s.Rate)
	}
	next := r.now()
	failures := 0 // requests failed in a row
	for i := 1; s.Requests == 0 || i <= s.Requests; i++ {
		if interval > 0 {
			next = next.Add(interval)
			if wait := next.Sub(r.now()); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		req := firstReq
		if i > 1 {
			req = reqs.Next()
		}
		verify := s.VerifyEvery > 0 && (i-1)%s.VerifyEvery == 0
		err := r.serve(pd, fmt.Sprintf("req-%d", i), req, verify)
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		r.emit(event.Event{Kind: event.Error, Error: &event.ErrorData{Request: fmt.Sprintf("req-%d", i), Status: statusOf(err), Message: event.Clip(err.Error(), maxMessage)}})
		if r.Metrics != nil {
			r.Metrics.Add("agent_errors_total", "Transfers that failed, by status.", 1, "status", statusOf(err))
			r.Metrics.Add(MetricTransferFailures, helpTransferFailures, 1, "pair", r.Pair, "status", statusOf(err), "source", sourceAgent)
		}
		r.logf("request %d: %s: %v", i, statusOf(err), err)
		// Back off while requests keep failing (a P agent that is down is
		// not dialled in a tight loop): 50 ms, doubling, at most 2 s.
		failures++
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(50*time.Millisecond<<min(failures-1, 6), 2*time.Second)):
		}
		next = r.now()
	}
	return nil
}

// begin plans the scenario, says hello, and computes the first request's
// transfer (which carries the registrations every request shares). A
// rejected deployment is reported as a handshake event and an error.
func (r *Runner) begin() (*xfer.PD, *scenario.Requests, xfer.Request, *xfer.Transfer, error) {
	s := r.Scenario
	setup, err := s.Setup(r.Model)
	if err != nil {
		return nil, nil, xfer.Request{}, nil, err
	}
	pd, err := xfer.Prepare(setup)
	if err != nil {
		return nil, nil, xfer.Request{}, nil, fmt.Errorf("runner: planning: %w", err)
	}
	host, _ := os.Hostname()
	gpus := r.GPUs
	if gpus == nil {
		gpus = []event.GPU{}
	}
	r.emit(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: host, Backend: r.Backend.Name(), Memory: r.Backend.MemoryKind(),
		Role: r.Role, GPUs: gpus, NoGPU: r.NoGPU, Scenario: s.Describe(), Model: r.Model.Name}})
	reqs := s.NewRequests()
	firstReq := reqs.Next()
	first, err := pd.Compute(firstReq, true)
	if err != nil {
		return nil, nil, xfer.Request{}, nil, fmt.Errorf("runner: %w", err)
	}
	if first.Rejection != nil {
		r.emit(event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{Summary: first.Handshake.Summary(), Rejection: first.Rejection.Error(),
			PTP: len(first.PRegs), DTP: len(first.DRegs)}})
		return nil, nil, xfer.Request{}, nil, fmt.Errorf("runner: the scenario's engines are rejected: %v", first.Rejection)
	}
	return pd, reqs, firstReq, first, nil
}

// registered reports a rank's registration.
func (r *Runner) registered(reg *xfer.Registration) {
	var bytes int64
	for _, region := range reg.Regions {
		bytes += region.Bytes()
	}
	r.emit(event.Event{Kind: event.Registration, Registration: &event.RegistrationData{Side: string(reg.Side), Rank: reg.Rank,
		Regions: len(reg.Regions), Bytes: bytes, Memory: r.Backend.MemoryKind()}})
}

// transferLimit is how long a posted transfer may take before the runner
// gives it up (a peer that vanished mid-transfer without NIXL noticing).
const transferLimit = 2 * time.Minute

// maxMessage bounds an error event's message.
const maxMessage = 2048

// statusError carries a NIXL-like status name.
type statusError struct {
	status string
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// statusOf names an error's status: NIXL's own (ERR_REMOTE_DISCONNECT)
// when a NIXL call failed, the runner's when it knows the cause, else
// ERR_BACKEND.
func statusOf(err error) string {
	var ne *transfer.NIXLError
	if errors.As(err, &ne) {
		return ne.StatusName()
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.status
	}
	return "ERR_BACKEND"
}

// serve performs one request.
func (r *Runner) serve(pd *xfer.PD, id string, req xfer.Request, verify bool) error {
	x, err := compute(pd, req)
	if err != nil {
		return err
	}
	// Tag P's blocks as a prefill would (here, or in the P agent) and fill
	// D's with the sentinel.
	pf, remoteP := r.Backend.(transfer.Prefiller)
	if remoteP {
		err := pf.Prefill(transfer.PrefillRequest{ID: id, PromptTokens: req.PromptTokens, PrefixHitTokens: req.PrefixHitTokens})
		if err != nil {
			return &statusError{"ERR_REMOTE_DISCONNECT", err}
		}
	}
	var prover *oracle.Prover
	if verify {
		if prover, err = oracle.NewProver(r.Model, x, r.Backend, remoteP); err != nil {
			return err
		}
	} else if !remoteP {
		if err := oracle.FillP(r.Model, x, r.Backend); err != nil {
			return err
		}
	}
	r.emit(event.Event{Kind: event.TransferStart, Start: &event.StartData{Request: id, Prompt: req.PromptTokens, Hit: x.Request.PrefixHitTokens,
		Mode: string(x.Mode), Descs: x.Descs, Bytes: x.Bytes}})
	prep, err := r.Backend.Prepare(x)
	if err != nil {
		return &statusError{"ERR_INVALID_PARAM", err}
	}
	h, err := r.Backend.Post(prep, id+":done")
	if err != nil {
		return err
	}
	st, err := transfer.WaitFor(r.Backend, h, transferLimit)
	r.Backend.Notifications() // the completion notification; nothing else reads them
	if err != nil {
		return err
	}
	for _, b := range st.Batches {
		b.Request = id
		r.emit(event.Event{Kind: event.DescBatch, Batch: &b})
	}
	verdict := "skipped"
	if prover != nil {
		res := prover.Verify()
		verdict = string(res.Verdict)
		if res.Verdict != oracle.Exact {
			r.emit(event.Event{Kind: event.TransferDone, Done: r.doneData(id, x, st, verdict)})
			return &statusError{"ERR_MISMATCH", fmt.Errorf("D's bytes are wrong: %s", res.Mismatch)}
		}
	}
	r.emit(event.Event{Kind: event.TransferDone, Done: r.doneData(id, x, st, verdict)})
	r.mu.Lock()
	r.window = append(r.window, done{at: r.now(), bytes: st.Bytes, us: st.TransferUS, descs: st.Descs})
	r.served++
	r.mu.Unlock()
	if r.Metrics != nil {
		r.Metrics.Add("agent_tx_bytes_total", "Bytes the agent's transfers moved.", float64(st.Bytes))
		r.Metrics.Observe("agent_xfer_time_us", "Transfer time per request, microseconds.", st.TransferUS)
		r.Metrics.Add("kvscope_agent_descriptors_total", "Descriptors submitted.", float64(st.Descs))
		r.Metrics.Add("kvscope_agent_descriptors_merged_total", "Descriptors posted after merging (NIXL's telemetry descCount with the nixl backend).", float64(st.Merged))
		r.Metrics.Add("kvscope_agent_transfers_total", "Transfers completed, by oracle verdict.", 1, "verified", verdict)
		r.observePairs(id, st)
	}
	return nil
}

// doneData is a request's transfer_done: its figures, and what its
// start and descriptor batches said, summarised (per rank pair and group
// pair), so that the fleet view and the metrics never need the detail.
func (r *Runner) doneData(id string, x *xfer.Transfer, st *transfer.Stats, verdict string) *event.DoneData {
	d := &event.DoneData{Request: id, Bytes: st.Bytes, Descs: st.Descs, Merged: st.Merged, PrepUS: st.PrepUS, PostUS: st.PostUS,
		TransferUS: st.TransferUS, GBps: st.GBps(), Timing: st.Timing, Source: st.Source, Verified: verdict,
		Mode: string(x.Mode), Prompt: x.Request.PromptTokens, Hit: x.Request.PrefixHitTokens}
	for i := range st.Batches {
		var kept bool
		if d.Pairs, kept = event.Summarise(d.Pairs, &st.Batches[i]); !kept {
			d.PairsOmitted++
		}
	}
	return d
}

// compute is a request's transfer with its pairs, refused with a status
// when the engines reject it or its blocks do not fit the pools.
func compute(pd *xfer.PD, req xfer.Request) (*xfer.Transfer, error) {
	x, err := pd.Compute(req, true)
	if err != nil {
		return nil, &statusError{"ERR_INVALID_PARAM", err}
	}
	if x.Rejection != nil {
		return nil, &statusError{"ERR_NOT_ALLOWED", x.Rejection}
	}
	if err := fits(x); err != nil {
		return nil, &statusError{"ERR_INVALID_PARAM", err}
	}
	return x, nil
}

// fits checks that the request's block ids lie inside both pools.
func fits(x *xfer.Transfer) error {
	check := func(side xfer.Side, pages []xfer.Pages, numBlocks int64) error {
		for g, p := range pages {
			for _, id := range p.IDs {
				if int64(id) >= numBlocks {
					return fmt.Errorf("the request needs block %d of %s group %d, but the pool has %d blocks: raise kv_cache_memory_bytes or shorten prompts", id, side, g, numBlocks)
				}
			}
		}
		return nil
	}
	if err := check(xfer.P, x.PPages, x.PRegs[0].NumBlocks); err != nil {
		return err
	}
	return check(xfer.D, x.DPages, x.DRegs[0].NumBlocks)
}

// sample emits a sample every second: throughput and latency over the
// last second, requests served, and the sink's drops.
func (r *Runner) sample(ctx context.Context) {
	every(ctx, time.Second, func() {
		now := r.now()
		r.mu.Lock()
		var keep []done
		var bytes int64
		var lat []float64
		descs := 0
		for _, d := range r.window {
			if now.Sub(d.at) <= time.Second {
				keep = append(keep, d)
				bytes += d.bytes
				lat = append(lat, d.us)
				descs += d.descs
			}
		}
		r.window = keep
		served := r.served
		r.mu.Unlock()
		r.emit(event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: float64(bytes) / 1e9, P50US: metrics.Quantile(lat, 0.5),
			P99US: metrics.Quantile(lat, 0.99), Requests: served, Descs: descs, DroppedEvents: r.Sink.Dropped()}})
		if r.Metrics != nil {
			r.Metrics.Set("kvscope_agent_dropped_events", "Events the agent's queue dropped so far.", float64(r.Sink.Dropped()))
		}
	})
}

// observePairs adds a completed request to the transfer histograms, per
// rank pair: the pair's bytes, and its time as its last batch's end.
func (r *Runner) observePairs(id string, st *transfer.Stats) {
	type pair struct{ p, d int }
	bytes, end := map[pair]int64{}, map[pair]int64{}
	for _, b := range st.Batches {
		k := pair{b.PRank, b.DRank}
		bytes[k] += b.Bytes
		end[k] = max(end[k], b.EndNS)
	}
	ex := prometheus.Labels{"request": id}
	for k, n := range bytes {
		secs := float64(end[k]) / 1e9
		if secs <= 0 {
			secs = st.TransferUS / 1e6
		}
		p, d := strconv.Itoa(k.p), strconv.Itoa(k.d)
		r.Metrics.ObserveHistogram(MetricTransferSeconds, helpTransferSeconds, transferSecondsBuckets, secs, ex, "pair", r.Pair, "p_rank", p, "d_rank", d, "source", sourceAgent)
		r.Metrics.ObserveHistogram(MetricTransferBytes, helpTransferBytes, transferBytesBuckets, float64(n), ex, "pair", r.Pair, "p_rank", p, "d_rank", d, "source", sourceAgent)
	}
}
