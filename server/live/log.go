package live

import (
	"bytes"
	"context"
	"time"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
)

// The hub's side of the event log: storing agents' events in it,
// following it into this replica's browsers, and catching a returning
// browser up from it.

// follow delivers the log to this replica's browsers until the hub
// closes: publish drops what it already delivered (a frame stored twice),
// and a message that is not a frame of its agent's events is logged by its
// stream sequence, counted and skipped.
func (h *Hub) follow(replay uint64) {
	for h.stopped.Err() == nil {
		err := h.log.Follow(h.stopped, replay, func(events []event.Event, raws [][]byte) { h.publishEncoded(events, raws) }, func(seq uint64, err error) {
			h.metrics.Add("kvscope_bus_bad_messages_total", "Stream messages that were not a frame of their agent's events.", 1)
			h.logf("event log: stream message %d skipped: %v", seq, err)
		})
		if err == nil || h.stopped.Err() != nil {
			return
		}
		h.logf("event log: following the stream: %v (again in 1 s)", err)
		select {
		case <-h.stopped.Done():
		case <-time.After(time.Second):
		}
	}
}

// agentRaws is each event's JSON as the agent wrote it, when the frame
// is in the form the log routes without decoding it again (event.Peek's)
// and sets no stream sequence (the log's to set); nil otherwise, and the
// hub encodes the events itself.
func agentRaws(frame []byte, n int) [][]byte {
	heads, err := event.Peek(frame)
	if err != nil || len(heads) != n {
		return nil
	}
	raws := make([][]byte, n)
	for i, h := range heads {
		if h.Stream != 0 || bytes.Contains(h.Raw, []byte(`"stream_seq"`)) {
			return nil
		}
		raws[i] = h.Raw
	}
	return raws
}

// maxCatchUp bounds the events a resuming browser is sent from the log in
// one go (about 13 MB held for it); a browser further behind is sent that
// many, then told to resume again from where they end.
const maxCatchUp = 50_000

// catchUp is the frames of the events stored from stream message since on
// (that message again: a browser may have seen only part of it), at most
// about maxCatchUp; complete says they reach the end of the stream. A
// message that does not route and an event too large for a frame are
// left out, and counted.
func (h *Hub) catchUp(ctx context.Context, since uint64, agents map[string]bool) (frames [][]byte, through uint64, complete bool, err error) {
	var raws [][]byte
	skipped := 0
	complete, err = h.log.ReadRange(ctx, since, 0, maxCatchUp, func(data []byte, agent string, seq uint64) int {
		through = seq
		if agents != nil && !agents[agent] {
			return 0
		}
		_, rs, err := eventlog.Route(data, agent, seq)
		if err != nil {
			skipped++
			return 0
		}
		for _, r := range rs {
			if len(r) <= event.MaxEventBytes {
				raws = append(raws, r)
			} else {
				skipped++
			}
		}
		return len(rs)
	})
	if skipped > 0 {
		h.metrics.Add(metricCatchUpSkipped, helpCatchUpSkipped, float64(skipped))
	}
	if err != nil {
		return nil, 0, false, err
	}
	frames, _ = event.Pack(raws)
	if frames == nil {
		frames = [][]byte{}
	}
	return frames, through, complete, nil
}

// store keeps an agent's events and returns the last sequence number
// stored for it, which the agent is acknowledged. Without a log that is
// publish; with one, the events not stored yet go to JetStream (as the
// agent's frame when every event is new), and the acknowledgement means
// JetStream has them (they reach this replica's browsers, and every other
// replica's, through follow). The log is written with h.mu released.
func (h *Hub) store(ctx context.Context, agent string, events []event.Event, frame []byte) (uint64, error) {
	var raws [][]byte
	if frame != nil {
		raws = agentRaws(frame, len(events))
	}
	if h.log == nil {
		for i := range events {
			events[i].Stream = 0 // there is no log
		}
		return h.publishEncoded(events, raws), nil
	}
	h.mu.Lock()
	var last uint64
	var lastTS int64
	if a := h.agents[agent]; a != nil {
		last, lastTS = a.storedSeq, a.storedTS
	}
	type pending struct {
		seq uint64
		ts  int64
	}
	var todo []pending    // the events not stored yet
	var todoRaws [][]byte // and their encodings
	restarted := false
	for i, e := range events {
		if last > 0 && event.Restarted(e, lastTS) {
			restarted = true
			last = 0
		}
		if e.Seq <= last {
			continue
		}
		last, lastTS = e.Seq, e.TS
		var raw []byte
		var err error
		if raws != nil {
			raw = raws[i]
		} else {
			e.Stream = 0 // the log's to set
			raw, err = event.Encode(e)
		}
		if err != nil || len(raw) > event.MaxEventBytes {
			h.reject("event_too_big") // acknowledged, as publish does: no frame can carry it
			continue
		}
		todo, todoRaws = append(todo, pending{e.Seq, e.TS}), append(todoRaws, raw)
	}
	h.mu.Unlock()
	if restarted {
		h.logf("agent %q restarted: its sequence starts again", agent)
	}
	if len(todo) == len(events) && len(todo) > 0 && raws != nil {
		// Every event is new: store the agent's frame as it came.
		last := todo[len(todo)-1]
		if err := h.log.Publish(ctx, agent, frame, todo[0].seq, last.seq, last.ts); err != nil {
			h.metrics.Add("kvscope_bus_publish_errors_total", "Frames JetStream did not store (the agent resends them).", 1)
			return 0, err
		}
		h.metrics.Add("kvscope_bus_stored_events_total", "Events this replica stored in JetStream.", float64(len(todo)))
		todo = nil
	}
	// One message per frame within a browser's limits, each with its own
	// sequence range (its message id).
	for len(todo) > 0 {
		n := event.Fit(todoRaws)
		if err := h.log.Publish(ctx, agent, event.JoinFrame(todoRaws[:n]), todo[0].seq, todo[n-1].seq, todo[n-1].ts); err != nil {
			h.metrics.Add("kvscope_bus_publish_errors_total", "Frames JetStream did not store (the agent resends them).", 1)
			return 0, err
		}
		h.metrics.Add("kvscope_bus_stored_events_total", "Events this replica stored in JetStream.", float64(n))
		todo, todoRaws = todo[n:], todoRaws[n:]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.agent(agent)
	if last > a.storedSeq || event.Restarted(events[0], a.storedTS) {
		a.storedSeq, a.storedTS = last, lastTS
	}
	return a.storedSeq, nil
}
