package live

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/core/event"
)

// Detail on demand. An agent that splits its events (kvscope-agent's
// default; /ws/agent?detail=1, or stream.Streamer.SplitDetail on NATS)
// numbers its detail (event.IsDetail: descriptor batches and the start
// that frames them) in a sequence of its own (dseq) and sends it only
// while some browser draws it; nothing of it is stored. Its summaries go
// to the event log as every event did before.
//
// Who draws what: a browser on /ws/live draws the agents it names in
// ?detail=a,b (none for ?detail=), or else those of ?agents=, or else
// every agent. A replica with such browsers says so on NATS, on each drawn
// agent's watch subject (event.WatchSubject, or event.WatchAll),
// at once and then every event.WatchEvery: agents on NATS hear it
// themselves, and every replica hears it for the agents connected to it by
// websocket, which it tells {"detail":true} or {"detail":false} as the
// lease (event.WatchLease) starts and lapses. Detail travels on core NATS
// (event.DetailSubject): an agent on NATS publishes it there, a replica
// publishes there what its websocket agents send, and every replica
// subscribes to every agent's detail subject, so it receives only what
// some browser in the fleet draws, and hands each frame to its browsers
// that draw that agent, as the agent encoded it. Without a log the hub
// does the same within its own process. A hub that records (--record)
// draws every agent: a recording keeps all it is given.
//
// Detail is never resent: a fault loses what was in flight, and the
// browser sees it as a jump in the agent's dseq (event.Ring.DetailGaps),
// which says how many it missed.

// watchTick is how often the hub looks at whose detail lease started or
// lapsed, for the agents connected to it.
const watchTick = 250 * time.Millisecond

// detailInterest is what one browser draws of the agents' detail.
type detailInterest struct {
	all    bool
	agents map[string]bool
}

// parseDetail reads /ws/live's query into the browser's interest: ?detail=
// names the agents whose detail it draws, else ?agents= does, else it draws
// every agent's ("*" in either list also means every agent).
func parseDetail(q map[string][]string, agents map[string]bool) detailInterest {
	list, ok := q["detail"]
	if !ok {
		if agents == nil {
			return detailInterest{all: true}
		}
		if agents["*"] {
			return detailInterest{all: true}
		}
		return detailInterest{agents: agents}
	}
	in := detailInterest{agents: map[string]bool{}}
	for _, a := range strings.Split(strings.Join(list, ","), ",") {
		if a = strings.TrimSpace(a); a == "*" {
			return detailInterest{all: true}
		} else if a != "" && len(in.agents) < 1000 {
			in.agents[a] = true
		}
	}
	return in
}

// wants reports whether the browser draws agent's detail.
func (d detailInterest) wants(agent string) bool { return d.all || d.agents[agent] }

// detailFresh is how recently an agent's detail must have been handed to
// browsers here for its position to be told: an older one may be from
// before the browser drew the agent, a start that would count detail
// nobody drew (never sent) as missed.
const detailFresh = 10 * time.Second

// watch registers a browser's interest in detail and says so at once
// (the agents it draws start sending within the round trip). For a
// browser coming back it returns where the detail of each agent it draws
// stood as it joined (the last dseq handed to browsers here, if within
// detailFresh): it missed what it had not seen by then, for good. A new
// browser is told nothing: a position from before it drew an agent is no
// place for its detail to start.
func (h *Hub) watch(s *subscriber, in detailInterest, back bool) map[string]uint64 {
	h.mu.Lock()
	s.detail = in
	at := map[string]uint64{}
	now := time.Now()
	note := func(name string, a *agent) {
		if a != nil && a.detailAt > 0 && now.Sub(a.detailAtTS) < detailFresh {
			at[name] = a.detailAt
		}
	}
	if back { // a new browser is told nothing: no agent looked up
		if in.all {
			for name, a := range h.agents {
				note(name, a)
			}
		}
		for name := range in.agents { // the few it names: not every agent
			note(name, h.agents[name])
		}
	}
	if in.all {
		h.watchingAll++
	}
	var fresh []string
	for a := range in.agents {
		if h.watching[a]++; h.watching[a] == 1 {
			fresh = append(fresh, a)
		}
	}
	h.mu.Unlock()
	if in.all {
		h.say("", true)
	}
	for _, a := range fresh {
		h.say(a, false)
	}
	return at
}

// say tells the fleet that a browser here draws agent's detail (all:
// every agent's): on NATS with a log, to this hub alone without.
func (h *Hub) say(agent string, all bool) {
	if h.log != nil {
		if all {
			h.log.WatchAll()
		} else {
			h.log.Watch(agent)
		}
		return
	}
	h.leased(agent, all)
}

// leased notes a word that some browser draws agent (all: every agent),
// and tells that agent at once if it is connected here and was not
// sending.
func (h *Hub) leased(agent string, all bool) {
	now := time.Now()
	h.mu.Lock()
	if all {
		h.leaseAll = now
	} else {
		if h.leases == nil {
			h.leases = map[string]time.Time{}
		}
		h.leases[agent] = now
	}
	h.mu.Unlock()
	if all {
		h.tellAgents(now)
		return
	}
	h.tellAgent(agent, now)
}

