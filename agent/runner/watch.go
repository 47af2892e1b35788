package runner

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// WatchConfig is kvscope-agent watch: the NIXL telemetry directory of the
// vLLM engines on this host, and where the events go.
type WatchConfig struct {
	Name      string // prefix of the agents' names (default: the host name)
	Dir       string // NIXL_TELEMETRY_DIR of the engines
	ServerURL string
	Token     string
	Interval  time.Duration // how often the rings are read
	// VLLMMetrics are engines' Prometheus endpoints, scraped every
	// ScrapeEvery (default 5 s) with a timeout of the same.
	VLLMMetrics []string
	ScrapeEvery time.Duration
	// Sides maps a metrics URL to the engine it scrapes (P or D), and
	// Model, P and D are what kvscope plans for them: each observed plan
	// is held against the prediction, and every differing field is a
	// plan_mismatch event (nil Model: nothing is compared).
	Sides map[string]string
	Model *model.Model
	P, D  plan.Engine
	// SideChannels are engines' NIXL handshake listeners, asked every
	// SideChannelEvery (default 1 min) for each rank's metadata: it names
	// the rank's NIXL agent (linking its ring to the engine) and is held
	// against kvscope's registration of that rank.
	SideChannels     []SideChannel
	SideChannelEvery time.Duration
	// SideChannelTimeout bounds each request (default 5 s).
	SideChannelTimeout time.Duration
	// SideChannelMaxBytes bounds each answer, all its frames together
	// (default watch.DefaultMaxAnswerBytes, 16 MiB).
	SideChannelMaxBytes int64
	// Connector is the deployment's KV connector (the scenario's: nixl or
	// nixl-push; "" is nixl): with one P and one D side channel, each
	// complete read of both is judged as kvscope pd --p-side-channel
	// --d-side-channel judges it, and the verdict goes to the Deployment
	// panel.
	Connector string
	// MaxAgents bounds the agents this watcher streams, each a stream of
	// its own to the server: rings, engines of the scrapes, side channel
	// agents (default DefaultMaxAgents). Past it, a new agent's events
	// are not sent (its errors are still logged); the agents refused are
	// counted in the log and in watch_agents_refused_total.
	MaxAgents int
	// MaxSeries bounds the series of one scrape (default
	// watch.DefaultMaxSeries); a scrape over it is an error.
	MaxSeries int
	// Agents maps NIXL agents (ring file names) to engine ranks, "p0" or
	// "d3" (the scenario's agents), where no side channel says it.
	Agents map[string]string
	// StuckAfter is how long a NIXL request may stay posted and not
	// completed before it is a stuck_transfer (default
	// StuckAfterFromEnv(os.Getenv)).
	StuckAfter time.Duration
	// Metrics receives the watcher's Prometheus metrics (watch_metrics.go),
	// every series labelled pair=Name.
	Metrics *metrics.Registry
	Logf    func(format string, args ...any)
	// sink replaces the server or the log (tests).
	sink func(agent string) Sink
}

// DefaultMaxAgents is WatchConfig.MaxAgents when none is given.
const DefaultMaxAgents = 256

