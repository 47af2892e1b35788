package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/core/event"
)

// hub fans agents' events out to browsers. Agents publish over /ws/agent;
// browsers subscribe read-only over /ws/live. Each subscriber has a bounded
// queue of frames: a slow browser loses its oldest frames (counted, and
// seen as a sequence gap in the browser), never stalling an agent or the
// other browsers. It is safe for concurrent use.
type hub struct {
	mu            sync.Mutex
	subs          map[*subscriber]struct{}
	lastSeq       map[string]uint64          // per agent: the last sequence stored
	lastTS        map[string]int64           // per agent: that event's timestamp
	recent        recentEvents               // replayed to a new subscriber
	state         map[string][]stored        // per agent: its hello, latest handshakes and registrations
	conns         map[string]*websocket.Conn // per agent: its live connection
	seen          map[string]time.Time       // per agent: when it last connected or disconnected
	record        io.Writer                  // --record: one event per line
	recordFailing bool
	metrics       *metrics.Registry
	subQueue      int // frames buffered per subscriber
	logf          func(format string, args ...any)
	stopped       context.Context // done once the hub closes
	stop          context.CancelFunc
	agentsStopped context.Context // done first: no more events come in
	stopAgents    context.CancelFunc

	// A new subscriber's history is packed outside mu, at most
	// historyBuilders at a time (a storm of subscribers cannot take every
	// core from the agents), and reused by the next subscriber while no
	// event arrived (version counts publishes that stored events).
	builders      chan struct{}
	version       uint64
	cachedVersion uint64
	cached        [][]byte

	// With a bus (JetStream), agents' events are stored there and come
	// back to every replica through its consumer (publish); storedSeq and
	// storedTS are the stored positions agents are acknowledged, learnt
	// from the stream when an agent connects.
	bus       *bus
	storedSeq map[string]uint64
	storedTS  map[string]int64

	fleet   map[string]*fleetStat // per agent, for the fleet summary
	slowest []fleetTransfer       // the slowest transfers of the last minute

	// The last fleet summary, shared by every subscriber for fleetReuse
	// (fleetMu is taken before mu, never while holding it).
	fleetMu  sync.Mutex
	fleetMsg []byte
	fleetAt  time.Time
}

// historyBuilders bounds the subscribers packing their history at once.
const historyBuilders = 2

type subscriber struct {
	frames  chan liveFrame
	dropped uint64
	// behind closes when the subscriber's queue overflows and the hub has
	// a log: the connection is closed and the browser resumes from the log
	// after the last event it saw, so it loses nothing.
	behind     chan struct{}
	behindOnce sync.Once
	queued     atomic.Int64 // bytes in frames
	// agents, when not nil, are the only agents whose events the
	// subscriber gets (the fleet summary covers every agent).
	agents map[string]bool
}

func newHub(reg *metrics.Registry, record io.Writer, logf func(string, ...any)) *hub {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	stopped, stop := context.WithCancel(context.Background())
	agentsStopped, stopAgents := context.WithCancel(stopped)
	return &hub{subs: map[*subscriber]struct{}{}, lastSeq: map[string]uint64{}, lastTS: map[string]int64{}, recent: recentEvents{maxEvents: 2048, maxBytes: 8 << 20}, state: map[string][]stored{},
		conns: map[string]*websocket.Conn{}, seen: map[string]time.Time{},
		record: record, metrics: reg, subQueue: 1024, logf: logf, stopped: stopped, stop: stop, agentsStopped: agentsStopped, stopAgents: stopAgents, builders: make(chan struct{}, historyBuilders),
		storedSeq: map[string]uint64{}, storedTS: map[string]int64{}, fleet: map[string]*fleetStat{}}
}

// close ends every agent and browser connection with "going away" (the
// server is stopping); http.Server.Shutdown does not reach hijacked
// websocket connections.
func (h *hub) close() {
	h.stopAgents()
	// What agents were acknowledged is in the browsers' queues: let them
	// have it (up to 1 s) before their connections close too.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		queued := 0
		for s := range h.subs {
			queued += len(s.frames)
		}
		h.mu.Unlock()
		if queued == 0 {
			break
		}
	}
	h.stop()
}

