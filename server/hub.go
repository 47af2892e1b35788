package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
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
	recent        *event.Ring                // replayed to a new subscriber
	state         map[string][]event.Event   // per agent: its hello, latest handshakes and registrations
	conns         map[string]*websocket.Conn // per agent: its live connection
	seen          map[string]time.Time       // per agent: when it last connected or disconnected
	record        io.Writer                  // --record: one event per line
	recordFailing bool
	metrics       *metrics.Registry
	subQueue      int // frames buffered per subscriber
	logf          func(format string, args ...any)
	stopped       context.Context // done once the hub closes
	stop          context.CancelFunc
}

type subscriber struct {
	frames  chan []byte
	dropped uint64
}

func newHub(reg *metrics.Registry, record io.Writer, logf func(string, ...any)) *hub {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	stopped, stop := context.WithCancel(context.Background())
	return &hub{subs: map[*subscriber]struct{}{}, lastSeq: map[string]uint64{}, lastTS: map[string]int64{}, recent: event.NewRing(2048), state: map[string][]event.Event{},
		conns: map[string]*websocket.Conn{}, seen: map[string]time.Time{},
		record: record, metrics: reg, subQueue: 64, logf: logf, stopped: stopped, stop: stop}
}

// close ends every agent and browser connection with "going away" (the
// server is stopping); http.Server.Shutdown does not reach hijacked
// websocket connections.
func (h *hub) close() { h.stop() }

// closeOnStop closes a connection with "going away" when the hub closes;
// the returned function cancels that.
func (h *hub) closeOnStop(conn *websocket.Conn) func() bool {
	return context.AfterFunc(h.stopped, func() { conn.Close(websocket.StatusGoingAway, "server stopping") })
}

// publish stores an agent's events: it drops the ones already stored (an
// agent resends after reconnecting), records and counts the rest, and
// queues one frame of them to every subscriber. It returns the last
// sequence number stored for the agent, which the agent is acknowledged.
func (h *hub) publish(events []event.Event) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var fresh []event.Event
	var last uint64
	for _, e := range events {
		if h.lastSeq[e.Agent] > 0 && event.Restarted(e, h.lastTS[e.Agent]) {
			h.logf("agent %s restarted: its sequence starts again", e.Agent)
			delete(h.lastSeq, e.Agent)
		}
		if e.Seq <= h.lastSeq[e.Agent] {
			last = h.lastSeq[e.Agent]
			continue
		}
		h.lastSeq[e.Agent], h.lastTS[e.Agent] = e.Seq, e.TS
		last = e.Seq
		fresh = append(fresh, e)
		h.recent.Add(e)
		h.remember(e)
		h.count(e)
		h.write(e)
	}
	if len(fresh) == 0 {
		return last
	}
	frame, err := event.EncodeFrame(fresh)
	if err != nil {
		return last
	}
	for s := range h.subs {
		h.offer(s, frame)
	}
	return last
}