// Watch reads the engines' NIXL telemetry until ctx ends. Each NIXL agent
// (a vLLM worker: one ring file, named by its UUID) is an agent of the
// live view, "<name>/<uuid>": a hello when its ring opens, a registration
// per registerMem, one transfer_done per completed NIXL request (bytes and
// NIXL's post and transfer times: measured by NIXL; verified "unverified":
// kvscope did not move these bytes), an error per NIXL error event, and a
// sample a second (with the events NIXL says it dropped).
func Watch(ctx context.Context, c WatchConfig) error {
	if c.Dir == "" {
		c.Dir = os.Getenv("NIXL_TELEMETRY_DIR")
	}
	if c.Dir == "" && len(c.VLLMMetrics) == 0 {
		return fmt.Errorf("watch: give --nixl-telemetry-dir (or set NIXL_TELEMETRY_DIR), the directory the engines' NIXL writes its rings to, or --vllm-metrics")
	}
	if c.Dir == "" {
		c.Dir = "-"
	}
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if c.MaxAgents <= 0 {
		c.MaxAgents = DefaultMaxAgents
	}
	if c.StuckAfter <= 0 {
		c.StuckAfter = StuckAfterFromEnv(os.Getenv)
	}
	w := &watcher{cfg: c, logf: logf, agents: map[string]*watched{}, links: map[string]link{}, overNames: map[string]bool{}, observed: map[xfer.Side]xfer.Observed{},
		state: newWatchState()}
	w.initMetrics()
	for name, v := range c.Agents {
		side, rank, err := scenario.AgentRank(v)
		if err != nil {
			return fmt.Errorf("watch: agents.%s = %q: %w", name, v, err)
		}
		w.links[name] = link{Side: side, Rank: rank}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.samples(ctx)
	for _, sc := range c.SideChannels {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.sideChannel(ctx, sc)
		}()
	}
	for _, url := range c.VLLMMetrics {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.scrape(ctx, url)
		}()
	}
	var err error
	if c.Dir != "-" {
		err = (&watch.Watcher{Dir: c.Dir, Interval: c.Interval, MaxRings: c.MaxAgents}).Run(ctx, w.observe)
	} else {
		<-ctx.Done() // metrics only
	}
	cancel()
	w.close()
	return err
}

// close sends what the agents' streams hold (for up to 5 s) and stops them.
func (w *watcher) close() {
	w.mu.Lock()
	agents := make([]*watched, 0, len(w.agents))
	for _, a := range w.agents {
		agents = append(agents, a)
	}
	w.mu.Unlock()
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, a := range agents {
		if st, ok := a.sink.(*stream.Streamer); ok {
			st.Flush(fctx)
		}
		if a.stop != nil {
			a.stop()
		}
	}
	w.wg.Wait()
}

type watcher struct {
	cfg    WatchConfig
	logf   func(string, ...any)
	mu     sync.Mutex
	agents map[string]*watched
	links  map[string]link // NIXL agent -> engine rank
	wg     sync.WaitGroup
	// over counts the agents refused past MaxAgents (distinct names while
	// overNames holds fewer than maxOverNames, every refusal after).
	over      int
	overNames map[string]bool
	// observed is each side's latest complete side channel read, and
	// judged what the preflight of the pair last judged (preflight).
	observed map[xfer.Side]xfer.Observed
	judged   string
	// state is what the watcher's gauges read; dpb is kvscope's
	// descriptors per byte (descsPerByte), computed once.
	state   watchState
	dpb     float64
	dpbDone bool
}

// maxOverNames bounds the refused names remembered to count them once.
const maxOverNames = 1 << 16

// watched is one NIXL agent's stream and its running figures.
type watched struct {
	name     string // the agent's name, as the server knows it
	sink     Sink
	stop     context.CancelFunc
	requests int
	dropped  uint64
	window   []done // the last second's transfers
	ring     int    // telemetry ring version, 0 before its ring opens
	// quiet agents send no samples; announced is set once a hello went.
	quiet, announced bool
	// inFlight is the ring's requests posted and not completed, oldest
	// first; posts counts the posts seen; closed is set once its ring
	// closed (till it opens again).
	inFlight []inFlight
	posts    int
	closed   bool
}

// agent is the stream of a NIXL agent, started at its first observation.
func (w *watcher) agent(name string) *watched {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a, ok := w.agents[name]; ok {
		return a
	}
	full := w.cfg.Name + "/" + name
	if err := event.CheckAgentName(full); err != nil {
		full = fmt.Sprintf("%s/nixl-%d", w.cfg.Name, len(w.agents)+1) // a ring named as no agent may be
	}
	if len(w.agents) >= w.cfg.MaxAgents {
		return w.refuse(name, full)
	}
	a := &watched{name: full}
	switch {
	case w.cfg.sink != nil:
		a.sink = w.cfg.sink(full)
	case w.cfg.ServerURL != "":
		st := &stream.Streamer{Agent: full, URL: w.cfg.ServerURL, Token: w.cfg.Token, Logf: w.logf}
		ctx, cancel := context.WithCancel(context.Background())
		a.sink, a.stop = st, cancel
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			st.Run(ctx)
		}()
	default:
		a.sink = &logSink{logf: w.logf}
	}
	w.agents[name] = a
	return a
}

