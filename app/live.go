package app

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/kvscope/kvscope/core/event"
)

// The live view's limits: what the browser keeps however long the page is
// open. Everything else is aggregated as it arrives.
const (
	liveRingSize   = 4096              // events kept (for the trace export and the counters)
	liveMaxAgents  = 8                 // agents drawn; the least recently active is forgotten first
	liveMaxBands   = 1024              // bands per agent
	liveMaxRank    = 256               // ranks drawn per side
	liveMaxGroup   = 64                // KV cache groups drawn per side
	liveMaxLayers  = 256               // layer names remembered per band
	liveRecent     = 20                // transfers and errors listed
	liveWindow     = 120 * time.Second // the timeline's span
	liveMaxSamples = 180               // samples kept per agent (1 Hz)
)

// bandKey is one live band: a P rank, a D rank and a (P group, D group)
// pair, as the agent's descriptor batches report them.
type bandKey struct{ P, D, PG, DG int }

// liveBand is everything that moved over one band since the page connected.
type liveBand struct {
	bandKey
	Kind        string // the layer kind of its last batch
	Bytes       int64
	Descs       int64
	Batches     int64
	Measured    int64 // batches with measured timing
	Synthesized int64 // batches with synthesized timing
	LastAt      time.Time
	LastNS      int64 // the last batch's duration
	layers      map[string]struct{}
	drawn       int64 // Batches when the band was last drawn
}

// Timing is how the band's timings are drawn: measured only when every
// batch in it was measured, so a synthesized timing is never shown as a
// measured one.
func (b *liveBand) Timing() event.Timing { return bandTiming(b.Measured, b.Synthesized) }

// bandTiming decides a band's style from its batches' timings.
func bandTiming(measured, synthesized int64) event.Timing {
	if synthesized > 0 || measured == 0 {
		return event.Synthesized
	}
	return event.Measured
}

// bandOpacity fades a band with the age of its last batch: bright when a
// batch just moved, dim after a few quiet seconds.
func bandOpacity(age time.Duration) float64 {
	if age < 0 {
		age = 0
	}
	return 0.25 + 0.7*math.Exp(-age.Seconds()/2)
}

// liveAgent is one agent as its events describe it: its hello, its
// deployment (ranks and groups seen) and its bands and samples.
type liveAgent struct {
	Name      string
	Hello     *event.HelloData
	Handshake *event.HandshakeData
	FirstSeq  uint64 // the first event this page saw; history before it is not shown
	LastAt    time.Time
	PRanks    int // ranks seen on each side (handshake, registrations, batches)
	DRanks    int
	PGroups   int // groups seen on each side (batches)
	DGroups   int
	Bytes     int64  // bytes of every batch seen
	Undrawn   uint64 // batches outside what the view draws (too many ranks, groups or bands)
	Dropped   uint64 // events the agent's own queue dropped (its latest sample)
	Samples   []liveSample
	Failures  int                           // error events
	Mismatch  map[string]event.MismatchData // a watched engine's plan fields that differ from kvscope's, by field
	Stuck     map[string]event.StuckData    // what stopped making progress and is not cleared, by request, engine and source
	bands     map[bandKey]*liveBand
}

// liveSample is one 1 Hz sample with its timestamp.
type liveSample struct {
	TS int64
	event.SampleData
}

// liveTransfer is one completed transfer.
type liveTransfer struct {
	Agent string
	TS    int64
	event.DoneData
}

// liveError is one reported failure.
type liveError struct {
	Agent string
	TS    int64
	event.ErrorData
}

