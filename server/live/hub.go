package live

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

// The hub's defaults, each a field of Options.
const (
	// DefaultSubscriberQueue is the frames buffered per browser.
	DefaultSubscriberQueue = 1024
	// DefaultReplay is the stored frames a replica reads back from the
	// event log at start: its browsers' history.
	DefaultReplay = 1024
	// DefaultMaxAgentsPerCredential is four times a watcher's default
	// --max-agents.
	DefaultMaxAgentsPerCredential = 1024
)

// Options configure a Hub. The zero value is a hub that keeps events in
// memory only, records nothing and counts into a registry of its own.
type Options struct {
	// Metrics is where the hub's figures go (/metrics); nil: a registry
	// of its own.
	Metrics *metrics.Registry
	// Log is the event log agents' events are stored in; nil keeps them
	// in this process's memory only. With a log, its figures join Metrics.
	Log *eventlog.Log
	// Replay is how many stored frames the hub reads back from Log at
	// start (0: DefaultReplay).
	Replay uint64
	// Record, when set, gets every event the hub stores, one JSON line
	// each (kvscope serve --record), written by a bounded writer of its
	// own: see RecordQueue.
	Record io.Writer
	// RecordQueue is the events that may wait for Record (0:
	// DefaultRecordQueue); past it they are dropped and counted.
	RecordQueue int
	// SubscriberQueue is the frames buffered per browser (0:
	// DefaultSubscriberQueue).
	SubscriberQueue int
	// AgentBudget bounds what each agent may have stored, per second:
	// past it the hub sheds its moment events (descriptor batches,
	// samples, transfers), counted on /metrics and seen by browsers as
	// sequence gaps, and keeps what says who the agent is and what
	// failed. The zero value bounds nothing (kvscope serve sets one).
	AgentBudget Budget
	// MaxAgentsPerCredential bounds the agents connected at once under
	// one credential (a watcher's NAME/... agents; 0:
	// DefaultMaxAgentsPerCredential): past it a connection is refused with
	// 429.
	MaxAgentsPerCredential int
	// Logf logs what an operator should know (nil: nothing).
	Logf func(format string, args ...any)
}

// Hub fans agents' events out to browsers. Agents publish over
// AgentHandler (/ws/agent); browsers subscribe read-only over LiveHandler
// (/ws/live). Each browser has a bounded queue of frames: a slow browser
// loses its oldest frames (counted, and seen as a sequence gap in the
// browser) or, on an event log, is told to resume from the log; it never
// stalls an agent or the other browsers. Nothing under the lock that
// agents and browsers wait on touches a file or the network. It is safe
// for concurrent use.
type Hub struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	agents map[string]*agent // one state per agent
	// accepting counts the connections of each agent name between the
	// per-credential check and the connection's registration, so that
	// agents connecting at once cannot all pass the check.
	accepting map[string]int
	recent    recentEvents // replayed to a new subscriber
	rec       *recorder    // Options.Record's writer; nil without one
	metrics   *metrics.Registry
	subQueue  int // frames buffered per subscriber
	logf      func(format string, args ...any)
	budget    Budget // each agent's, per second
	// maxPerCredential bounds the agents connected under one credential.
	maxPerCredential int

	stopped       context.Context // done once the hub closes
	stop          context.CancelFunc
	agentsStopped context.Context // done first: no more events come in
	stopAgents    context.CancelFunc
	agentsIn      atomic.Int64 // agent connections being served (Close waits for them)
	closeOnce     sync.Once
	followed      chan struct{} // closed when following the log ends; nil without a log

	// Browsers resuming from the log are read back at most maxCatchUps
	// at a time, the others waiting their turn in order (catchUpWaiting
	// of them at most).
	catchUps       chan struct{}
	catchUpsHeld   chan struct{} // steps read or being sent
	catchUpWaiting atomic.Int64
	catchUpWait    time.Duration // how long one waits its turn

	// A new subscriber's history is packed outside mu, at most
	// historyBuilders at a time (a storm of subscribers cannot take every
	// core from the agents), and reused by the next subscriber while no
	// event arrived (version counts publishes that stored events).
	builders      chan struct{}
	version       uint64
	cachedVersion uint64
	cached        [][]byte

	// With a log (JetStream), agents' events are stored there and come
	// back to every replica through its consumer (publish).
	log *eventlog.Log

	slowest []fleetTransfer // the slowest transfers of the last minute

	// The last fleet summary, shared by every subscriber for fleetReuse
	// (fleetMu is taken before mu, never while holding it).
	fleetMu  sync.Mutex
	fleetMsg []byte
	fleetAt  time.Time

	// Detail on demand (detail.go): this hub's browsers drawing each
	// agent's detail, or every agent's; and the fleet's latest word that
	// some browser draws an agent (or every agent).
	watching    map[string]int
	watchingAll int
	leases      map[string]time.Time
	leaseAll    time.Time
}