// refuse is an agent past MaxAgents: a stand-in, not kept, whose events
// go nowhere (emit still logs its errors). The first refusal is logged,
// then each time the count doubles. w.mu is held.
func (w *watcher) refuse(name, full string) *watched {
	if !w.overNames[name] {
		if len(w.overNames) < maxOverNames {
			w.overNames[name] = true
		}
		w.over++
		if w.over&(w.over-1) == 0 {
			w.logf("watch: %s not streamed: %d agents are watched, the most --max-agents allows (%d refused so far)", full, w.cfg.MaxAgents, w.over)
		}
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.Add("watch_agents_refused_total", "Agents the watcher did not stream: past --max-agents.", 1)
		}
	}
	return &watched{name: full, sink: discard{}, quiet: true}
}

// discard is the sink of an agent past MaxAgents.
type discard struct{}

// Publish implements Sink.
func (discard) Publish(event.Event) {}

// Dropped implements Sink.
func (discard) Dropped() uint64 { return 0 }

// emit sends an event on an agent's stream; an error is logged here as
// well, whether or not the events go to a server.
func (w *watcher) emit(a *watched, e event.Event) {
	if e.TS == 0 {
		e.TS = time.Now().UnixNano()
	}
	if e.Kind == event.Error && e.Error != nil {
		w.logf("%s: %s: %s", a.name, e.Error.Status, e.Error.Message)
	}
	a.sink.Publish(e)
}