// Live aggregates the live event stream: a bounded ring of the events
// themselves, and per agent the bands, samples and the latest transfers,
// updated as each event arrives so nothing is recomputed from history.
// It is not safe for concurrent use.
type Live struct {
	// MaxStream is the last event log (JetStream) message seen: a
	// reconnection resumes from it (/ws/live?since=N), losing nothing.
	MaxStream uint64
	// Fleet is the server's latest fleet summary: every agent, whichever
	// this page draws; FleetVer counts summaries.
	Fleet         event.FleetSummary
	FleetVer      uint64
	Ring          *event.Ring
	Ignored       uint64 // events the ring refused: repeats replayed after a reconnect
	Malformed     uint64 // events (or whole frames) that did not decode
	LastMalformed string
	Verified      map[string]uint64 // transfer_done by verdict: exact, wrong, skipped
	Transfers     []liveTransfer    // newest last
	Errors        []liveError       // newest last
	Forgotten     uint64            // agents dropped to stay within liveMaxAgents
	// Gone is the stored messages this page missed while away that the
	// event log no longer held when it resumed (its age and size limits
	// dropped them): a gap the server told of, never filled.
	Gone    uint64
	Version uint64 // bumps on every accepted event
	Info    uint64 // bumps when a hello, handshake or registration changes an agent
	Listed  uint64 // bumps when a transfer or error is listed
	Sampled uint64 // bumps on every sample
	agents  map[string]*liveAgent
}

// NewLive makes an empty live state.
func NewLive() *Live {
	return &Live{Ring: event.NewRing(liveRingSize), Verified: map[string]uint64{}, agents: map[string]*liveAgent{}}
}

// DetailAt takes the hub's word of where the detail of the agents this
// page draws stood when it (re)connected (event.History.DetailAt): what the
// page had not seen of it by then is lost, counted in Ring.DetailGaps (an
// agent it has not seen starts there).
func (l *Live) DetailAt(at map[string]uint64) {
	before := l.Ring.DetailGaps
	for agent, dseq := range at {
		l.Ring.DetailAt(agent, dseq)
	}
	if l.Ring.DetailGaps != before {
		l.Version++
	}
}

// Tick counts the detail that drawn agents' samples said was sent and
// that has not come within event.DetailGrace (Ring.DetailDue): a lost
// tail is told, though no later detail shows the jump. The view calls it
// as it draws.
func (l *Live) Tick(now time.Time) {
	if l.Ring.DetailDue(now, event.DetailGrace) {
		l.Version++
	}
}

// AddFrame decodes one websocket frame and adds its events; a frame that
// does not decode is counted and dropped whole.
func (l *Live) AddFrame(data []byte, at time.Time) error {
	events, err := l.decode(data)
	if err != nil {
		return err
	}
	for _, e := range events {
		l.Add(e, at)
	}
	return nil
}

// decode decodes a frame. A frame that does not decode whole is split
// into its events (the hub joins several agents' frames into one
// message): the events that decode are kept and each one that does not is
// counted; a frame that does not even split is counted once and dropped.
func (l *Live) decode(data []byte) ([]event.Event, error) {
	events, err := event.DecodeFrame(data)
	if err == nil {
		return events, nil
	}
	heads, perr := event.Peek(data)
	if perr != nil {
		l.Malformed++
		l.LastMalformed = err.Error()
		return nil, err
	}
	events = events[:0]
	for i, h := range heads {
		e, err := event.DecodeEvent(h.Raw)
		if err != nil {
			l.Malformed++
			l.LastMalformed = fmt.Sprintf("%s event %d: %v", h.Agent, h.Seq, err)
			if fe, ok := err.(*event.FrameError); ok {
				fe.Index = i
			}
			continue
		}
		events = append(events, e)
	}
	return events, nil
}

// AddHistory adds a connection's first frame: the hub's replay of what
// happened before this page subscribed (each agent's hello, handshake and
// registrations, then its recent events). Sequence gaps inside it are not
// losses for agents this page had not seen.
func (l *Live) AddHistory(data []byte, at time.Time) error {
	events, err := l.decode(data)
	if err != nil {
		return err
	}
	for i, ok := range l.Ring.AddHistory(events) {
		if !ok {
			l.Ignored++
			continue
		}
		l.apply(events[i], at)
	}
	return nil
}

// Add takes one event that arrived at the given time. It reports false for
// an event the ring already saw (or an older one), which changes nothing.
func (l *Live) Add(e event.Event, at time.Time) bool {
	if !l.Ring.Add(e) {
		l.Ignored++
		return false
	}
	l.apply(e, at)
	return true
}

