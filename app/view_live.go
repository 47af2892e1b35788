package app

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvscope/kvscope/core/event"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// liveTick is how often the live panel redraws: events are aggregated as
// they arrive, the drawing happens at most this often.
const liveTick = 200 * time.Millisecond

// The live panel's elements whose content the session writes directly,
// outside go-app's diffing, so a redraw touches only the live panel.
const (
	liveStatsID     = "live-stats"
	liveBandsID     = "live-bands-wrap"
	liveGPUsID      = "live-gpus"
	liveTransfersID = "live-transfers"
	liveDeployID    = "live-deployment"
	liveTimelineID  = "live-timeline"
	liveFleetID     = "live-fleet"
)

// fleetAutoLimit is the fleet size from which a page that has not picked
// agents draws none until it does: it then gets the fleet summary, not
// every descriptor batch of every host.
const fleetAutoLimit = 20

// liveSession is the browser's subscription to the server's /ws/live: the
// websocket, its reconnection, and the aggregated state. Root keeps it
// across views; the live panel starts it when shown and stops it when
// hidden. Its state is touched by websocket and timer callbacks and by the
// panel's buttons, under mu.
type liveSession struct {
	mu          sync.Mutex
	live        *Live
	status      liveStatus
	running     bool
	ws          app.Value
	wsFuncs     []wsListener
	tickFn      app.Func
	tickID      app.Value
	retryFn     app.Func
	retryID     app.Value
	attempt     int               // reconnection attempts since the last open
	everOpen    bool              // a connection opened since the page loaded
	history     int               // frames of the hub's replay still to come (-1: its count, the first message, is awaited)
	detailAt    map[string]uint64 // the count's detail positions, taken once the replay is in
	paused      bool
	pauseTotal  uint64 // Ring.Total when paused
	dark        bool
	drawn       map[string]string // what each element shows
	drawnInfo   uint64
	drawnListed uint64
	drawnSample uint64
	drawnDark   bool
	drawnVer    uint64
	drawnFleet  uint64
	// selected are the agents drawn (nil: all); picked is set once the
	// user chose, so a large fleet does not override the choice.
	selected map[string]bool
	picked   bool
}

// wsListener is one websocket event listener.
type wsListener struct {
	name string
	fn   app.Func
}

func newLiveSession() *liveSession {
	return &liveSession{live: NewLive(), status: liveStatus{State: "connecting"}, drawn: map[string]string{}}
}

// liveURL is the websocket address of the server that served this page,
// or "" when the page is not served over HTTP (a file).
func liveURL() string {
	loc := app.Window().Get("location")
	scheme := map[string]string{"http:": "ws:", "https:": "wss:"}[loc.Get("protocol").String()]
	if scheme == "" {
		return ""
	}
	return scheme + "//" + loc.Get("host").String() + "/ws/live"
}

// start connects and starts drawing.
func (s *liveSession) start(dark bool) {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return
	}
	s.running, s.dark = true, dark
	s.mu.Unlock()
	s.tickFn = app.FuncOf(func(app.Value, []app.Value) any { s.draw(); return nil })
	s.tickID = app.Window().Call("setInterval", s.tickFn, int(liveTick/time.Millisecond))
	s.connect()
	s.draw()
}

// stop closes the websocket and stops drawing; the aggregated state stays.
func (s *liveSession) stop() {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	s.running = false
	s.mu.Unlock()
	app.Window().Call("clearInterval", s.tickID)
	s.tickFn.Release()
	s.cancelRetry()
	s.closeSocket()
}

