package runner

import (
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/xfer"
)

// The watcher's Prometheus metrics. Every series is labelled by what it
// belongs to, never by a request: pair is the engine pair (the watcher's
// --name, which also names the live view's "<name>/deployment" agent),
// p_rank and d_rank the rank pair as vLLM's TP mapping pairs the ranks
// ("unknown" for a ring no side channel or scenario links to a rank; a
// range "2-3" where one request reads from several remote ranks), engine a
// scraped engine or side channel. Request ids ride only as exemplars.
const (
	MetricTransferSeconds   = "kvscope_transfer_duration_seconds"
	MetricTransferBytes     = "kvscope_transfer_size_bytes"
	MetricTransferFailures  = "kvscope_transfer_failures_total"
	MetricTelemetryDropped  = "kvscope_telemetry_events_dropped_total"
	MetricStuckTotal        = "kvscope_stuck_transfers_total"
	MetricInFlight          = "kvscope_transfers_in_flight"
	MetricOldestInFlight    = "kvscope_transfer_oldest_in_flight_age_seconds"
	MetricStuckNow          = "kvscope_transfers_stuck"
	MetricPlanMismatch      = "kvscope_plan_mismatch"
	MetricDescriptors       = "kvscope_descriptors_per_request"
	MetricRingUp            = "kvscope_watch_ring_up"
	MetricTargetUp          = "kvscope_watch_target_up"
	MetricRankUp            = "kvscope_side_channel_rank_up"
	MetricKVExpired         = "kvscope_vllm_kv_expired_requests_total"
	MetricFailedNotifs      = "kvscope_vllm_failed_notifications_total"
	helpTransferSeconds     = "NIXL's transfer time per request (agent_xfer_time, start to completion), by engine pair and rank pair; exemplars carry the request as kvscope names it."
	helpTransferBytes       = "Bytes per NIXL request (agent_rx_bytes or agent_tx_bytes), by engine pair and rank pair."
	helpTransferFailures    = "Failed transfers by NIXL status and where they were seen (ring: NIXL's agent_err_* events; vllm: vllm:nixl_num_failed_transfers; agent: the agent's own)."
	helpTelemetryDropped    = "Telemetry events NIXL says it dropped (agent_telemetry_events_dropped) and events of a ring that did not decode."
	helpStuckTotal          = "Requests posted and not completed within --stuck-after, counted once each when found."
	helpInFlight            = "NIXL requests posted and not completed (visible in telemetry version 1 rings, where NIXL writes the post before the completion; later rings record a request only when it completes)."
	helpOldestInFlight      = "Age of the oldest request in flight, seconds (0 when none)."
	helpStuckNow            = "Requests in flight for longer than --stuck-after now."
	helpPlanMismatch        = "1 while a watched engine's plan field differs from kvscope's prediction (observed and predicted are labels), 0 once it matches again."
	helpDescriptors         = "Descriptors per NIXL request: observed (vllm:nixl_num_descriptors over the last scrape) and predicted (kvscope's merged descriptors for a request of the observed mean bytes)."
	helpRingUp              = "1 while the watcher reads a NIXL telemetry ring, 0 once it closed or was refused."
	helpTargetUp            = "1 while a --vllm-metrics target or --side-channel answers, 0 while it fails."
	helpRankUp              = "1 while a side channel answers for the rank, 0 after it stopped answering."
	helpKVExpired           = "vllm:nixl_num_kv_expired_reqs as last scraped: KV a prefill engine freed because no decode engine read it in time."
	helpFailedNotifs        = "vllm:nixl_num_failed_notifications as last scraped."
	sourceRing, sourceAgent = "ring", "agent"
)

// Buckets of the transfer histograms: 50 µs to about 13 s (×2), and 4 KiB
// to 16 GiB (×4), as NIXL requests of vLLM's KV span them.
var (
	transferSecondsBuckets = prometheus.ExponentialBuckets(50e-6, 2, 19)
	transferBytesBuckets   = prometheus.ExponentialBuckets(4096, 4, 12)
)

// DefaultStuckAfter is --stuck-after when VLLM_NIXL_ABORT_REQUEST_TIMEOUT
// is not set in the watcher's environment.
const DefaultStuckAfter = 120 * time.Second

// StuckAfterFromEnv is the default --stuck-after: the
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT (seconds) of the watcher's own
// environment, which a deployment sets as the engine's (the watcher
// cannot read another process's environment), else DefaultStuckAfter.
func StuckAfterFromEnv(getenv func(string) string) time.Duration {
	if v := getenv("VLLM_NIXL_ABORT_REQUEST_TIMEOUT"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 && s < 1e6 {
			return time.Duration(s * float64(time.Second))
		}
	}
	return DefaultStuckAfter
}