// closeOnStop closes a connection with "going away" when the hub closes;
// the returned function cancels that.
func (h *hub) closeOnStop(conn *websocket.Conn) func() bool {
	return context.AfterFunc(h.stopped, func() { conn.Close(websocket.StatusGoingAway, "server stopping") })
}

// closeAgentOnStop is closeOnStop for an agent's connection: agents go
// first when the hub closes.
func (h *hub) closeAgentOnStop(conn *websocket.Conn) func() bool {
	return context.AfterFunc(h.agentsStopped, func() { conn.Close(websocket.StatusGoingAway, "server stopping") })
}

// stored is an event the hub keeps, with its encoding (done once, when it
// arrives: every frame that carries it reuses the bytes).
type stored struct {
	e   event.Event
	raw []byte
}

// recentEvents is the hub's replay buffer, bounded in events and bytes:
// the oldest go first when either bound is passed. Entries are never
// written in place, so a snapshot (a slice of it) stays valid; dropped
// entries are let go by copying the rest to a new array once they are
// half the buffer or a quarter of the byte bound.
type recentEvents struct {
	buf                 []stored // buf[start:] is the buffer
	start               int
	bytes, dropped      int // bytes of buf[start:], and of buf[:start]
	maxEvents, maxBytes int
}

func (r *recentEvents) add(s stored) {
	r.buf = append(r.buf, s)
	r.bytes += len(s.raw)
	for len(r.buf)-r.start > r.maxEvents || r.bytes > r.maxBytes && len(r.buf)-r.start > 1 {
		n := len(r.buf[r.start].raw)
		r.bytes, r.dropped = r.bytes-n, r.dropped+n
		r.start++
	}
	if r.start > len(r.buf)/2 || r.dropped > r.maxBytes/4 {
		r.buf = append(make([]stored, 0, r.maxEvents+1), r.buf[r.start:]...)
		r.start, r.dropped = 0, 0
	}
}

// events is the buffer, oldest first (a snapshot: do not modify).
func (r *recentEvents) events() []stored {
	return r.buf[r.start:len(r.buf):len(r.buf)]
}

// publish stores an agent's events: it drops the ones already stored (an
// agent resends after reconnecting), records and counts the rest, and
// queues frames of them to every subscriber. It returns the last sequence
// number stored for the agent, which the agent is acknowledged. Each event
// is encoded once, here; subscribers' frames are made of those bytes.
func (h *hub) publish(events []event.Event) uint64 { return h.publishEncoded(events, nil) }

// publishEncoded is publish with the events' encodings given (raws[i] is
// events[i]'s JSON; nil encodes them here).
func (h *hub) publishEncoded(events []event.Event, raws [][]byte) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var fresh [][]byte
	var freshAgents []string
	var last, stream uint64
	now := time.Now()
	for i, e := range events {
		stream = max(stream, e.Stream)
		if h.lastSeq[e.Agent] > 0 && event.Restarted(e, h.lastTS[e.Agent]) {
			h.logf("agent %q restarted: its sequence starts again", e.Agent)
			delete(h.lastSeq, e.Agent)
		}
		if e.Seq <= h.lastSeq[e.Agent] {
			last = h.lastSeq[e.Agent]
			continue
		}
		h.lastSeq[e.Agent], h.lastTS[e.Agent] = e.Seq, e.TS
		last = e.Seq
		var raw []byte
		var err error
		if raws != nil {
			raw = raws[i]
		} else {
			raw, err = event.Encode(e)
		}
		if err != nil || len(raw) > maxEventBytes {
			h.reject("event_too_big") // no frame can carry it to a browser
			continue
		}
		st := stored{e, raw}
		fresh = append(fresh, raw)
		freshAgents = append(freshAgents, e.Agent)
		h.fleetSeen(e, now)
		h.recent.add(st)
		h.remember(st)
		h.count(e)
		h.write(raw)
	}
	if len(fresh) > 0 {
		h.version++
	}
	for _, g := range byAgent(fresh, freshAgents) {
		frames, counts := packCounted(g.raws)
		for i, frame := range frames {
			lf := liveFrame{frame, stream, counts[i], g.agent}
			for s := range h.subs {
				if s.agents == nil || s.agents[g.agent] {
					h.offer(s, lf)
				}
			}
		}
	}
	return last
}

