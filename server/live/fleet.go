package live

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
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
func (h *Hub) fleetSeen(a *agent, e event.Event, now time.Time) {
	f := a.fleet
	if f == nil {
		f = &fleetStat{winStart: now}
		a.fleet = f
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
func (h *Hub) slow(t fleetTransfer) {
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

// The summary's bounds. It is one websocket message, so it stays within a
// browser's frame limits (event.MaxFrameBytes; at most maxFleetLines
// lines, under event.MaxFrameEvents): past either, the most recently
// heard agents are listed and the rest counted ("fleet_omitted"). Each
// free-text field an agent sends (host, role, backend, engine; a slow
// transfer's request) is clipped to maxFleetField bytes, ending "…".
const (
	maxFleetLines = 1000
	maxFleetField = 256
	// fleetReuse is how long one summary serves every subscriber: it is
	// built at most about twice a second, however many there are.
	fleetReuse = 500 * time.Millisecond
)

// fleetSummary is the message {"fleet": [...], "slowest": [...],
// "fleet_omitted": N}, encoded without HTML escaping (a "<" an agent sent
// is one byte) and at most event.MaxFrameBytes long. Every subscriber
// writes it from its own goroutine (one at a time, with the deadline of
// its other frames), so what it costs each is bounded by those bytes.
func (h *Hub) fleetSummary() []byte {
	h.fleetMu.Lock()
	defer h.fleetMu.Unlock()
	now := time.Now()
	if h.fleetMsg != nil && now.Sub(h.fleetAt) < fleetReuse {
		return h.fleetMsg
	}
	h.mu.Lock()
	lines := make([]event.FleetLine, 0, len(h.agents))
	for name, a := range h.agents {
		f := a.fleet
		if f == nil {
			continue // no event from it yet
		}
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
	h.fleetMsg, h.fleetAt = encodeFleet(lines, slowest), now
	return h.fleetMsg
}

// encodeFleet writes a summary within its bounds: the most recently heard
// agents whose lines fit, in name order, and how many were left out.
func encodeFleet(lines []event.FleetLine, slowest []event.FleetTransfer) []byte {
	for i := range slowest {
		slowest[i].Request = event.Clip(slowest[i].Request, maxFleetField)
		slowest[i].Timing = event.Timing(event.Clip(string(slowest[i].Timing), maxFleetField))
	}
	var slow bytes.Buffer
	if err := encodeJSON(&slow, slowest); err != nil {
		slow.Reset()
		slow.WriteString("[]")
	}
	const head, mid, tail = `{"fleet":[`, `],"slowest":`, `,"fleet_omitted":`
	budget := event.MaxFrameBytes - len(head) - len(mid) - slow.Len() - len(tail) - 21 // 20 digits and "}"
	sort.Slice(lines, func(i, j int) bool {
		if lines[i].LastSeenS != lines[j].LastSeenS {
			return lines[i].LastSeenS < lines[j].LastSeenS
		}
		return lines[i].Agent < lines[j].Agent
	})
	type encoded struct {
		agent string
		raw   []byte
	}
	kept := make([]encoded, 0, min(len(lines), maxFleetLines))
	var buf bytes.Buffer
	for _, l := range lines {
		if len(kept) == maxFleetLines {
			break
		}
		l.Host, l.Role, l.Backend, l.Engine = event.Clip(l.Host, maxFleetField), event.Clip(l.Role, maxFleetField),
			event.Clip(l.Backend, maxFleetField), event.Clip(l.Engine, maxFleetField)
		buf.Reset()
		if err := encodeJSON(&buf, l); err != nil {
			continue
		}
		if buf.Len()+1 > budget {
			break
		}
		budget -= buf.Len() + 1
		kept = append(kept, encoded{l.Agent, bytes.Clone(buf.Bytes())})
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].agent < kept[j].agent })
	out := make([]byte, 0, event.MaxFrameBytes-budget)
	out = append(out, head...)
	for i, k := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, k.raw...)
	}
	out = append(append(append(out, mid...), slow.Bytes()...), tail...)
	out = strconv.AppendInt(out, int64(len(lines)-len(kept)), 10)
	return append(out, '}')
}

// encodeJSON appends v's JSON to buf without HTML escaping and without
// the encoder's newline.
func encodeJSON(buf *bytes.Buffer, v any) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	buf.Truncate(buf.Len() - 1)
	return nil
}