// inFlight is a NIXL request posted and not completed.
type inFlight struct {
	at       time.Time
	id       string
	reported bool // a stuck_transfer event went
}

// maxInFlight bounds the requests remembered in flight per ring.
const maxInFlight = 4096

// watchState is what the watcher's gauges read when scraped, beside the
// agents' own figures. Guarded by watcher.mu.
type watchState struct {
	mismatch map[string]map[string]event.MismatchData // engine -> field -> the latest comparison (Observed == Predicted: matched again)
	targets  map[string]targetState                   // target -> its state
	ranks    map[string]map[int]bool                  // side channel -> rank -> answering
	engines  map[string]*engineState                  // scraped engine -> its figures
}

type targetState struct {
	kind string // vllm_metrics or side_channel
	up   bool
}

type engineState struct {
	side                       string
	expired, notifs            float64
	descObserved, descExpected float64
	haveDesc, havePredicted    bool
}

func newWatchState() watchState {
	return watchState{mismatch: map[string]map[string]event.MismatchData{}, targets: map[string]targetState{},
		ranks: map[string]map[int]bool{}, engines: map[string]*engineState{}}
}

// setMismatches records one comparison of an engine: the fields that
// differ now, each earlier one absent from it matched again.
func (w *watcher) setMismatches(engine string, ms []event.MismatchData) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.state.mismatch[engine]
	if cur == nil {
		cur = map[string]event.MismatchData{}
		w.state.mismatch[engine] = cur
	}
	now := map[string]bool{}
	for _, m := range ms {
		cur[m.Field] = m
		now[m.Field] = true
	}
	for f, m := range cur {
		if !now[f] {
			m.Observed, m.Predicted = "", ""
			cur[f] = m
		}
	}
}

// setTarget records whether a scrape target or side channel answered.
func (w *watcher) setTarget(target, kind string, up bool) {
	w.mu.Lock()
	w.state.targets[target] = targetState{kind, up}
	w.mu.Unlock()
}

// rankPair labels a linked ring's requests: the initiator's rank and the
// remote ranks vLLM's TP mapping pairs it with, as p_rank and d_rank.
func (w *watcher) rankPair(name string) (pRank, dRank string) {
	w.mu.Lock()
	l, linked := w.links[name]
	w.mu.Unlock()
	pTP, dTP := w.tp("P"), w.tp("D")
	if !linked || pTP == 0 || dTP == 0 || (l.Side != "P" && l.Side != "D") {
		return "unknown", "unknown"
	}
	mine, theirs := dTP, pTP
	if l.Side == "P" {
		mine, theirs = pTP, dTP
	}
	remote := ""
	if mine >= theirs {
		remote = strconv.Itoa(l.Rank / (mine / max(theirs, 1)))
	} else {
		k := theirs / mine
		remote = fmt.Sprintf("%d-%d", l.Rank*k, l.Rank*k+k-1)
	}
	if l.Side == "P" {
		return strconv.Itoa(l.Rank), remote
	}
	return remote, strconv.Itoa(l.Rank)
}

// observeTransfer adds one ring's completed request to the histograms.
func (w *watcher) observeTransfer(ring, id string, t *watch.Transfer) {
	if w.cfg.Metrics == nil {
		return
	}
	p, d := w.rankPair(ring)
	ex := prometheus.Labels{"request": id}
	w.cfg.Metrics.ObserveHistogram(MetricTransferSeconds, helpTransferSeconds, transferSecondsBuckets, float64(t.XferUS)/1e6, ex,
		"pair", w.cfg.Name, "p_rank", p, "d_rank", d, "source", sourceRing)
	w.cfg.Metrics.ObserveHistogram(MetricTransferBytes, helpTransferBytes, transferBytesBuckets, float64(t.Bytes), ex,
		"pair", w.cfg.Name, "p_rank", p, "d_rank", d, "source", sourceRing)
}

// countFailures adds failures of a status to the failure counter.
func (w *watcher) countFailures(status, source string, n float64) {
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.Add(MetricTransferFailures, helpTransferFailures, n, "pair", w.cfg.Name, "status", status, "source", source)
	}
}

