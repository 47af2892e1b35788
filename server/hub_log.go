package main

import (
	"bytes"
	"context"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// The hub's side of the event log (bus.go): storing agents' events in
// JetStream, following the stream into this replica's browsers, and
// catching a returning browser up from it.

// followReplay is how many stored frames a replica reads back at start:
// its browsers' history.
const followReplay = 1024

// follow delivers the stream to this replica's browsers until the hub
// closes: publish drops what it already delivered (a frame stored twice),
// and a message that is not a frame of its agent's events is logged by its
// stream sequence, counted and skipped.
func (h *hub) follow(replay uint64) {
	for h.stopped.Err() == nil {
		err := h.bus.follow(h.stopped, replay, func(events []event.Event, raws [][]byte) { h.publishEncoded(events, raws) }, func(seq uint64, err error) {
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
// about maxCatchUp; complete says they reach the end of the stream.
func (h *hub) catchUp(ctx context.Context, since uint64, agents map[string]bool) (frames [][]byte, through uint64, complete bool, err error) {
	var raws [][]byte
	complete, err = h.bus.readRange(ctx, since, 0, maxCatchUp, func(data []byte, agent string, seq uint64) int {
		through = seq
		if agents != nil && !agents[agent] {
			return 0
		}
		_, rs, err := routeStored(data, agent, seq)
		if err != nil {
			return 0
		}
		for _, r := range rs {
			if len(r) <= maxEventBytes {
				raws = append(raws, r)
			}
		}
		return len(rs)
	})
	if err != nil {
		return nil, 0, false, err
	}
	frames = packFrames(raws)
	if frames == nil {
		frames = [][]byte{}
	}
	return frames, through, complete, nil
}

// store keeps an agent's events and returns the last sequence number
// stored for it, which the agent is acknowledged. Without a bus that is
// publish; with one, the events not stored yet go to JetStream as one
// frame, and the acknowledgement means JetStream has them (they reach
// this replica's browsers, and every other replica's, through follow).
func (h *hub) store(ctx context.Context, agent string, events []event.Event, frame []byte) (uint64, error) {
	var raws [][]byte
	if frame != nil {
		raws = agentRaws(frame, len(events))
	}
	if h.bus == nil {
		for i := range events {
			events[i].Stream = 0 // there is no log
		}
		return h.publishEncoded(events, raws), nil
	}
	type fresh struct {
		seq uint64
		ts  int64
		raw []byte
	}
	h.mu.Lock()
	last, lastTS := h.storedSeq[agent], h.storedTS[agent]
	var todo []fresh
	for i, e := range events {
		if last > 0 && event.Restarted(e, lastTS) {
			h.logf("agent %q restarted: its sequence starts again", agent)
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
		if err != nil || len(raw) > maxEventBytes {
			h.reject("event_too_big") // acknowledged, as publish does: no frame can carry it
			continue
		}
		todo = append(todo, fresh{e.Seq, e.TS, raw})
	}
	h.mu.Unlock()
	if len(todo) == len(events) && len(todo) > 0 && raws != nil {
		// Every event is new: store the agent's frame as it came.
		last := todo[len(todo)-1]
		if err := h.bus.publish(ctx, agent, frame, todo[0].seq, last.seq, last.ts); err != nil {
			h.metrics.Add("kvscope_bus_publish_errors_total", "Frames JetStream did not store (the agent resends them).", 1)
			return 0, err
		}
		h.metrics.Add("kvscope_bus_stored_events_total", "Events this replica stored in JetStream.", float64(len(todo)))
		todo = nil
	}
	// One message per frame within a browser's limits, each with its own
	// sequence range (its message id).
	for len(todo) > 0 {
		n, size := 0, 2
		for n < len(todo) && n < event.MaxFrameEvents && (n == 0 || size+len(todo[n].raw)+1 <= event.MaxFrameBytes) {
			size += len(todo[n].raw) + 1
			n++
		}
		raws := make([][]byte, n)
		for i := range raws {
			raws[i] = todo[i].raw
		}
		if err := h.bus.publish(ctx, agent, event.JoinFrame(raws), todo[0].seq, todo[n-1].seq, todo[n-1].ts); err != nil {
			h.metrics.Add("kvscope_bus_publish_errors_total", "Frames JetStream did not store (the agent resends them).", 1)
			return 0, err
		}
		h.metrics.Add("kvscope_bus_stored_events_total", "Events this replica stored in JetStream.", float64(n))
		todo = todo[n:]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.storedSeq[agent]; last > cur || event.Restarted(events[0], h.storedTS[agent]) {
		h.storedSeq[agent], h.storedTS[agent] = last, lastTS
	}
	return h.storedSeq[agent], nil
}