// connect opens the websocket, or says quietly that there is no live
// server when the page is not served over HTTP.
func (s *liveSession) connect() {
	url := liveURL()
	if url == "" {
		s.setStatus("none", "this page is a file: live transfers need kvscope serve")
		return
	}
	ctor := app.Window().Get("WebSocket")
	if !ctor.Truthy() {
		s.setStatus("none", "this browser has no WebSocket")
		return
	}
	s.mu.Lock()
	since := s.live.MaxStream
	q := liveQuery(since, s.selected)
	s.mu.Unlock()
	url += q
	if s.everOpen {
		s.setStatus("connecting", "reconnecting to /ws/live")
	} else {
		s.setStatus("connecting", "")
	}
	defer func() {
		// The constructor throws for an address the page may not open.
		if err := recover(); err != nil {
			s.setStatus("none", fmt.Sprintf("cannot open %s: %v", url, err))
		}
	}()
	ws := ctor.New(url)
	on := func(name string, fn func(args []app.Value)) {
		f := app.FuncOf(func(_ app.Value, args []app.Value) any { fn(args); return nil })
		s.wsFuncs = append(s.wsFuncs, wsListener{name, f})
		ws.Call("addEventListener", name, f)
	}
	on("open", func([]app.Value) {
		s.mu.Lock()
		s.everOpen, s.attempt, s.history = true, 0, -1
		s.mu.Unlock()
		s.setStatus("open", "")
	})
	on("message", func(args []app.Value) {
		data := args[0].Get("data")
		if data.Type() != app.TypeString {
			return
		}
		frame := []byte(data.String())
		if f, ok := event.ParseFleet(frame); ok {
			s.setFleet(f)
			return
		}
		s.mu.Lock()
		switch {
		case s.history < 0: // every connection starts with {"history": N}
			if h, ok := event.ReadHistory(frame); ok {
				s.history = h.Frames
				s.live.Gone += h.Gone
				s.detailAt = h.DetailAt
			} else { // a hub that sends its replay as one frame
				s.live.AddHistory(frame, time.Now())
				s.history, s.detailAt = 0, nil
			}
			if s.history == 0 {
				s.live.DetailAt(s.detailAt)
			}
		case s.history > 0: // then the hub's replay, in N frames
			s.live.AddHistory(frame, time.Now())
			if s.history--; s.history == 0 { // after the replay: an agent it shows restarted has nothing missed
				s.live.DetailAt(s.detailAt)
			}
		default:
			s.live.AddFrame(frame, time.Now())
		}
		s.mu.Unlock()
	})
	on("close", func(args []app.Value) {
		code, reason := args[0].Get("code").Int(), args[0].Get("reason").String()
		s.closeSocket()
		s.scheduleRetry(code, reason)
	})
	s.ws = ws
}