// watchLoop says, every event.WatchEvery, which agents this hub's
// browsers draw, and tells its agents when their lease starts or lapses,
// until the hub closes.
func (h *Hub) watchLoop() {
	say := time.NewTicker(event.WatchEvery)
	defer say.Stop()
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	for {
		select {
		case <-h.stopped.Done():
			return
		case <-say.C:
			h.sayAll()
		case now := <-tick.C:
			h.tellAgents(now)
		}
	}
}

// sayAll says every agent this hub's browsers draw (every agent, while
// one draws them all or the hub records).
func (h *Hub) sayAll() {
	h.mu.Lock()
	all := h.watchingAll > 0 || h.rec != nil
	agents := make([]string, 0, len(h.watching))
	for a := range h.watching {
		agents = append(agents, a)
	}
	h.mu.Unlock()
	if all {
		h.say("", true)
	}
	for _, a := range agents {
		h.say(a, false)
	}
}

// leaseOn reports whether agent's detail is drawn somewhere; h.mu held.
func (h *Hub) leaseOn(agent string, now time.Time) bool {
	return now.Sub(h.leaseAll) < event.WatchLease || now.Sub(h.leases[agent]) < event.WatchLease
}

// tellAgents tells each splitting agent connected here whose lease
// changed.
func (h *Hub) tellAgents(now time.Time) {
	type tell struct {
		conn *websocket.Conn
		on   bool
	}
	var tells []tell
	h.mu.Lock()
	for name, a := range h.agents {
		if a.conn == nil || !a.split {
			continue
		}
		if on := h.leaseOn(name, now); on != a.detailOn {
			a.detailOn = on
			tells = append(tells, tell{a.conn, on})
		}
	}
	for name, at := range h.leases { // lapsed long ago: forgotten
		if now.Sub(at) > 4*event.WatchLease {
			delete(h.leases, name)
		}
	}
	h.mu.Unlock()
	for _, t := range tells {
		go tellDetail(h.stopped, t.conn, t.on)
	}
}

// tellAgent is tellAgents for one agent.
func (h *Hub) tellAgent(agent string, now time.Time) {
	h.mu.Lock()
	a := h.agents[agent]
	if a == nil || a.conn == nil || !a.split {
		h.mu.Unlock()
		return
	}
	on := h.leaseOn(agent, now)
	changed := on != a.detailOn
	a.detailOn = on
	conn := a.conn
	h.mu.Unlock()
	if changed {
		go tellDetail(h.stopped, conn, on)
	}
}

// tellDetail sends an agent {"detail":on}.
func tellDetail(ctx context.Context, conn *websocket.Conn, on bool) {
	msg, _ := json.Marshal(map[string]bool{"detail": on})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn.Write(wctx, websocket.MessageText, msg)
}

// detailFrame takes a frame of an agent's detail: from its websocket,
// published on NATS for every replica (with a log), or handed to this
// hub's browsers (without). heads are the frame's, already checked to be
// the agent's detail.
func (h *Hub) detailFrame(agent string, frame []byte, heads []event.Head) {
	if h.log != nil {
		if err := h.log.PublishDetail(agent, frame); err != nil {
			h.metrics.Add("kvscope_hub_detail_errors_total", "Detail frames this replica could not publish on NATS (lost, and seen by browsers as dseq jumps).", 1)
		}
		return
	}
	h.deliverDetail(agent, frame, heads)
}

// deliverDetail hands a frame of agent's detail to the browsers here that
// draw it (and to the recording), as the agent encoded it.
func (h *Hub) deliverDetail(agent string, frame []byte, heads []event.Head) {
	h.metrics.Add("kvscope_hub_detail_events_total", "Detail events (descriptor batches, transfer starts) this replica received for its browsers, never stored.", float64(len(heads)))
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rec != nil {
		for _, hd := range heads {
			h.rec.add(hd.Raw)
		}
	}
	if a := h.agents[agent]; a != nil && len(heads) > 0 {
		a.detailAt = heads[len(heads)-1].Detail // in order: one agent process sends it
		a.detailAtTS = time.Now()
	}
	lf := liveFrame{data: frame, events: len(heads), agent: agent}
	for s := range h.subs {
		if s.detail.wants(agent) {
			h.offer(s, lf)
		}
	}
}

// checkDetail reads a frame that should be agent's detail: every event
// agent's and numbered in the detail sequence. ok is false for a frame
// of summaries (no event in the detail sequence); a frame that mixes the
// two, or names another agent, is an error.
func checkDetail(frame []byte, agent string) (heads []event.Head, ok bool, err error) {
	heads, err = event.Peek(frame)
	if err != nil {
		return nil, false, err
	}
	detail := 0
	for i, hd := range heads {
		if hd.Agent != agent {
			return nil, false, &event.FrameError{Index: i, Field: "agent", Reason: "another agent's event in " + agent + "'s detail"}
		}
		if hd.Detail != 0 {
			detail++
		}
	}
	switch {
	case detail == 0:
		return heads, false, nil
	case detail != len(heads):
		return nil, false, &event.FrameError{Index: -1, Reason: "a frame mixes detail (dseq) with summaries (seq)"}
	}
	return heads, true, nil
}
