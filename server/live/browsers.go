package live

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/core/event"
)

// LiveHandler is /ws/live: a browser from this server's origin subscribes
// read-only to every agent's events (?agents=a,b: those agents' only),
// or, coming back with ?since=N, resumes from the event log after stream
// message N. A browser that picks a few agents gets their recent events
// from the event log (picked.go). ?detail=a,b names the agents whose detail (descriptor
// batches, unstored) it draws, by default those of ?agents= (every agent
// without it); the agents it draws send their detail while it is
// connected (detail.go). It gets {"history": N}, N frames of history, then the live
// frames, and the fleet summary once a second.
func (h *Hub) LiveHandler() http.Handler {
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
		detailAt := h.watch(s, parseDetail(r.URL.Query(), agents), since > 0)
		var caughtUp uint64  // the last stream message the catch-up read
		more := false        // the catch-up stopped short of the stream's end
		var gone uint64      // stored messages the browser missed that the log no longer holds
		release := func() {} // lets another catch-up hold its frames once these are sent
		if since == 0 && h.log != nil && len(agents) > 0 && len(agents) <= maxPickedFromLog {
			// A browser that picked agents: their recent summaries from
			// the log (picked.go); the replica's own when the log cannot
			// serve them now.
			if frames, through, err := h.pickedHistory(ctx, agents); err == nil {
				hist, caughtUp = frames, through
			} else {
				h.metrics.Add("kvscope_hub_picked_history_fallbacks_total", "Browsers that picked agents sent this replica's recent events because the event log could not serve theirs in time.", 1)
				h.logf("a browser picking %d agents: their recent events from the log: %v (sent this replica's)", len(agents), err)
			}
		}
		if since > 0 && h.log != nil {
			// A browser coming back: everything stored from the last
			// event it saw on, from the log, instead of the recent history
			// (live frames queue meanwhile; the browser drops what it
			// already has by agent and sequence). One far behind gets a
			// part and is told to come back for the rest; one the log
			// cannot serve now is told to come back, never given the
			// recent history as if it were all it missed.
			c, rel, err := h.readBack(ctx, since, agents)
			defer rel()
			release = rel
			if err != nil {
				h.metrics.Add("kvscope_hub_catchup_refused_total", "Browsers resuming from the event log told to come back (the log could not serve them in time, or too many were catching up).", 1)
				h.logf("a browser resuming after stream message %d: %v (told to come back)", since, err)
				conn.Close(websocket.StatusTryAgainLater, event.Clip(fmt.Sprintf("catch-up unavailable (%v): resume with ?since=%d", err, since), 123))
				return
			}
			hist, caughtUp, more, gone = c.frames, c.through, c.more, c.gone
			if gone > 0 {
				h.metrics.Add("kvscope_hub_catchup_gone_total", "Stored messages resuming browsers missed that the event log no longer holds (its age and size limits dropped them); each browser is told how many.", float64(gone))
			}
		}
		send := func(frame []byte) bool {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return conn.Write(wctx, websocket.MessageText, frame) == nil
		}
		// {"history": N}, then the N frames of history, then live frames.
		if !send(event.HistoryHeader(event.History{Frames: len(hist), Gone: gone, DetailAt: detailAt})) {
			return
		}
		for _, frame := range hist {
			if !send(frame) {
				return
			}
		}
		release() // the catch-up's frames are sent: another may hold its own
		hist = nil
		if more {
			conn.Close(websocket.StatusTryAgainLater, fmt.Sprintf("more to catch up: resume with ?since=%d", caughtUp))
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
				if !h.sendQueued(s, frame, caughtUp, send) {
					return
				}
			}
		}
	})
}

// sendQueued sends a queued frame and the frames waiting behind it in
// as few messages as a browser's limits allow (a busy fleet's many small
// frames would cost a subscriber a write each), leaving out what the
// catch-up carried (stream messages through caughtUp). It reports
// whether every send worked.
func (h *Hub) sendQueued(s *subscriber, first liveFrame, caughtUp uint64, send func([]byte) bool) bool {
	batch := []liveFrame{s.take(first)}
	defer func() { s.pending.Add(-int64(len(batch))) }() // written, or the connection is gone
	size := len(first.data)
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
	var p event.Packer
	flush := func() bool {
		frame, _ := p.Frame()
		return frame == nil || send(frame)
	}
	for _, f := range batch {
		if f.events == 0 || f.stream != 0 && f.stream <= caughtUp {
			continue // empty, or the catch-up carried it
		}
		inside := f.data[1 : len(f.data)-1] // its events, without the brackets
		if !p.Fits(len(inside), f.events) && !flush() {
			return false
		}
		p.Add(inside, f.events)
	}
	return flush()
}