// liveFrame is a frame queued for a subscriber, with the stream message
// its events came from (0 without a log): a browser that resumed from the
// log skips the frames its catch-up already carried.
type liveFrame struct {
	data   []byte
	stream uint64
	events int
	agent  string // every event of a frame is one agent's
}

// maxEventBytes is the largest event a frame can carry.
const maxEventBytes = event.MaxFrameBytes - 2

// packFrames packs encoded events, in order, into frames within a
// browser's limits (event.MaxFrameBytes, event.MaxFrameEvents).
func packFrames(events [][]byte) [][]byte {
	frames, _ := packCounted(events)
	return frames
}

// packCounted is packFrames with each frame's number of events.
func packCounted(events [][]byte) ([][]byte, []int) {
	var frames [][]byte
	var counts []int
	var cur [][]byte
	size := 2
	for _, e := range events {
		if len(cur) > 0 && (size+len(e)+1 > event.MaxFrameBytes || len(cur) >= event.MaxFrameEvents) {
			frames, counts = append(frames, event.JoinFrame(cur)), append(counts, len(cur))
			cur, size = nil, 2
		}
		cur = append(cur, e)
		size += len(e) + 1
	}
	if len(cur) > 0 {
		frames, counts = append(frames, event.JoinFrame(cur)), append(counts, len(cur))
	}
	return frames, counts
}

// offer queues a frame for a subscriber, dropping its oldest frame when
// its queue is full.
func (h *hub) offer(s *subscriber, frame liveFrame) {
	if h.bus != nil {
		if s.queued.Load()+int64(len(frame.data)) > subQueueBytes {
			s.fallBehind(h)
			return
		}
		select {
		case s.frames <- frame:
			s.queued.Add(int64(len(frame.data)))
		default:
			s.fallBehind(h)
		}
		return
	}
	for {
		if s.queued.Load()+int64(len(frame.data)) <= subQueueBytes {
			select {
			case s.frames <- frame:
				s.queued.Add(int64(len(frame.data)))
				return
			default:
			}
		}
		select {
		case old := <-s.frames:
			s.queued.Add(-int64(len(old.data)))
			s.dropped++
			h.metrics.Add("kvscope_hub_subscriber_dropped_frames_total", "Frames dropped because a browser read too slowly.", 1)
		default:
			if s.queued.Load() > 0 || len(frame.data) > subQueueBytes { // a frame larger than the whole queue: dropped
				s.dropped++
				return
			}
		}
	}
}

// subQueueBytes bounds the bytes queued for one subscriber.
const subQueueBytes = 8 << 20

// fallBehind tells a subscriber to resume from the log (once).
func (s *subscriber) fallBehind(h *hub) {
	s.behindOnce.Do(func() {
		close(s.behind)
		h.metrics.Add("kvscope_hub_subscriber_resumes_total", "Browsers told to resume from the event log because they read too slowly.", 1)
	})
}

// take accounts for a frame leaving a subscriber's queue.
func (s *subscriber) take(f liveFrame) liveFrame {
	s.queued.Add(-int64(len(f.data)))
	return f
}