// offer queues a frame for a subscriber, dropping its oldest frame when
// its queue is full.
func (h *hub) offer(s *subscriber, frame []byte) {
	for {
		select {
		case s.frames <- frame:
			return
		default:
		}
		select {
		case <-s.frames:
			s.dropped++
			h.metrics.Add("kvscope_hub_subscriber_dropped_frames_total", "Frames dropped because a browser read too slowly.", 1)
		default:
		}
	}
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
func (h *hub) write(e event.Event) {
	if h.record == nil {
		return
	}
	line, err := json.Marshal(e)
	if err == nil {
		_, err = h.record.Write(append(line, '\n'))
	}
	if err != nil {
		h.metrics.Add("kvscope_hub_record_errors_total", "Events the recording could not take.", 1)
		if !h.recordFailing {
			h.logf("recording: %v (events are not recorded until writes work again)", err)
		}
	}
	h.recordFailing = err != nil
}

// maxState bounds the state events kept per agent.
const maxState = 64

// remember keeps the events that describe an agent rather than a moment
// (its hello, handshakes and registrations), so a browser that subscribes
// long after they happened still learns who the agent is. A hello starts
// the list again.
func (h *hub) remember(e event.Event) {
	switch e.Kind {
	case event.Hello:
		h.state[e.Agent] = []event.Event{e}
	case event.Handshake, event.Registration:
		st := h.state[e.Agent]
		if len(st) >= maxState {
			st = append(st[:1], st[2:]...) // keep the hello, drop the oldest after it
		}
		h.state[e.Agent] = append(st, e)
	}
}

// history is what a new subscriber gets first: each agent's state events
// older than the recent ring, and the ring.
func (h *hub) history() (state, recent []event.Event) {
	recent = h.recent.Events()
	oldest := map[string]uint64{}
	for _, e := range recent {
		if _, ok := oldest[e.Agent]; !ok {
			oldest[e.Agent] = e.Seq
		}
	}
	for agent, st := range h.state {
		for _, e := range st {
			if first, ok := oldest[agent]; !ok || e.Seq < first {
				state = append(state, e)
			}
		}
	}
	sort.Slice(state, func(i, j int) bool {
		if state[i].Agent != state[j].Agent {
			return state[i].Agent < state[j].Agent
		}
		return state[i].Seq < state[j].Seq
	})
	return state, recent
}

// historyFrame encodes the history, dropping its oldest recent events
// until the frame fits a browser's limits; the state events stay.
func (h *hub) historyFrame() []byte {
	state, recent := h.history()
	for {
		events := append(state[:len(state):len(state)], recent...)
		if len(events) == 0 {
			return nil
		}
		frame, err := event.EncodeFrame(events)
		if err != nil {
			return nil
		}
		if len(frame) <= event.MaxFrameBytes && len(events) <= event.MaxFrameEvents || len(recent) == 0 {
			return frame
		}
		recent = recent[max(1, len(recent)/4):]
	}
}

func (h *hub) subscribe() *subscriber {
	s := &subscriber{frames: make(chan []byte, h.subQueue)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if frame := h.historyFrame(); frame != nil {
		s.frames <- frame
	}
	h.subs[s] = struct{}{}
	h.metrics.Set("kvscope_hub_subscribers", "Browsers subscribed to /ws/live.", float64(len(h.subs)))
	return s
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
		if name == "" || len(name) > event.MaxAgentName {
			h.reject("agent_name")
			http.Error(w, fmt.Sprintf("name the agent (1 to %d characters): /ws/agent?agent=NAME", event.MaxAgentName), http.StatusBadRequest)
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		defer h.closeOnStop(conn)()
		conn.SetReadLimit(event.MaxFrameBytes)
		ctx := r.Context()
		welcome := h.connect(name, conn, r.RemoteAddr)
		defer h.disconnect(name, conn)
		if err := h.ack(ctx, conn, welcome); err != nil {
			return
		}
		for {
			_, data, err := conn.Read(ctx)
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
				h.logf("agent %s: frame rejected: %v", name, err)
				conn.Close(websocket.StatusUnsupportedData, event.Clip(err.Error(), 123))
				return
			}
			if err := h.ack(ctx, conn, h.publish(events)); err != nil {
				return
			}
		}
	})
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
func (h *hub) connect(name string, conn *websocket.Conn, addr string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.conns[name]; ok {
		h.logf("agent %s connected again from %s; closing its older connection", name, addr)
		go old.Close(websocket.StatusPolicyViolation, "replaced by a newer connection of this agent")
	}
	h.conns[name] = conn
	h.seen[name] = time.Now()
	h.prune(time.Now())
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
		s := h.subscribe()
		defer h.unsubscribe(s)
		for {
			select {
			case <-ctx.Done():
				return
			case frame := <-s.frames:
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := conn.Write(wctx, websocket.MessageText, frame)
				cancel()
				if err != nil {
					return
				}
			}
		}
	})
}

func (h *hub) metricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		h.metrics.Write(w)
	})
}