// agent is everything the hub keeps of one agent, so that forgetting it
// (prune) is one delete.
type agent struct {
	lastSeq uint64          // the last sequence number published to browsers
	lastTS  int64           // that event's timestamp
	epoch   string          // the agent process that sent it ("": one that says none)
	state   event.State     // its hello, latest handshakes and registrations
	conn    *websocket.Conn // its connection to this replica; nil when none
	seen    time.Time       // when it last connected or disconnected here; zero: never here
	// With a log: the last sequence number the log holds for it (and its
	// timestamp), what it is acknowledged, learnt from the log when it
	// connects.
	storedSeq   uint64
	storedTS    int64
	storedEpoch string
	fleet       *fleetStat // its fleet summary line, from its first event
	spent       spending   // what it stored against the hub's AgentBudget
	// split: its connection numbers detail apart and sends it on demand
	// (/ws/agent?detail=1); detailOn: it was last told to send it.
	split, detailOn bool
	// detailAt: the dseq of the last detail event handed to browsers here,
	// and when, told to a browser coming back (event.History.DetailAt).
	detailAt   uint64
	detailAtTS time.Time
}

// historyBuilders bounds the subscribers packing their history at once.
const historyBuilders = 2

// New makes a hub; with a log it starts following the log into its
// browsers, until Close.
func New(o Options) *Hub {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New()
	}
	stopped, stop := context.WithCancel(context.Background())
	agentsStopped, stopAgents := context.WithCancel(stopped)
	h := &Hub{subs: map[*subscriber]struct{}{}, agents: map[string]*agent{}, accepting: map[string]int{}, recent: recentEvents{maxEvents: 2048, maxBytes: 8 << 20},
		metrics: o.Metrics, subQueue: o.SubscriberQueue, logf: o.Logf, stopped: stopped, stop: stop, agentsStopped: agentsStopped,
		stopAgents: stopAgents, builders: make(chan struct{}, historyBuilders), log: o.Log, budget: o.AgentBudget,
		catchUps: make(chan struct{}, maxCatchUps), catchUpsHeld: make(chan struct{}, maxCatchUpsHeld), catchUpWait: catchUpWait}
	if h.subQueue <= 0 {
		h.subQueue = DefaultSubscriberQueue
	}
	if h.maxPerCredential = o.MaxAgentsPerCredential; h.maxPerCredential <= 0 {
		h.maxPerCredential = DefaultMaxAgentsPerCredential
	}
	h.watching = map[string]int{}
	initMetrics(h.metrics)
	if o.Record != nil {
		h.rec = newRecorder(o.Record, o.RecordQueue, h.metrics, h.logf)
	}
	go h.watchLoop()
	if o.Log != nil {
		h.metrics.Register(o.Log.Collector())
		replay := o.Replay
		if replay == 0 {
			replay = DefaultReplay
		}
		if err := o.Log.Detail(h.stopped, h.leased, h.sayAll, func(agent string, frame []byte) {
			heads, ok, err := checkDetail(frame, agent)
			if err != nil || !ok {
				h.metrics.Add("kvscope_bus_bad_messages_total", "Stream messages that were not a frame of their agent's events.", 1)
				return
			}
			h.deliverDetail(agent, frame, heads)
		}); err != nil {
			h.logf("event log: detail on demand: %v (browsers get summaries only)", err)
		}
		h.followed = make(chan struct{})
		go func() {
			defer close(h.followed)
			h.follow(replay)
		}()
	}
	return h
}

// Close ends every agent and browser connection with "going away" (the
// server is stopping; http.Server.Shutdown does not reach hijacked
// websocket connections), stops following the log, and writes what
// waits for the recording. It may be called more than once.
func (h *Hub) Close() {
	h.closeOnce.Do(func() {
		h.stopAgents()
		// What agents were acknowledged is in the browsers' queues, or
		// about to be (an agent's frame being stored as its connection
		// closes): let the browsers have it, every frame written, (up to
		// 1 s) before their connections close too.
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			h.mu.Lock()
			pending := h.agentsIn.Load()
			for s := range h.subs {
				pending += s.pending.Load()
			}
			h.mu.Unlock()
			if pending == 0 {
				break
			}
		}
		h.stop()
		if h.followed != nil {
			<-h.followed
		}
		h.rec.close()
	})
}

// closeOnStop closes a connection with "going away" when the hub closes;
// the returned function cancels that.
func (h *Hub) closeOnStop(conn *websocket.Conn) func() bool {
	return context.AfterFunc(h.stopped, func() { conn.Close(websocket.StatusGoingAway, "server stopping") })
}

// closeAgentOnStop is closeOnStop for an agent's connection: agents go
// first when the hub closes.
func (h *Hub) closeAgentOnStop(conn *websocket.Conn) func() bool {
	return context.AfterFunc(h.agentsStopped, func() { conn.Close(websocket.StatusGoingAway, "server stopping") })
}