// apply folds an accepted event into the aggregates.
func (l *Live) apply(e event.Event, at time.Time) {
	l.Version++
	l.MaxStream = max(l.MaxStream, e.Stream)
	if old, ok := l.agents[e.Agent]; ok && e.Kind == event.Hello && e.Seq == 1 && old.Hello != nil {
		// Restarted (Ring.Add let it through): a new deployment under the
		// same name, whose request ids start again.
		delete(l.agents, e.Agent)
		l.Transfers = slices.DeleteFunc(l.Transfers, func(t liveTransfer) bool { return t.Agent == e.Agent })
	}
	a := l.agent(e.Agent, e.Seq, at)
	switch e.Kind {
	case event.Hello:
		a.Hello = e.Hello
		l.Info++
	case event.Handshake:
		a.Handshake = e.Handshake
		a.PRanks = max(a.PRanks, min(e.Handshake.PTP, liveMaxRank))
		a.DRanks = max(a.DRanks, min(e.Handshake.DTP, liveMaxRank))
		l.Info++
	case event.Registration:
		r := e.Registration
		if r.Rank >= 0 && r.Rank < liveMaxRank {
			switch r.Side {
			case "P":
				a.PRanks = max(a.PRanks, r.Rank+1)
			case "D":
				a.DRanks = max(a.DRanks, r.Rank+1)
			}
		}
		l.Info++
	case event.DescBatch:
		a.addBatch(e.Batch, at)
	case event.TransferDone:
		l.Verified[e.Done.Verified]++
		l.Transfers = appendRecent(l.Transfers, liveTransfer{Agent: e.Agent, TS: e.TS, DoneData: *e.Done})
		l.Listed++
	case event.Error:
		l.Errors = appendRecent(l.Errors, liveError{Agent: e.Agent, TS: e.TS, ErrorData: *e.Error})
		a.Failures++
		l.Listed++
		l.Info++ // the deployment panel counts failures
	case event.PlanMismatch:
		if a.Mismatch == nil {
			a.Mismatch = map[string]event.MismatchData{}
		}
		if len(a.Mismatch) < 16 || a.Mismatch[e.Mismatch.Field].Field != "" {
			a.Mismatch[e.Mismatch.Field] = *e.Mismatch
		}
		l.Info++
	case event.StuckTransfer:
		k := e.Stuck.Source + "\x00" + e.Stuck.Engine + "\x00" + e.Stuck.Request
		if e.Stuck.Source == "vllm" {
			k += fmt.Sprint("\x00", e.TS) // each growth of a counter is its own line
		}
		switch {
		case e.Stuck.Cleared:
			delete(a.Stuck, k)
		case a.Stuck == nil:
			a.Stuck = map[string]event.StuckData{k: *e.Stuck}
		case len(a.Stuck) < 16:
			a.Stuck[k] = *e.Stuck
		}
		l.Info++
	case event.Sample:
		if a.Hello != nil && a.Hello.Role == "watch" {
			l.Info++ // the deployment panel shows the latest sample
		}
		a.Dropped = e.Sample.DroppedEvents
		a.Samples = append(a.Samples, liveSample{TS: e.TS, SampleData: *e.Sample})
		cut := 0
		for cut < len(a.Samples) && (len(a.Samples)-cut > liveMaxSamples || e.TS-a.Samples[cut].TS > int64(liveWindow)) {
			cut++
		}
		a.Samples = append(a.Samples[:0], a.Samples[cut:]...)
		l.Sampled++
	}
}

// appendRecent keeps the last liveRecent items.
func appendRecent[T any](list []T, v T) []T {
	list = append(list, v)
	if len(list) > liveRecent {
		list = append(list[:0], list[len(list)-liveRecent:]...)
	}
	return list
}

// agent returns an agent's state, making it (and forgetting the least
// recently active agent when there are too many) on its first event.
func (l *Live) agent(name string, seq uint64, at time.Time) *liveAgent {
	a, ok := l.agents[name]
	if !ok {
		if len(l.agents) >= liveMaxAgents {
			var oldest *liveAgent
			for _, o := range l.agents {
				if oldest == nil || o.LastAt.Before(oldest.LastAt) {
					oldest = o
				}
			}
			delete(l.agents, oldest.Name)
			l.Forgotten++
			l.Info++
		}
		a = &liveAgent{Name: name, FirstSeq: seq, bands: map[bandKey]*liveBand{}}
		l.agents[name] = a
	}
	a.LastAt = at
	return a
}