// liveQuery is /ws/live's query: where to resume from the event log, and
// which agents to draw (nil: all).
func liveQuery(since uint64, selected map[string]bool) string {
	q := url.Values{}
	if since > 0 {
		q.Set("since", strconv.FormatUint(since, 10))
	}
	if selected != nil {
		names := make([]string, 0, len(selected))
		for a := range selected {
			names = append(names, a)
		}
		sort.Strings(names)
		q.Set("agents", strings.Join(names, ","))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// setFleet takes a fleet summary; a fleet larger than fleetAutoLimit
// that the user has not picked from is drawn for no agent until they do.
func (s *liveSession) setFleet(f event.FleetSummary) {
	s.mu.Lock()
	s.live.Fleet = f
	s.live.FleetVer++
	auto := !s.picked && s.selected == nil && len(f.Fleet) > fleetAutoLimit
	s.mu.Unlock()
	if auto {
		s.choose(map[string]bool{}, false)
	}
}

// choose draws the given agents (nil: all): the page starts its live view
// again, subscribed to their events only.
func (s *liveSession) choose(selected map[string]bool, byUser bool) {
	s.mu.Lock()
	fleet, ver := s.live.Fleet, s.live.FleetVer
	s.selected, s.picked = selected, s.picked || byUser
	s.live = NewLive()
	s.live.Fleet, s.live.FleetVer = fleet, ver
	s.drawn = map[string]string{}
	running := s.running
	s.mu.Unlock()
	if running {
		s.closeSocket()
		s.connect()
	}
}

// pick toggles one agent in the selection (from the fleet table).
func (s *liveSession) pick(agent string) {
	s.mu.Lock()
	next := map[string]bool{}
	if s.selected == nil { // all drawn: draw just this one
		next[agent] = true
	} else {
		for a := range s.selected {
			next[a] = true
		}
		if next[agent] {
			delete(next, agent)
		} else {
			next[agent] = true
		}
	}
	s.mu.Unlock()
	s.choose(next, true)
}

// closeSocket closes the websocket and releases its callbacks.
func (s *liveSession) closeSocket() {
	if s.ws == nil {
		return
	}
	ws := s.ws
	s.ws = nil
	// Remove the listeners before releasing them: the socket still fires
	// its close event, and a released function must never be called.
	for _, l := range s.wsFuncs {
		ws.Call("removeEventListener", l.name, l.fn)
		l.fn.Release()
	}
	ws.Call("close")
	s.wsFuncs = nil
}

// scheduleRetry reconnects after a backoff. A server that never accepted
// the connection (a static site) is retried just as quietly, at most every
// 30 seconds.
func (s *liveSession) scheduleRetry(code int, reason string) {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	wait := liveBackoff(s.attempt)
	s.attempt++
	everOpen := s.everOpen
	s.mu.Unlock()
	switch {
	case everOpen && code == 1013: // the server asks the page to come back: catching up, or busy
		s.setStatus("connecting", fmt.Sprintf("the server asks to resume later (%s); resuming in %s", reason, wait.Round(100*time.Millisecond)))
	case everOpen:
		s.setStatus("closed", fmt.Sprintf("the connection closed (code %d); reconnecting in %s", code, wait.Round(100*time.Millisecond)))
	default:
		s.setStatus("none", "live transfers need kvscope serve (a static site plans in the browser alone); retrying now and then")
	}
	s.cancelRetry()
	s.retryFn = app.FuncOf(func(app.Value, []app.Value) any {
		s.retryFn.Release()
		s.retryFn = nil
		s.mu.Lock()
		running := s.running
		s.mu.Unlock()
		if running {
			s.connect()
		}
		return nil
	})
	s.retryID = app.Window().Call("setTimeout", s.retryFn, int(wait/time.Millisecond))
}

func (s *liveSession) cancelRetry() {
	if s.retryFn == nil {
		return
	}
	app.Window().Call("clearTimeout", s.retryID)
	s.retryFn.Release()
	s.retryFn = nil
}

func (s *liveSession) setStatus(state, detail string) {
	s.mu.Lock()
	s.status = liveStatus{State: state, Detail: detail}
	s.mu.Unlock()
}

// togglePause freezes or resumes the drawing; events keep arriving.
func (s *liveSession) togglePause() {
	s.mu.Lock()
	s.paused = !s.paused
	s.pauseTotal = s.live.Ring.Total
	s.mu.Unlock()
	s.draw()
}

func (s *liveSession) isPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

func (s *liveSession) setDark(dark bool) {
	s.mu.Lock()
	s.dark = dark
	s.mu.Unlock()
}

// exportTrace downloads the ring's events as a Chrome/Perfetto trace.
func (s *liveSession) exportTrace() {
	s.mu.Lock()
	events := s.live.Ring.Events()
	s.mu.Unlock()
	b, err := event.Trace(events)
	if err != nil {
		callJS("toast", "trace export failed: "+err.Error())
		return
	}
	callJS("download", "kvscope-live-trace.json", "application/json", string(b))
}

// draw writes what changed into the panel's elements. While paused only
// the status and counters change. An element go-app made anew (it lacks
// the marker draw leaves) is filled again whatever changed.
func (s *liveSession) draw() {
	doc := app.Window().Get("document")
	panel := doc.Call("getElementById", "live")
	if !panel.Truthy() {
		return
	}
	els := map[string]app.Value{}
	blank := map[string]bool{}
	for _, id := range []string{liveStatsID, liveBandsID, liveGPUsID, liveDeployID, liveTransfersID, liveTimelineID, liveFleetID} {
		el := doc.Call("getElementById", id)
		if !el.Truthy() {
			return
		}
		els[id], blank[id] = el, !el.Get("__kvscope").Truthy()
	}
	s.mu.Lock()
	l := s.live
	now := time.Now()
	l.Tick(now)
	writes := map[string]string{}
	since := uint64(0)
	if s.paused {
		since = l.Ring.Total - s.pauseTotal
	}
	writes[liveStatsID] = liveStatsHTML(l, s.status, s.paused, since)
	// While paused an element is drawn only when it is blank (the panel
	// was shown again).
	live := !s.paused
	chart := ""
	if blank[liveBandsID] || live && (l.Version != s.drawnVer || l.fresh(now, 6*time.Second)) {
		writes[liveBandsID] = liveBandsHTML(l, now)
		for _, a := range l.agents {
			for _, b := range a.bands {
				b.drawn = b.Batches
			}
		}
		s.drawnVer = l.Version
	}
	if blank[liveGPUsID] || blank[liveDeployID] || live && l.Info != s.drawnInfo {
		writes[liveGPUsID] = liveGPUsHTML(l)
		writes[liveDeployID] = liveDeploymentHTML(l)
		s.drawnInfo = l.Info
	}
	if blank[liveFleetID] || live && l.FleetVer != s.drawnFleet {
		writes[liveFleetID] = liveFleetHTML(l, s.selected)
		s.drawnFleet = l.FleetVer
	}
	if blank[liveTransfersID] || live && l.Listed != s.drawnListed {
		writes[liveTransfersID] = liveTransfersHTML(l)
		s.drawnListed = l.Listed
	}
	if l.Ring.Total > 0 && (blank[liveTimelineID] || live && (l.Sampled != s.drawnSample || s.dark != s.drawnDark)) {
		chart = liveTimelineOption(l)
		s.drawnSample, s.drawnDark = l.Sampled, s.dark
	}
	state, events, dark := s.status.State, l.Ring.Total > 0 || len(l.Fleet.Fleet) > 0, s.dark
	s.mu.Unlock()

	panel.Call("setAttribute", "data-state", state)
	panel.Call("setAttribute", "data-events", fmt.Sprint(events))
	for id, markup := range writes {
		if !blank[id] && s.drawn[id] == markup {
			continue
		}
		if k := app.Window().Get("kvscope"); k.Truthy() {
			k.Call("morph", id, markup)
		} else {
			els[id].Set("innerHTML", markup)
		}
		els[id].Set("__kvscope", true)
		s.drawn[id] = markup
	}
	if chart != "" {
		callJS("chart", liveTimelineID, chart, dark)
		els[liveTimelineID].Set("__kvscope", true)
	}
}

// LivePanel is the live view on the descriptor flow view: bands built from
// the agents' descriptor batches, a timeline of their samples, the GPU
// panel and the latest transfers. Its contents are drawn by its session at
// most five times a second, not by re-rendering the page.
type LivePanel struct {
	app.Compo
	Session *liveSession
	Dark    bool
	// Query is the app's settings as a URL query: "Run live" sends it to
	// the server, which restarts its embedded agent on them.
	Query string
}

// OnMount connects.
func (p *LivePanel) OnMount(ctx app.Context) { p.Session.start(p.Dark) }

// OnDismount disconnects; the session keeps what it aggregated.
func (p *LivePanel) OnDismount() { p.Session.stop() }

// OnUpdate follows the theme.
func (p *LivePanel) OnUpdate(ctx app.Context) { p.Session.setDark(p.Dark) }

// Render is the panel's frame; the session fills its elements.
func (p *LivePanel) Render() app.UI {
	label := "Pause"
	if p.Session.isPaused() {
		label = "Resume"
	}
	return app.Section().ID("live").Class("card live").DataSet("testid", "live").Body(
		app.Div().Class("live-head").Body(
			app.H2().Text("Live transfers"),
			app.Div().Class("live-actions").Body(
				app.Button().DataSet("testid", "live-pause").Title("freeze the drawing; events keep arriving").Text(label).
					OnClick(func(ctx app.Context, e app.Event) {
						p.Session.togglePause()
						ctx.Update()
					}),
				app.Button().DataSet("testid", "live-export-trace").Title("download the kept events as a Chrome/Perfetto trace").Text("Export trace").
					OnClick(func(ctx app.Context, e app.Event) { p.Session.exportTrace() }),
				app.Button().DataSet("testid", "live-run").
					Title("restart the server's embedded agent on this configuration (model, engines, connector, prompt and hit), so the live bands are the transfer the views compute").
					Text("Run live").OnClick(func(ctx app.Context, e app.Event) { callJS("runLive", p.Query) }),
			),
		),
		app.P().ID("live-run-status").Class("live-run-status muted").DataSet("testid", "live-run-status"),
		app.Div().ID(liveStatsID).Class("live-stats"),
		app.Div().Class("live-body").Body(
			app.Div().Class("live-grid").Body(
				app.Div().ID(liveBandsID).Class("live-bands"),
				app.Div().ID(liveGPUsID).Class("live-gpus").DataSet("testid", "live-gpus"),
			),
			app.Div().ID(liveFleetID).Class("live-fleet").DataSet("testid", "live-fleet").OnClick(func(ctx app.Context, e app.Event) {
				// The table is drawn outside go-app: its rows name their agent.
				el := e.Get("target").Call("closest", "[data-pick]")
				if !el.Truthy() {
					return
				}
				if agent := el.Call("getAttribute", "data-pick").String(); agent == "*" {
					p.Session.choose(nil, true)
				} else {
					p.Session.pick(agent)
				}
			}),
			app.Div().ID(liveDeployID).Class("live-deployment").DataSet("testid", "live-deployment"),
			app.Div().ID(liveTimelineID).Class("chart live-timeline").DataSet("testid", "live-timeline"),
			app.Div().ID(liveTransfersID).Class("live-transfers").DataSet("testid", "live-transfers"),
		),
	)
}