// agent is the named agent's state, made on first use; h.mu is held.
func (h *Hub) agent(name string) *agent {
	a := h.agents[name]
	if a == nil {
		a = &agent{}
		h.agents[name] = a
	}
	return a
}

// Publish stores agents' events: it drops the ones already stored (an
// agent resends after reconnecting), records and counts the rest, and
// queues frames of them to every subscriber. It returns the last sequence
// number stored for the (last event's) agent, which the agent is
// acknowledged. Each event is encoded once, here; subscribers' frames and
// the recording are made of those bytes.
func (h *Hub) Publish(events []event.Event) uint64 { return h.publishEncoded(events, nil, "") }

// publishEncoded is Publish with the events' encodings given (raws[i] is
// events[i]'s JSON; nil encodes them here), sent by the agent process
// epoch ("": unknown).
func (h *Hub) publishEncoded(events []event.Event, raws [][]byte, epoch string) uint64 {
	last, restarted := h.publishLocked(events, raws, epoch)
	for _, name := range restarted { // logged with the lock released: a log is a file
		h.logf("agent %q restarted: its sequence starts again", name)
	}
	return last
}

// publishLocked is publishEncoded's work under h.mu; it returns the
// last sequence number stored and the agents that restarted.
func (h *Hub) publishLocked(events []event.Event, raws [][]byte, epoch string) (last uint64, restarted []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var fresh [][]byte
	var freshAgents []string
	var stream uint64
	now := time.Now()
	var a *agent // the agent of the event before (a frame is one agent's)
	for i, e := range events {
		stream = max(stream, e.Stream)
		if i == 0 || e.Agent != events[i-1].Agent {
			a = h.agent(e.Agent)
			if epoch != "" && a.epoch != epoch {
				if a.epoch != "" && a.lastSeq > 0 { // another process of the agent: its sequence starts again
					restarted = append(restarted, e.Agent)
					a.lastSeq = 0
				}
				a.epoch = epoch
			}
		}
		if a.lastSeq > 0 && event.Restarted(e, a.lastTS) {
			restarted = append(restarted, e.Agent)
			a.lastSeq = 0
		}
		if e.Seq <= a.lastSeq {
			last = a.lastSeq
			continue
		}
		if event.CheckSeqJump(e.Agent, a.lastSeq, e.Seq) != nil {
			// Read from the log (an agent publishing there itself):
			// refused, as /ws/agent refuses it, and counted.
			h.reject("seq_jump")
			last = a.lastSeq
			continue
		}
		a.lastSeq, a.lastTS = e.Seq, e.TS
		last = e.Seq
		var raw []byte
		var err error
		if raws != nil {
			raw = raws[i]
		} else {
			raw, err = event.Encode(e)
		}
		if err != nil || len(raw) > event.MaxEventBytes {
			h.reject("event_too_big") // no frame can carry it to a browser
			continue
		}
		st := event.Encoded{Event: e, Raw: raw}
		fresh = append(fresh, raw)
		freshAgents = append(freshAgents, e.Agent)
		h.fleetSeen(a, e, now)
		h.recent.add(st)
		a.state.Keep(e, raw)
		h.count(e)
		h.rec.add(raw) // queued for the recorder's own goroutine: no I/O here
	}
	if len(fresh) > 0 {
		h.version++
	}
	for _, g := range byAgent(fresh, freshAgents) {
		frames, counts := event.Pack(g.raws)
		for i, frame := range frames {
			lf := liveFrame{frame, stream, counts[i], g.agent}
			for s := range h.subs {
				if s.agents == nil || s.agents[g.agent] {
					h.offer(s, lf)
				}
			}
		}
	}
	return last, restarted
}

// group is one agent's share of a publish.
type group struct {
	agent string
	raws  [][]byte
}

// byAgent splits encoded events by agent, keeping each agent's order (a
// publish is almost always one agent's frame: one group).
func byAgent(raws [][]byte, agents []string) []group {
	if len(raws) == 0 {
		return nil
	}
	same := true
	for _, a := range agents {
		same = same && a == agents[0]
	}
	if same {
		return []group{{agents[0], raws}}
	}
	var out []group
	index := map[string]int{}
	for i, a := range agents {
		j, ok := index[a]
		if !ok {
			j = len(out)
			index[a] = j
			out = append(out, group{agent: a})
		}
		out[j].raws = append(out[j].raws, raws[i])
	}
	return out
}

// forgetAfter is how long the hub remembers an agent with no connection.
const forgetAfter = time.Hour

// prune forgets agents that have had no connection here for forgetAfter,
// so a long-running server's memory stays bounded; such an agent that
// comes back is told it has nothing stored and sends its state again. An
// agent never connected here (known from the log only) is kept. h.mu is
// held.
func (h *Hub) prune(now time.Time) {
	for name, a := range h.agents {
		if a.conn == nil && !a.seen.IsZero() && now.Sub(a.seen) > forgetAfter {
			delete(h.agents, name)
		}
	}
}