// count updates the server's metrics from an event.
func (h *hub) count(e event.Event) {
	h.metrics.Add("kvscope_hub_events_total", "Events received from agents, by kind.", 1, "kind", string(e.Kind))
	switch e.Kind {
	case event.TransferDone:
		h.metrics.Add("agent_tx_bytes_total", "Bytes the agents' transfers moved.", float64(e.Done.Bytes), "agent", e.Agent)
		h.metrics.Observe("agent_xfer_time_us", "Transfer time per request, microseconds.", e.Done.TransferUS)
		h.metrics.Add("kvscope_agent_transfers_total", "Transfers completed, by agent and oracle verdict.", 1, "agent", e.Agent, "verified", e.Done.Verified)
		h.metrics.Add("kvscope_agent_descriptors_total", "Descriptors submitted, by agent.", float64(e.Done.Descs), "agent", e.Agent)
		h.metrics.Add("kvscope_agent_descriptors_merged_total", "Descriptors posted after merging, by agent and clock (nixl: NIXL's telemetry).", float64(e.Done.Merged), "agent", e.Agent, "source", e.Done.Source)
	case event.Error:
		h.metrics.Add("agent_errors_total", "Agent errors, by status.", 1, "status", e.Error.Status)
	case event.Sample:
		h.metrics.Set("kvscope_agent_dropped_events", "Events an agent's queue dropped so far.", float64(e.Sample.DroppedEvents), "agent", e.Agent)
	}
}

// write appends an event to the recording; a failed write is logged
// (once until writes work again) and counted.
func (h *hub) write(raw []byte) {
	if h.record == nil {
		return
	}
	_, err := h.record.Write(append(raw[:len(raw):len(raw)], '\n'))
	if err != nil {
		h.metrics.Add("kvscope_hub_record_errors_total", "Events the recording could not take.", 1)
		if !h.recordFailing {
			h.logf("recording: %v (events are not recorded until writes work again)", err)
		}
	}
	h.recordFailing = err != nil
}

// maxState and maxStateBytes bound the state events kept per agent.
const (
	maxState      = 64
	maxStateBytes = 256 << 10
)

// remember keeps the events that describe an agent rather than a moment
// (its hello, handshakes and registrations), so a browser that subscribes
// long after they happened still learns who the agent is. A hello starts
// the list again; past either bound the oldest after the hello goes.
func (h *hub) remember(st stored) {
	switch st.e.Kind {
	case event.Hello:
		h.state[st.e.Agent] = []stored{st}
	case event.Handshake, event.Registration:
		list := append(h.state[st.e.Agent], st) // appends past what snapshots see
		size := 0
		for _, x := range list {
			size += len(x.raw)
		}
		drop := 0
		for len(list)-drop > 2 && (len(list)-drop > maxState || size > maxStateBytes) {
			size -= len(list[1+drop].raw)
			drop++
		}
		if drop > 0 { // a new slice: snapshots keep theirs (the hello stays first)
			list = append(append(make([]stored, 0, len(list)-drop), list[0]), list[1+drop:]...)
		}
		h.state[st.e.Agent] = list
	}
}

// snapshot is what a new subscriber's history is made of: each agent's
// state and the replay buffer. It copies a map of slice headers under
// h.mu and nothing more: the slices are never written in place (remember
// and recentEvents.add replace or append), so they stay as they were.
func (h *hub) snapshot() (map[string][]stored, []stored) {
	state := make(map[string][]stored, len(h.state))
	for a, list := range h.state {
		state[a] = list[:len(list):len(list)]
	}
	return state, h.recent.events()
}

// history groups a snapshot per agent: its state events older than its
// recent ones, then its recent ones.
func history(state map[string][]stored, recent []stored) map[string][]stored {
	out := map[string][]stored{}
	oldest := map[string]uint64{}
	for _, st := range recent {
		if _, ok := oldest[st.e.Agent]; !ok {
			oldest[st.e.Agent] = st.e.Seq
		}
	}
	for agent, list := range state {
		for _, st := range list {
			if first, ok := oldest[agent]; !ok || st.e.Seq < first {
				out[agent] = append(out[agent], st)
			}
		}
	}
	for _, st := range recent {
		out[st.e.Agent] = append(out[st.e.Agent], st)
	}
	return out
}