// observe turns one ring observation into events. A file refused or
// skipped is logged, and an error event only for an agent already
// streamed: a directory of junk files costs no streams.
func (w *watcher) observe(o watch.Observation) {
	switch o.Kind {
	case "skipped":
		w.logf("%v", o.Err)
		return
	case "refused":
		w.mu.Lock()
		a, ok := w.agents[o.Agent]
		w.mu.Unlock()
		if !ok {
			w.logf("refused %s: %v", o.Agent, o.Err)
			return
		}
		w.emit(a, event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_NOT_FOUND", Message: event.Clip(o.Err.Error(), maxMessage)}})
		return
	}
	a := w.agent(o.Agent)
	switch o.Kind {
	case "opened":
		w.logf("watching NIXL agent %q (telemetry version %d)", o.Agent, o.Version)
		w.mu.Lock()
		a.ring, a.closed = int(o.Version), false
		w.mu.Unlock()
		w.hello(o.Agent, a)
	case "posted":
		w.posted(a)
	case "registered":
		w.emit(a, event.Event{Kind: event.Registration, Registration: &event.RegistrationData{Rank: -1, Regions: 1, Bytes: int64(o.Bytes), Memory: "VRAM"}})
	case "transfer":
		t := o.Transfer
		if f, wasStuck := w.completed(a); wasStuck {
			w.emit(a, event.Event{Kind: event.StuckTransfer, Stuck: &event.StuckData{Request: f.id, Source: sourceRing, SinceNS: f.at.UnixNano(),
				AgeS: time.Since(f.at).Seconds(), Cleared: true, Reason: fmt.Sprintf("completed after %s", time.Since(f.at).Round(time.Second))}})
		}
		w.mu.Lock()
		a.requests++
		id := fmt.Sprintf("%s-%d", t.Dir, a.requests)
		a.window = append(a.window, done{at: time.Now(), bytes: int64(t.Bytes), us: float64(t.XferUS)})
		w.mu.Unlock()
		d := &event.DoneData{Request: id, Bytes: int64(t.Bytes), PostUS: float64(t.PostUS), TransferUS: float64(t.XferUS),
			Timing: event.Measured, Source: "nixl", Verified: "unverified"}
		if t.XferUS > 0 {
			d.GBps = float64(t.Bytes) / 1e3 / float64(t.XferUS)
		}
		w.emit(a, event.Event{Kind: event.TransferDone, Done: d})
		w.mu.Lock()
		l, linked := w.links[o.Agent]
		w.mu.Unlock()
		if linked {
			w.band(l, id, t)
		}
		w.observeTransfer(o.Agent, id, t)
	case "error":
		msg := fmt.Sprintf("NIXL agent %s reported %s", o.Agent, o.Status)
		if o.Err != nil {
			msg = o.Err.Error()
		}
		if o.Count > 1 {
			msg += fmt.Sprintf(" (%d times)", o.Count)
		}
		w.emit(a, event.Event{Kind: event.Error, Error: &event.ErrorData{Status: o.Status, Message: event.Clip(msg, maxMessage)}})
		if o.Err != nil { // events that did not decode: telemetry lost, not transfers failed
			w.addDropped(float64(o.Count))
		} else {
			w.countFailures(o.Status, sourceRing, float64(o.Count))
		}
	case "dropped":
		w.mu.Lock()
		a.dropped += o.Count
		w.mu.Unlock()
		w.addDropped(float64(o.Count))
	case "closed":
		w.mu.Lock()
		a.closed, a.inFlight = true, nil
		w.mu.Unlock()
		w.emit(a, event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_NOT_FOUND", Message: event.Clip(o.Err.Error(), maxMessage)}})
	}
}

// scrape reads one engine process's /metrics until ctx ends: each vLLM
// engine in it is an agent of the live view ("<name>/vllm-<host>-<port>-
// e<index>") with a hello naming its observed plan (vllm:cache_config_info),
// a sample per scrape from what its NIXL histograms gained since the last
// one (rate, p50/p99 transfer time, transfers so far) and an error when its
// failure counters grow or the scrape fails.
func (w *watcher) scrape(ctx context.Context, url string) {
	every := w.cfg.ScrapeEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	client := &http.Client{}
	prev := map[string]*watch.Engine{}
	var prevAt time.Time
	failing := false
	endpoint := "vllm-" + strings.NewReplacer("http://", "", "https://", "", ":", "-", "/", "-").Replace(strings.TrimSuffix(url, "/metrics"))
	for {
		sctx, cancel := context.WithTimeout(ctx, every)
		engines, err := watch.Scrape(sctx, client, url, w.cfg.MaxSeries)
		cancel()
		now := time.Now()
		if ctx.Err() != nil {
			return
		}
		w.setTarget(url, "vllm_metrics", err == nil)
		if err != nil {
			if !failing {
				a := w.agent(endpoint)
				w.emit(a, event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_REMOTE_DISCONNECT", Message: event.Clip(err.Error(), maxMessage)}})
			}
			failing = true
		} else {
			failing = false
			for index, e := range engines {
				name := endpoint + "-e" + index
				a := w.agent(name)
				p := prev[index]
				if p == nil {
					w.emit(a, event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: url, Backend: "vLLM /metrics", Memory: "VRAM", Role: "watch",
						GPUs: []event.GPU{}, NoGPU: "watching a vLLM engine's metrics", Model: e.Model,
						Scenario: fmt.Sprintf("vLLM engine %s of %s; observed plan: %s", index, url, observedPlan(e))}})
				}
				if p == nil || observedPlan(p) != observedPlan(e) {
					ms := w.compare(url, name, e)
					w.setMismatches(name, ms)
					for _, m := range ms {
						w.emit(a, event.Event{Kind: event.PlanMismatch, Mismatch: &m})
					}
				}
				side := strings.ToUpper(w.cfg.Sides[url])
				w.scraped(name, side, e, p)
				if p != nil {
					x := e.XferSeconds.Since(p.XferSeconds)
					b := e.Bytes.Since(p.Bytes)
					sec := now.Sub(prevAt).Seconds()
					w.emit(a, event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: b.Sum / 1e9 / max(sec, 1e-3),
						P50US: us(x.Quantile(0.5)), P99US: us(x.Quantile(0.99)), Requests: int(e.XferSeconds.Count)}})
					if n := e.FailedTransfers - p.FailedTransfers; n > 0 {
						w.emit(a, event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_BACKEND",
							Message: fmt.Sprintf("%g failed NIXL transfers since the last scrape (vllm:nixl_num_failed_transfers)", n)}})
						w.countFailures("ERR_BACKEND", "vllm", n)
					}
					w.vllmStuck(a, name, prevAt, e.ExpiredRequests-p.ExpiredRequests, "vllm:nixl_num_kv_expired_reqs",
						"KV of %g requests expired on this prefill engine before a decode engine read it: check the decode engines' NIXL (kvscope_transfers_stuck, their side channels) and VLLM_NIXL_ABORT_REQUEST_TIMEOUT")
					w.vllmStuck(a, name, prevAt, e.FailedNotifications-p.FailedNotifications, "vllm:nixl_num_failed_notifications",
						"%g NIXL notifications failed: the remote engine did not take the completion notice; check that its side channel answers and its NIXL agent is up")
				}
				prev[index] = e
			}
			prevAt = now
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// compare holds an engine's observed plan against kvscope's prediction
// for the side its URL is mapped to.
func (w *watcher) compare(url, engine string, e *watch.Engine) []event.MismatchData {
	side := strings.ToUpper(w.cfg.Sides[url])
	if w.cfg.Model == nil || e.Cache == nil || (side != "P" && side != "D") {
		return nil
	}
	p, err := plan.New(w.cfg.Model, w.engine(side))
	if err != nil {
		return []event.MismatchData{{Engine: engine, Side: side, Field: "plan", Observed: observedPlan(e), Predicted: "no plan: " + err.Error(), Source: "kvscope"}}
	}
	var out []event.MismatchData
	for _, f := range []struct {
		field     string
		predicted string
	}{{"block_size", strconv.Itoa(p.BlockSize)}, {"num_gpu_blocks", strconv.FormatInt(p.NumBlocks, 10)}} {
		if got, ok := e.Cache[f.field]; ok && got != f.predicted {
			out = append(out, event.MismatchData{Engine: engine, Side: side, Field: f.field, Observed: got, Predicted: f.predicted, Source: "vllm:cache_config_info"})
		}
	}
	return out
}