// initMetrics makes the counters an alert reads at 0, so that a rate
// over them exists before the first failure, and registers the gauges.
func (w *watcher) initMetrics() {
	r := w.cfg.Metrics
	if r == nil {
		return
	}
	r.Add(MetricTelemetryDropped, helpTelemetryDropped, 0, "pair", w.cfg.Name)
	r.Add(MetricStuckTotal, helpStuckTotal, 0, "pair", w.cfg.Name, "source", sourceRing)
	r.Register(watchCollector{w})
}

// checkStuck reports each ring's requests in flight past StuckAfter, once
// each, as stuck_transfer events and in kvscope_stuck_transfers_total.
// w.mu is held.
func (w *watcher) checkStuck(now time.Time) {
	for name, a := range w.agents {
		for i := range a.inFlight {
			f := &a.inFlight[i]
			if f.reported || now.Sub(f.at) < w.cfg.StuckAfter {
				continue
			}
			f.reported = true
			age := now.Sub(f.at)
			l, linked := w.links[name]
			engine := ""
			if linked {
				engine = l.engineLine(w.tp(l.Side))
			}
			a.sink.Publish(event.Event{TS: now.UnixNano(), Kind: event.StuckTransfer, Stuck: &event.StuckData{Request: f.id, Engine: engine, Source: sourceRing,
				SinceNS: f.at.UnixNano(), AgeS: age.Seconds(),
				Reason: fmt.Sprintf("NIXL agent %s posted a request %s ago and has not completed it (--stuck-after %s): check the remote rank's side channel and UCX's connection (UCX_LOG_LEVEL=info), and whether the prefill engine expired its KV (vllm:nixl_num_kv_expired_reqs)",
					name, age.Round(time.Second), w.cfg.StuckAfter)}})
			w.logf("%s: request %s in flight for %s (--stuck-after %s)", a.name, f.id, age.Round(time.Second), w.cfg.StuckAfter)
			if w.cfg.Metrics != nil {
				w.cfg.Metrics.Add(MetricStuckTotal, helpStuckTotal, 1, "pair", w.cfg.Name, "source", sourceRing)
			}
		}
	}
}

// posted records a ring's request posted (telemetry version 1 writes the
// post before the completion).
func (w *watcher) posted(a *watched) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(a.inFlight) >= maxInFlight {
		return
	}
	a.posts++
	a.inFlight = append(a.inFlight, inFlight{at: time.Now(), id: fmt.Sprintf("post-%d", a.posts)})
}

// completed takes the oldest request in flight off a ring (NIXL's ring
// names no request: the oldest is the best guess); it returns it if it had
// been reported stuck.
func (w *watcher) completed(a *watched) (inFlight, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(a.inFlight) == 0 {
		return inFlight{}, false
	}
	f := a.inFlight[0]
	a.inFlight = append(a.inFlight[:0], a.inFlight[1:]...)
	return f, f.reported
}

// watchCollector is the watcher's gauges, read from its state when
// scraped (an unchecked collector: its series come and go with rings,
// engines and mismatches).
type watchCollector struct{ w *watcher }