// historyFrames packs a history into frames within a browser's limits,
// each agent wholly in one frame (its state events, then as many of its
// most recent events as fit), agents in name order. It runs without h.mu.
func historyFrames(hist map[string][]stored) [][]byte {
	agents := make([]string, 0, len(hist))
	for a := range hist {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	var frames [][]byte
	var cur [][]byte
	size := 2
	flush := func() {
		if len(cur) > 0 {
			frames = append(frames, event.JoinFrame(cur))
			cur, size = nil, 2
		}
	}
	for _, a := range agents {
		list := hist[a]
		n, bytes := 0, 2
		for _, st := range list {
			n, bytes = n+1, bytes+len(st.raw)+1
		}
		// Too much for one frame: drop its oldest recent events (the
		// state events, first in the list, stay).
		states := 0
		for states < len(list) && isState(list[states].e.Kind) {
			states++
		}
		rest := list[states:]
		for len(rest) > 0 && (bytes > event.MaxFrameBytes || n > event.MaxFrameEvents) {
			n, bytes = n-1, bytes-len(rest[0].raw)-1
			rest = rest[1:]
		}
		list = append(list[:states:states], rest...)
		if len(cur)+n > event.MaxFrameEvents || size+bytes > event.MaxFrameBytes {
			flush()
		}
		for _, st := range list {
			cur = append(cur, st.raw)
			size += len(st.raw) + 1
		}
	}
	flush()
	return frames
}

// isState reports the kinds remember keeps.
func isState(k event.Kind) bool {
	return k == event.Hello || k == event.Handshake || k == event.Registration
}

// subscribe registers a subscriber and returns its history frames. Under
// h.mu it only registers and copies slice headers (or takes the frames
// the last subscriber packed, when no event arrived since); the packing
// happens afterwards, so agents never wait for a subscriber (frames
// published meanwhile queue for it).
func (h *hub) subscribe() (*subscriber, [][]byte) { return h.subscribeTo(nil) }

// subscribeTo is subscribe for the given agents only (nil: all of them).
func (h *hub) subscribeTo(agents map[string]bool) (*subscriber, [][]byte) {
	h.builders <- struct{}{}
	defer func() { <-h.builders }()
	s := &subscriber{frames: make(chan liveFrame, h.subQueue), behind: make(chan struct{}), agents: agents}
	h.mu.Lock()
	version := h.version
	var state map[string][]stored
	var recent []stored
	frames := h.cached
	fresh := h.cachedVersion == version && frames != nil && agents == nil
	if !fresh {
		state, recent = h.snapshot()
	}
	h.subs[s] = struct{}{}
	n := len(h.subs)
	h.mu.Unlock()
	h.metrics.Set("kvscope_hub_subscribers", "Browsers subscribed to /ws/live.", float64(n))
	if !fresh {
		hist := history(state, recent)
		if agents != nil {
			for a := range hist {
				if !agents[a] {
					delete(hist, a)
				}
			}
		}
		frames = historyFrames(hist)
		if frames == nil {
			frames = [][]byte{}
		}
		if agents == nil {
			h.mu.Lock()
			if version >= h.cachedVersion {
				h.cached, h.cachedVersion = frames, version
			}
			h.mu.Unlock()
		}
	}
	return s, frames
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

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
	h.metrics.Set("kvscope_hub_subscribers", "Browsers subscribed to /ws/live.", float64(len(h.subs)))
}

// agentHandler is /ws/agent: an agent with the bearer token sends frames
// of events; each stored frame is acknowledged with the agent's last stored
// sequence number. A malformed or oversized frame closes that connection
// only.
func (h *hub) agentHandler(token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			h.reject("token")
			http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		name := r.URL.Query().Get("agent")
		if err := event.CheckAgentName(name); err != nil {
			h.reject("agent_name")
			http.Error(w, fmt.Sprintf("/ws/agent?agent=NAME: %v", err), http.StatusBadRequest)
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		defer h.closeAgentOnStop(conn)()
		conn.SetReadLimit(event.MaxFrameBytes)
		ctx := r.Context()
		var in messageReader
		welcome := h.connect(ctx, name, conn, r.RemoteAddr)
		defer h.disconnect(name, conn)
		if err := h.ack(ctx, conn, welcome); err != nil {
			return
		}
		for {
			data, err := in.read(ctx, conn)
			if err != nil {
				if websocket.CloseStatus(err) == websocket.StatusMessageTooBig || errors.Is(err, websocket.ErrMessageTooBig) {
					h.reject("too_big")
				}
				return
			}
			events, err := event.DecodeFrame(data)
			if err == nil {
				err = sameAgent(events, name)
			}
			if err != nil {
				h.reject("malformed")
				h.logf("agent %q: frame rejected: %q", name, err.Error())
				conn.Close(websocket.StatusUnsupportedData, event.Clip(err.Error(), 123))
				return
			}
			last, err := h.store(ctx, name, events, data)
			if err != nil {
				h.logf("agent %q: %v", name, err)
				conn.Close(websocket.StatusTryAgainLater, event.Clip(err.Error(), 123))
				return
			}
			if err := h.ack(ctx, conn, last); err != nil {
				return
			}
		}
	})
}

