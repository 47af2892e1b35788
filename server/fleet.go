package main

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// The fleet summary: every agent's line (who it is, when it was last
// heard, its rates, p99 and errors) and the slowest transfers of the last
// minute fleet-wide, sent to every browser once a second. A browser that
// draws a few agents subscribes to their events only (/ws/live?agents=…)
// and still sees the whole fleet here.

// fleetStat is what the hub keeps of one agent for the summary.
type fleetStat struct {
	hello    *event.HelloData
	lastSeen time.Time
	events   uint64 // so far
	bytes    int64  // moved by its transfers so far
	errors   uint64
	p99US    float64 // its latest sample's
	// rates over the last full second
	winStart           time.Time
	winEvents, rateEvt uint64
	winBytes, rateB    int64
}

// fleetTransfer is one transfer in the slowest list, and when it ended.
type fleetTransfer struct {
	event.FleetTransfer
	at time.Time
}

// maxSlowest is how many slow transfers the summary lists.
const maxSlowest = 10

// fleetSeen counts an event into its agent's line; h.mu is held.
func (h *hub) fleetSeen(e event.Event, now time.Time) {
	f := h.fleet[e.Agent]
	if f == nil {
		f = &fleetStat{winStart: now}
		h.fleet[e.Agent] = f
	}
	if now.Sub(f.winStart) >= time.Second {
		f.rateEvt, f.rateB = f.winEvents, f.winBytes
		if now.Sub(f.winStart) >= 2*time.Second { // a quiet second between
			f.rateEvt, f.rateB = 0, 0
		}
		f.winStart, f.winEvents, f.winBytes = now, 0, 0
	}
	f.lastSeen = now
	f.events++
	f.winEvents++
	switch e.Kind {
	case event.Hello:
		f.hello = e.Hello
	case event.Error:
		f.errors++
	case event.Sample:
		f.p99US = e.Sample.P99US
	case event.TransferDone:
		f.bytes += e.Done.Bytes
		f.winBytes += e.Done.Bytes
		h.slow(fleetTransfer{event.FleetTransfer{Agent: e.Agent, Request: e.Done.Request, Bytes: e.Done.Bytes, TransferUS: e.Done.TransferUS, Timing: e.Done.Timing}, now})
	}
}

// slow keeps t if it is among the slowest of the last minute; h.mu is held.
func (h *hub) slow(t fleetTransfer) {
	keep := h.slowest[:0]
	for _, x := range h.slowest {
		if t.at.Sub(x.at) <= time.Minute {
			keep = append(keep, x)
		}
	}
	h.slowest = keep
	if len(h.slowest) == maxSlowest && h.slowest[maxSlowest-1].TransferUS >= t.TransferUS {
		return
	}
	i := sort.Search(len(h.slowest), func(i int) bool { return h.slowest[i].TransferUS < t.TransferUS })
	h.slowest = append(h.slowest, fleetTransfer{})
	copy(h.slowest[i+1:], h.slowest[i:])
	h.slowest[i] = t
	if len(h.slowest) > maxSlowest {
		h.slowest = h.slowest[:maxSlowest]
	}
}

// maxFleetLines bounds the agents one summary lists (the most recently
// heard first).
const maxFleetLines = 1000

// fleetSummary is the message {"fleet": [...], "slowest": [...]}.
func (h *hub) fleetSummary() []byte {
	now := time.Now()
	h.mu.Lock()
	lines := make([]event.FleetLine, 0, len(h.fleet))
	for name, f := range h.fleet {
		l := event.FleetLine{Agent: name, LastSeenS: now.Sub(f.lastSeen).Seconds(), EventsPS: f.rateEvt, GBps: float64(f.rateB) / 1e9,
			P99US: f.p99US, Errors: f.errors, Events: f.events}
		if now.Sub(f.winStart) >= 2*time.Second { // quiet since its last second
			l.EventsPS, l.GBps = 0, 0
		}
		if f.hello != nil {
			l.Host, l.Role, l.Backend, l.GPUs, l.Engine = f.hello.Host, f.hello.Role, f.hello.Backend, len(f.hello.GPUs), f.hello.Engine
		}
		lines = append(lines, l)
	}
	slowest := make([]event.FleetTransfer, len(h.slowest))
	for i, t := range h.slowest {
		slowest[i] = t.FleetTransfer
	}
	h.mu.Unlock()
	sort.Slice(lines, func(i, j int) bool { return lines[i].Agent < lines[j].Agent })
	if len(lines) > maxFleetLines {
		sort.SliceStable(lines, func(i, j int) bool { return lines[i].LastSeenS < lines[j].LastSeenS })
		lines = lines[:maxFleetLines]
	}
	msg, _ := json.Marshal(event.FleetSummary{Fleet: lines, Slowest: slowest})
	return msg
}
