package live

import (
	"bytes"
	"context"
	"errors"
	"sync"
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
		err := h.log.Follow(h.stopped, replay, func(events []event.Event, raws [][]byte, epoch string) { h.publishEncoded(events, raws, epoch) }, func(seq uint64, err error) {
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

// A resuming browser's catch-up: at most maxCatchUp events and
// catchUpMessageBytes bytes of stored messages a step (what is sent is
// about as large, at most maxCatchUpBytes with each event's stream_seq),
// then it is told to come back for the rest; at most maxCatchUps
// browsers read back from the log at once and maxCatchUpsHeld hold a
// step's frames (read, or being sent), so a storm of resumes holds at
// most maxCatchUpsHeld steps of memory; catchUpQueue wait their turn, each
// at most catchUpWait; one that cannot be served is told to come back
// (1013), never sent the recent history as if it were everything.
const (
	maxCatchUp          = 50_000
	maxCatchUpBytes     = 16 << 20
	catchUpMessageBytes = 12 << 20
	maxCatchUps         = 2
	maxCatchUpsHeld     = 8
	catchUpQueue        = 256
	catchUpWait         = 10 * time.Second
	catchUpTimeout      = 20 * time.Second
)

// catchUp is what a browser resuming after stream message since is sent.
type catchUp struct {
	frames  [][]byte
	through uint64 // the last stream message read
	more    bool   // it stopped short of the stream's end
	gone    uint64 // messages from since on that the stream no longer holds
}

// errCatchUpBusy is a resume that waited its turn too long (or found
// the queue full).
var errCatchUpBusy = errors.New("too many browsers catching up")

// catchUpTurn waits for a turn to read back from the log (at most
// h.catchUpWait, or errCatchUpBusy): done(err) ends the read (and, on an
// error, releases its frames too); release lets another hold its frames
// once they are sent. release is never nil.
func (h *Hub) catchUpTurn(ctx context.Context) (release func(), done func(error), err error) {
	release = func() {}
	if h.catchUpWaiting.Add(1) > catchUpQueue {
		h.catchUpWaiting.Add(-1)
		return release, nil, errCatchUpBusy
	}
	wctx, cancel := context.WithTimeout(ctx, h.catchUpWait)
	defer cancel()
	take := func(slots chan struct{}) error {
		select {
		case slots <- struct{}{}:
			return nil
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errCatchUpBusy
		}
	}
	err = take(h.catchUpsHeld)
	if err == nil {
		err = take(h.catchUps)
		if err != nil {
			<-h.catchUpsHeld
		}
	}
	h.catchUpWaiting.Add(-1)
	if err != nil {
		return release, nil, err
	}
	var once sync.Once
	release = func() { once.Do(func() { <-h.catchUpsHeld }) }
	return release, func(err error) {
		<-h.catchUps
		if err != nil {
			release()
		}
	}, nil
}

// readBack reads a resuming browser's catch-up: the events stored from
// stream message since on (that message again: a browser may have seen
// only part of it), in turn with the others. A message that does not
// route and an event too large for a frame are left out, and counted.
// The step's frames are held until release is called (once they are
// sent); release is never nil.
func (h *Hub) readBack(ctx context.Context, since uint64, agents map[string]bool) (c catchUp, release func(), err error) {
	release, done, err := h.catchUpTurn(ctx)
	if err != nil {
		return catchUp{}, release, err
	}
	defer func() { done(err) }()
	var raws [][]byte
	skipped := 0
	rr, err := h.log.ReadRange(ctx, eventlog.Range{From: since, MaxEvents: maxCatchUp, MaxBytes: catchUpMessageBytes, Timeout: catchUpTimeout},
		func(data []byte, agent string, seq uint64) int {
			if agents != nil && !agents[agent] {
				return 0
			}
			kept, n, left := routeBack(data, agent, seq)
			skipped += left
			for _, k := range kept {
				raws = append(raws, k.Raw)
			}
			return n
		})
	if skipped > 0 {
		h.metrics.Add(metricCatchUpSkipped, helpCatchUpSkipped, float64(skipped))
	}
	if err != nil {
		return catchUp{}, release, err
	}
	c = catchUp{through: rr.Last, more: !rr.Complete, gone: rr.Gone(since)}
	if c.through == 0 {
		c.through = since
	}
	c.frames, _ = event.Pack(raws)
	if c.frames == nil {
		c.frames = [][]byte{}
	}
	return c, release, nil
}

// routeBack reads a stored message back for a browser (eventlog.Route):
// its events, less those too large for a frame; n is how many it held,
// skipped how many were left out (a message that does not route counts
// as one).
func routeBack(data []byte, agent string, seq uint64) (kept []event.Encoded, n, skipped int) {
	events, raws, err := eventlog.Route(data, agent, seq)
	if err != nil {
		return nil, 0, 1
	}
	kept = make([]event.Encoded, 0, len(events))
	for i, e := range events {
		if len(raws[i]) > event.MaxEventBytes {
			skipped++
			continue
		}
		kept = append(kept, event.Encoded{Event: e, Raw: raws[i]})
	}
	return kept, len(events), skipped
}

// store keeps an agent's events and returns the last sequence number
// stored for it, which the agent is acknowledged. Without a log that is
// publish; with one, the events not stored yet go to JetStream (as the
// agent's frame when every event is new), and the acknowledgement means
// JetStream has them (they reach this replica's browsers, and every other
// replica's, through follow). The log is written with h.mu released. A
// frame whose sequence jumps past event.MaxSeqJump is refused whole
// (*event.SeqJumpError); events past the agent's budget are shed (and
// acknowledged: they are not sent again).
func (h *Hub) store(ctx context.Context, agent, epoch string, events []event.Event, frame []byte) (uint64, error) {
	var raws [][]byte
	if frame != nil {
		raws = agentRaws(frame, len(events))
	}
	h.mu.Lock()
	a := h.agent(agent)
	last, lastTS := a.lastSeq, a.lastTS
	if h.log != nil {
		last, lastTS = a.storedSeq, a.storedTS
	}
	var keep []event.Event // the events to store
	var keepRaws [][]byte  // and their encodings
	restarted := false
	now := time.Now()
	shed, shedBytes := 0, 0
	for i, e := range events {
		if last > 0 && event.Restarted(e, lastTS) {
			restarted = true
			last = 0
		}
		if e.Seq <= last {
			continue
		}
		if err := event.CheckSeqJump(agent, last, e.Seq); err != nil {
			h.mu.Unlock()
			return 0, err
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
		if h.budget.limited() && sheddable(e.Kind) && !a.spent.spend(h.budget, len(raw), now) {
			shed, shedBytes = shed+1, shedBytes+len(raw)
			continue
		}
		keep, keepRaws = append(keep, e), append(keepRaws, raw)
	}
	tell := false
	if shed > 0 {
		a.spent.shed += uint64(shed)
		if now.Sub(a.spent.told) > time.Minute {
			a.spent.told, tell = now, true
		}
	}
	total := a.spent.shed
	h.mu.Unlock()
	if shed > 0 {
		h.metrics.Add("kvscope_hub_shed_events_total", "Events agents sent past their budget (kvscope serve --agent-events-per-sec, --agent-bytes-per-sec), acknowledged and not stored.", float64(shed))
		h.metrics.Add("kvscope_hub_shed_bytes_total", "Bytes of the events shed past agents' budgets.", float64(shedBytes))
		if tell {
			h.logf("agent %q sends more than its budget (%.0f events/s, %.0f bytes/s): %d events shed so far (browsers see them as gaps)", agent, h.budget.EventsPerSec, h.budget.BytesPerSec, total)
		}
	}
	if restarted {
		h.logf("agent %q restarted: its sequence starts again", agent)
	}
	if h.log == nil {
		if len(keep) > 0 {
			for i := range keep {
				keep[i].Stream = 0 // there is no log
			}
			h.publishEncoded(keep, keepRaws, epoch)
		}
		// What was left out (shed, too big, sent before) counts as
		// stored: the agent is not to send it again.
		h.mu.Lock()
		defer h.mu.Unlock()
		a := h.agent(agent)
		if last > a.lastSeq {
			a.lastSeq, a.lastTS = last, lastTS
		}
		return a.lastSeq, nil
	}
	if len(keep) == len(events) && len(keep) > 0 && raws != nil {
		// Every event is new: store the agent's frame as it came.
		end := keep[len(keep)-1]
		if err := h.log.Publish(ctx, agent, epoch, frame, keep[0].Seq, end.Seq, end.TS); err != nil {
			h.metrics.Add("kvscope_bus_publish_errors_total", "Frames JetStream did not store (the agent resends them).", 1)
			return 0, err
		}
		h.metrics.Add("kvscope_bus_stored_events_total", "Events this replica stored in JetStream.", float64(len(keep)))
		keep = nil
	}
	// One message per frame within a browser's limits, each with its own
	// sequence range (its message id).
	for len(keep) > 0 {
		n := event.Fit(keepRaws)
		if err := h.log.Publish(ctx, agent, epoch, event.JoinFrame(keepRaws[:n]), keep[0].Seq, keep[n-1].Seq, keep[n-1].TS); err != nil {
			h.metrics.Add("kvscope_bus_publish_errors_total", "Frames JetStream did not store (the agent resends them).", 1)
			return 0, err
		}
		h.metrics.Add("kvscope_bus_stored_events_total", "Events this replica stored in JetStream.", float64(n))
		keep, keepRaws = keep[n:], keepRaws[n:]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	a = h.agent(agent)
	if last > a.storedSeq || event.Restarted(events[0], a.storedTS) || restarted {
		a.storedSeq, a.storedTS, a.storedEpoch = last, lastTS, epoch
	}
	return a.storedSeq, nil
}