// us is seconds as microseconds, 0 for NaN (no transfer).
func us(s float64) float64 {
	if math.IsNaN(s) {
		return 0
	}
	return s * 1e6
}

// observedPlan lists what vllm:cache_config_info says of the plan.
func observedPlan(e *watch.Engine) string {
	if e.Cache == nil {
		return "none exported"
	}
	var parts []string
	for _, k := range []string{"block_size", "num_gpu_blocks", "mamba_page_size_padded", "cache_dtype"} {
		if v, ok := e.Cache[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ", ")
}

// samples sends each agent's 1 Hz sample.
func (w *watcher) samples(ctx context.Context) {
	every(ctx, time.Second, func() {
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.checkStuck(now)
		for name, a := range w.agents {
			if strings.HasPrefix(name, "vllm-") || a.quiet {
				continue // an engine's samples come with its scrapes
			}
			var keep []done
			var bytes int64
			var lat []float64
			for _, d := range a.window {
				if now.Sub(d.at) <= time.Second {
					keep = append(keep, d)
					bytes += d.bytes
					lat = append(lat, d.us)
				}
			}
			a.window = keep
			a.sink.Publish(event.Event{TS: now.UnixNano(), Kind: event.Sample, Sample: &event.SampleData{GBps: float64(bytes) / 1e9,
				P50US: metrics.Quantile(lat, 0.5), P99US: metrics.Quantile(lat, 0.99), Requests: a.requests, DroppedEvents: a.dropped}})
		}
	})
}