// messageReader reads a connection's messages into buffers sized by the
// last one: a steady stream of frames costs one allocation each, not the
// doubling of a buffer grown from empty (and its copies).
type messageReader struct{ last int }

func (m *messageReader) read(ctx context.Context, conn *websocket.Conn) ([]byte, error) {
	_, r, err := conn.Reader(ctx)
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, m.last+m.last/8+2*bytes.MinRead))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	m.last = buf.Len()
	return buf.Bytes(), nil
}

func (h *hub) reject(reason string) {
	h.metrics.Add("kvscope_hub_rejected_total", "Connections and frames the hub refused, by reason.", 1, "reason", reason)
}

// ack tells an agent the last sequence number stored for it.
func (h *hub) ack(ctx context.Context, conn *websocket.Conn, last uint64) error {
	msg, _ := json.Marshal(map[string]uint64{"ack": last})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, msg)
}

// sameAgent checks that a connection carries only its own agent's events.
func sameAgent(events []event.Event, name string) error {
	for i, e := range events {
		if e.Agent != name {
			return &event.FrameError{Index: i, Field: "agent", Reason: fmt.Sprintf("%q on the connection of agent %q", e.Agent, name)}
		}
	}
	return nil
}

// connect ties a connection to an agent's name, closing an older
// connection of the same name (an agent reconnecting before the server
// noticed its old connection drop), and returns the last sequence number
// stored for the agent: the agent resumes after it.
func (h *hub) connect(ctx context.Context, name string, conn *websocket.Conn, addr string) uint64 {
	var stored uint64
	var storedTS int64
	if h.bus != nil {
		var err error
		if stored, storedTS, err = h.bus.lastStored(ctx, name); err != nil {
			h.logf("agent %s: its last stored event: %v (acknowledging what this replica stored)", name, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if stored > h.storedSeq[name] {
		h.storedSeq[name], h.storedTS[name] = stored, storedTS
	}
	if old, ok := h.conns[name]; ok {
		h.logf("agent %s connected again from %s; closing its older connection", name, addr)
		go old.Close(websocket.StatusPolicyViolation, "replaced by a newer connection of this agent")
	}
	h.conns[name] = conn
	h.seen[name] = time.Now()
	h.prune(time.Now())
	if h.bus != nil {
		return h.storedSeq[name]
	}
	return h.lastSeq[name]
}

func (h *hub) disconnect(name string, conn *websocket.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns[name] == conn {
		delete(h.conns, name)
	}
	h.seen[name] = time.Now()
}

// forgetAfter is how long the hub remembers an agent with no connection.
const forgetAfter = time.Hour

// prune forgets agents that have had no connection for forgetAfter, so a
// long-running server's memory stays bounded; such an agent that comes
// back is told it has nothing stored and sends its state again. h.mu is
// held.
func (h *hub) prune(now time.Time) {
	for name, at := range h.seen {
		if _, live := h.conns[name]; !live && now.Sub(at) > forgetAfter {
			delete(h.seen, name)
			delete(h.lastSeq, name)
			delete(h.lastTS, name)
			delete(h.state, name)
			delete(h.storedSeq, name)
			delete(h.storedTS, name)
			delete(h.fleet, name)
		}
	}
}

// liveHandler is /ws/live: a browser from this server's origin subscribes
// read-only to every agent's events.
func (h *hub) liveHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Accept refuses a cross-origin browser (Origin must match Host).
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			h.reject("origin")
			return
		}
		defer conn.CloseNow()
		defer h.closeOnStop(conn)()
		ctx := conn.CloseRead(r.Context()) // read-only: anything sent closes it
		since, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
		var agents map[string]bool
		if list, ok := r.URL.Query()["agents"]; ok { // ?agents=a,b: only these agents' events
			agents = map[string]bool{}
			for _, a := range strings.Split(strings.Join(list, ","), ",") {
				if a = strings.TrimSpace(a); a != "" && len(agents) < 1000 {
					agents[a] = true
				}
			}
		}
		s, hist := h.subscribeTo(agents)
		defer h.unsubscribe(s)
		var caughtUp uint64 // the last stream message the catch-up read
		more := false       // the catch-up stopped short of the stream's end
		if since > 0 && h.bus != nil {
			// A browser coming back: everything stored from the last
			// event it saw on, from the log, instead of the recent history
			// (live frames queue meanwhile; the browser drops what it
			// already has by agent and sequence). One far behind gets a
			// part and is told to come back for the rest.
			if frames, through, complete, err := h.catchUp(ctx, since, agents); err == nil {
				hist, caughtUp, more = frames, through, !complete
			} else {
				h.logf("a browser resuming after stream message %d: %v (sending the recent history)", since, err)
			}
		}
		send := func(frame []byte) bool {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return conn.Write(wctx, websocket.MessageText, frame) == nil
		}
		// {"history": N}, then the N frames of history, then live frames.
		if !send(event.HistoryHeader(len(hist))) {
			return
		}
		for _, frame := range hist {
			if !send(frame) {
				return
			}
		}
		if more {
			conn.Close(websocket.StatusTryAgainLater, "more to catch up: resume with ?since=<the last stream_seq seen>")
			return
		}
		fleetTick := time.NewTicker(time.Second)
		defer fleetTick.Stop()
		if !send(h.fleetSummary()) {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-fleetTick.C:
				if !send(h.fleetSummary()) {
					return
				}
			case <-s.behind:
				conn.Close(websocket.StatusTryAgainLater, "fell behind: resume with ?since=<the last stream_seq seen>")
				return
			case frame := <-s.frames:
				// The frames waiting go out in as few messages as a
				// browser's limits allow: a busy fleet's many small frames
				// would cost a subscriber a write each.
				batch := []liveFrame{s.take(frame)}
				size := len(frame.data)
			gather:
				for len(batch) < 256 && size < event.MaxFrameBytes {
					select {
					case f := <-s.frames:
						batch = append(batch, s.take(f))
						size += len(f.data)
					default:
						break gather
					}
				}
				var parts [][]byte
				psize, pn := 2, 0
				flush := func() bool {
					if len(parts) == 0 {
						return true
					}
					ok := send(event.JoinFrame(parts))
					parts, psize, pn = nil, 2, 0
					return ok
				}
				for _, f := range batch {
					if f.events == 0 || f.stream != 0 && f.stream <= caughtUp {
						continue // empty, or the catch-up carried it
					}
					if len(parts) > 0 && (psize+len(f.data)-1 > event.MaxFrameBytes || pn+f.events > event.MaxFrameEvents) && !flush() {
						return
					}
					parts = append(parts, f.data[1:len(f.data)-1])
					psize, pn = psize+len(f.data)-1, pn+f.events
				}
				if !flush() {
					return
				}
			}
		}
	})
}

func (h *hub) metricsHandler() http.Handler { return h.metrics.Handler() }