// addBatch adds a descriptor batch to its band.
func (a *liveAgent) addBatch(b *event.BatchData, at time.Time) {
	a.Bytes += b.Bytes
	k := bandKey{b.PRank, b.DRank, b.PGroup, b.DGroup}
	if k.P < 0 || k.D < 0 || k.PG < 0 || k.DG < 0 || k.P >= liveMaxRank || k.D >= liveMaxRank || k.PG >= liveMaxGroup || k.DG >= liveMaxGroup {
		a.Undrawn++
		return
	}
	band, ok := a.bands[k]
	if !ok {
		if len(a.bands) >= liveMaxBands {
			a.Undrawn++
			return
		}
		band = &liveBand{bandKey: k, layers: map[string]struct{}{}}
		a.bands[k] = band
	}
	a.PRanks, a.DRanks = max(a.PRanks, k.P+1), max(a.DRanks, k.D+1)
	a.PGroups, a.DGroups = max(a.PGroups, k.PG+1), max(a.DGroups, k.DG+1)
	band.Kind = b.Kind
	band.Bytes += b.Bytes
	band.Descs += int64(b.Descs)
	band.Batches++
	if b.Timing == event.Measured {
		band.Measured++
	} else {
		band.Synthesized++
	}
	band.LastAt = at
	band.LastNS = b.EndNS - b.StartNS
	if _, seen := band.layers[b.Layer]; !seen && b.Layer != "" && len(band.layers) < liveMaxLayers {
		band.layers[b.Layer] = struct{}{}
	}
}

// Bands returns an agent's bands in a stable order: by P rank, D rank, P
// group, D group.
func (a *liveAgent) Bands() []*liveBand {
	out := make([]*liveBand, 0, len(a.bands))
	for _, b := range a.bands {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i].bandKey, out[j].bandKey
		if x.P != y.P {
			return x.P < y.P
		}
		if x.D != y.D {
			return x.D < y.D
		}
		if x.PG != y.PG {
			return x.PG < y.PG
		}
		return x.DG < y.DG
	})
	return out
}

// Agents returns the agents by name.
func (l *Live) Agents() []*liveAgent {
	out := make([]*liveAgent, 0, len(l.agents))
	for _, a := range l.agents {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// fresh reports whether any band moved within the last d (its drawing is
// still fading).
func (l *Live) fresh(now time.Time, d time.Duration) bool {
	for _, a := range l.agents {
		for _, b := range a.bands {
			if now.Sub(b.LastAt) < d {
				return true
			}
		}
	}
	return false
}

// timelinePoint is one second of an agent's timeline. ReqPS is NaN where
// it cannot be derived (the first sample, or a counter that went back).
type timelinePoint struct {
	MS       int64 // Unix milliseconds
	GBps     float64
	P50, P99 float64 // microseconds
	ReqPS    float64
}

// timeline is an agent's samples within window of end (Unix nanoseconds).
// A sample's requests counter is the agent's total served, so requests per
// second is its difference between consecutive samples over their time
// apart.
func (a *liveAgent) timeline(end int64, window time.Duration) []timelinePoint {
	var out []timelinePoint
	for i, s := range a.Samples {
		if end-s.TS > int64(window) {
			continue
		}
		p := timelinePoint{MS: s.TS / 1e6, GBps: s.GBps, P50: s.P50US, P99: s.P99US, ReqPS: math.NaN()}
		if i > 0 {
			prev := a.Samples[i-1]
			if dt := float64(s.TS-prev.TS) / 1e9; dt > 0 && s.Requests >= prev.Requests {
				p.ReqPS = float64(s.Requests-prev.Requests) / dt
			}
		}
		out = append(out, p)
	}
	return out
}

// newestSample is the latest sample time over all agents (0 when none).
func (l *Live) newestSample() int64 {
	var t int64
	for _, a := range l.agents {
		if n := len(a.Samples); n > 0 {
			t = max(t, a.Samples[n-1].TS)
		}
	}
	return t
}

// liveBackoff is how long to wait before reconnection attempt n (0 is the
// first retry): doubling from half a second, at most 30 seconds.
func liveBackoff(n int) time.Duration {
	d := 500 * time.Millisecond
	for i := 0; i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}