// Describe implements prometheus.Collector (unchecked: it sends nothing).
func (watchCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c watchCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.w
	now := time.Now()
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	gauge := func(d *prometheus.Desc, v float64, values ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, values...)
	}
	counter := func(d *prometheus.Desc, v float64, values ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, values...)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pair := w.cfg.Name
	var inFlight, stuck int
	var oldest time.Duration
	dRing := desc(MetricRingUp, helpRingUp, "pair", "ring")
	for name, a := range w.agents {
		inFlight += len(a.inFlight)
		for _, f := range a.inFlight {
			oldest = max(oldest, now.Sub(f.at))
			if now.Sub(f.at) >= w.cfg.StuckAfter {
				stuck++
			}
		}
		if a.ring != 0 || a.closed {
			gauge(dRing, b2f(a.ring != 0 && !a.closed), pair, name)
		}
	}
	gauge(desc(MetricInFlight, helpInFlight, "pair"), float64(inFlight), pair)
	gauge(desc(MetricOldestInFlight, helpOldestInFlight, "pair"), oldest.Seconds(), pair)
	gauge(desc(MetricStuckNow, helpStuckNow, "pair"), float64(stuck), pair)
	dm := desc(MetricPlanMismatch, helpPlanMismatch, "pair", "engine", "side", "field", "observed", "predicted")
	for engine, fields := range w.state.mismatch {
		for f, m := range fields {
			gauge(dm, b2f(m.Observed != m.Predicted), pair, engine, m.Side, f, m.Observed, m.Predicted)
		}
	}
	dt := desc(MetricTargetUp, helpTargetUp, "pair", "target", "kind")
	for t, s := range w.state.targets {
		gauge(dt, b2f(s.up), pair, t, s.kind)
	}
	dr := desc(MetricRankUp, helpRankUp, "pair", "engine", "rank")
	for e, ranks := range w.state.ranks {
		for r, up := range ranks {
			gauge(dr, b2f(up), pair, e, strconv.Itoa(r))
		}
	}
	dd := desc(MetricDescriptors, helpDescriptors, "pair", "engine", "side", "source")
	dx, dn := desc(MetricKVExpired, helpKVExpired, "pair", "engine"), desc(MetricFailedNotifs, helpFailedNotifs, "pair", "engine")
	for e, s := range w.state.engines {
		counter(dx, s.expired, pair, e)
		counter(dn, s.notifs, pair, e)
		if s.haveDesc {
			gauge(dd, s.descObserved, pair, e, s.side, "observed")
		}
		if s.havePredicted {
			gauge(dd, s.descExpected, pair, e, s.side, "predicted")
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// descsPerByte is kvscope's merged descriptors per byte of a D rank's
// request for the scenario (a 1,024-token prompt's transfer), 0 when it
// cannot plan one. Computed once.
func (w *watcher) descsPerByte() float64 {
	w.mu.Lock()
	done, v := w.dpbDone, w.dpb
	w.mu.Unlock()
	if done {
		return v
	}
	v = 0
	if w.cfg.Model != nil {
		if conn, err := xfer.ParseConnector(w.cfg.Connector); err == nil || w.cfg.Connector == "" {
			if w.cfg.Connector == "" {
				conn, _ = xfer.ParseConnector("nixl")
			}
			if r, err := xfer.Prepare(xfer.Setup{Model: w.cfg.Model, P: w.cfg.P, D: w.cfg.D, Connector: conn, Layout: xfer.SplitKV}); err == nil {
				if t, err := r.Compute(xfer.Request{PromptTokens: preflightPrompt}, false); err == nil && t.Bytes > 0 {
					v = float64(max(t.Merged, t.Descs)) / float64(t.Bytes)
				}
			}
		}
	}
	w.mu.Lock()
	w.dpbDone, w.dpb = true, v
	w.mu.Unlock()
	return v
}

// scraped records what a scrape says of an engine for the gauges: its
// counters, and descriptors per request over the scrape against kvscope's
// prediction for requests of the same mean bytes.
func (w *watcher) scraped(engine, side string, e, prev *watch.Engine) {
	var dpb float64
	if side == "P" || side == "D" {
		dpb = w.descsPerByte()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state.engines[engine]
	if s == nil {
		if len(w.state.engines) >= w.cfg.MaxAgents {
			return
		}
		s = &engineState{}
		w.state.engines[engine] = s
	}
	s.side = side
	if s.side == "" {
		s.side = "unknown"
	}
	s.expired, s.notifs = e.ExpiredRequests, e.FailedNotifications
	if prev == nil {
		return
	}
	d, b := e.Descriptors.Since(prev.Descriptors), e.Bytes.Since(prev.Bytes)
	if d.Count > 0 {
		s.descObserved, s.haveDesc = d.Sum/float64(d.Count), true
	}
	if b.Count > 0 && dpb > 0 {
		s.descExpected, s.havePredicted = dpb*b.Sum/float64(b.Count), true
	}
}

// setRank records whether a side channel answered for a rank.
func (w *watcher) setRank(engine string, rank int, up bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.state.ranks[engine]
	if r == nil {
		r = map[int]bool{}
		w.state.ranks[engine] = r
	}
	r[rank] = up
}

// addDropped counts telemetry events lost.
func (w *watcher) addDropped(n float64) {
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.Add(MetricTelemetryDropped, helpTelemetryDropped, n, "pair", w.cfg.Name)
	}
}

// vllmStuck reports a vLLM counter of requests that stopped making
// progress (expired KV, failed notifications) that grew by n since the
// scrape at since, as a stuck_transfer event of the engine's agent.
func (w *watcher) vllmStuck(a *watched, engine string, since time.Time, n float64, counter, reason string) {
	if n <= 0 {
		return
	}
	w.emit(a, event.Event{Kind: event.StuckTransfer, Stuck: &event.StuckData{Engine: engine, Source: "vllm", SinceNS: since.UnixNano(),
		Count: int(n), Reason: fmt.Sprintf(reason, n) + " (" + counter + ")"}})
}
