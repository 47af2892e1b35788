package live

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// detailMonitor counts every detail message on NATS, by agent: what
// agents' detail costs the fleet (it subscribes, so it never makes an
// agent send: agents hear only replicas' watch words).
type detailMonitor struct {
	mu   sync.Mutex
	msgs map[string]int
}

func monitorDetail(t *testing.T, url string) *detailMonitor {
	m := &detailMonitor{msgs: map[string]int{}}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(event.DetailPrefix+">", func(msg *nats.Msg) {
		agent, _ := event.AgentOfDetail(msg.Subject)
		m.mu.Lock()
		m.msgs[agent]++
		m.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	return m
}

func (m *detailMonitor) count(agent string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.msgs[agent]
}

// detail reads a subscriber's detail figures for agent.
func (s *fleetSub) detailOf(agent string) (count int, gaps uint64, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dcount[agent], s.dgaps[agent], s.dat[agent]
}

// TestDetailOnDemand is the fleet's two kinds of subjects in short: three
// agents that split their events (two on websockets to two replicas, one
// publishing to NATS itself) run requests, each a start, 192 descriptor
// batches and a transfer_done. While no browser draws an agent, no detail
// reaches NATS and the browsers get the summaries only; a browser that
// draws two of them gets their detail within a second and the third's
// stays at 0. Then the first agent's replica restarts, the NATS server
// restarts, and the drawing browser is away 10 s: after each its detail
// resumes within a second, and what it missed is told by the jump in
// dseq (the replica's restart and the browser's absence lose detail by
// design). When it stops drawing, detail stops within the lease. In the
// end every browser holds every summary, once per connection.
func TestDetailOnDemand(t *testing.T) {
	n := livetest.StartNATS(t)
	r1 := startReplica(t, n.URL(), livetest.FreeAddr(t))
	r2 := startReplica(t, n.URL(), livetest.FreeAddr(t))
	mon := monitorDetail(t, n.URL())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	fleet := newFleetSub(r2.Addr)
	fleet.url += "?detail=" // the fleet view: every summary, no detail
	fleet.logf = t.Logf
	wg.Add(1)
	go func() { defer wg.Done(); fleet.run(ctx) }()

	ws1 := &stream.Streamer{Agent: "gpu1/agent", URL: "ws://" + r1.Addr + "/ws/agent", Token: livetest.Credential("gpu1/agent"), SplitDetail: true}
	ws2 := &stream.Streamer{Agent: "gpu2/agent", URL: "ws://" + r2.Addr + "/ws/agent", Token: livetest.Credential("gpu2/agent"), SplitDetail: true}
	onNATS := &stream.NATS{Streamer: stream.Streamer{Agent: "gpu3/agent", SplitDetail: true}, URLs: n.URL()}
	agents := []*stream.Streamer{ws1, ws2, &onNATS.Streamer}
	wg.Add(3)
	go func() { defer wg.Done(); ws1.Run(ctx) }()
	go func() { defer wg.Done(); ws2.Run(ctx) }()
	go func() { defer wg.Done(); onNATS.Run(ctx) }()
	pctx, stopPublishing := context.WithCancel(ctx)
	var pubs sync.WaitGroup
	for _, st := range agents {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: st.Agent, Role: "both", Backend: "host", GPUs: []event.GPU{}}})
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for i := 1; ; i++ {
				select {
				case <-pctx.Done():
					return
				case <-tick.C:
				}
				livetest.PublishRequest(st, i)
			}
		}()
	}

	time.Sleep(1500 * time.Millisecond)
	for _, a := range []string{"gpu1/agent", "gpu2/agent", "gpu3/agent"} {
		if c := mon.count(a); c != 0 {
			t.Errorf("%s sent %d detail messages while no browser drew it", a, c)
		}
		if c, _, _ := fleet.detailOf(a); c != 0 {
			t.Errorf("the fleet browser got %d of %s's detail events", c, a)
		}
	}

	drill := newFleetSub(r2.Addr)
	drill.url += "?detail=gpu1/agent,gpu3/agent" // gpu1 is on the other replica
	drill.logf = t.Logf
	dctx, stopDrill := context.WithCancel(ctx)
	wg.Add(1)
	go func() { defer wg.Done(); drill.run(dctx) }()
	// resumes waits until both drilled agents' detail arrives after since,
	// within limit, and says how long it took.
	resumes := func(what string, since time.Time, limit time.Duration) {
		t.Helper()
		for {
			_, _, at1 := drill.detailOf("gpu1/agent")
			_, _, at3 := drill.detailOf("gpu3/agent")
			if at1.After(since) && at3.After(since) {
				t.Logf("%s: detail of both drilled agents within %v", what, time.Since(since).Round(time.Millisecond))
				return
			}
			if time.Since(since) > limit {
				t.Fatalf("%s: the drilled agents' detail did not resume within %v (gpu1 last %v, gpu3 last %v)", what, limit, at1, at3)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	resumes("a browser drilling in", time.Now(), time.Second)
	time.Sleep(500 * time.Millisecond)
	if c := mon.count("gpu2/agent"); c != 0 {
		t.Errorf("gpu2, which no browser draws, sent %d detail messages", c)
	}
	_, gaps1, _ := drill.detailOf("gpu1/agent")
	_, gaps3, _ := drill.detailOf("gpu3/agent")
	if gaps1 != 0 || gaps3 != 0 {
		t.Errorf("the drilled agents' detail has gaps while nothing failed: %d and %d", gaps1, gaps3)
	}

	t.Log("restarting replica 1, gpu1's")
	r1.Stop()
	time.Sleep(300 * time.Millisecond)
	r1.Start()
	resumes("replica 1 restarted", time.Now(), time.Second)
	if _, g, _ := drill.detailOf("gpu1/agent"); g == 0 {
		t.Errorf("gpu1's detail lost while its replica restarted is not told (no jump in dseq)")
	} else {
		t.Logf("replica 1 restarted: the browser was told of %d of gpu1's detail events missed", g)
	}

	t.Log("restarting the NATS server")
	n.Stop()
	time.Sleep(300 * time.Millisecond)
	n.Start()
	resumes("NATS restarted", time.Now(), 2*time.Second) // the clients' reconnection first
	_, before, _ := drill.detailOf("gpu3/agent")
	t.Logf("NATS restarted: told of %d of gpu3's detail events missed so far", before)

	t.Log("the drilling browser goes away for 10 s")
	drill.pause <- 10 * time.Second
	time.Sleep(10 * time.Second)
	resumes("the browser back", time.Now(), time.Second)
	if _, g, _ := drill.detailOf("gpu1/agent"); g <= gaps1 {
		t.Errorf("detail missed while the browser was away is not told")
	}

	stopDrill()
	time.Sleep(event.WatchLease + time.Second)
	quiet := mon.count("gpu1/agent") + mon.count("gpu3/agent")
	time.Sleep(time.Second)
	if later := mon.count("gpu1/agent") + mon.count("gpu3/agent"); later != quiet {
		t.Errorf("detail still flows with no browser drawing it: %d messages in a second", later-quiet)
	}

	stopPublishing()
	pubs.Wait()
	want := map[string]uint64{}
	for _, st := range agents {
		fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
		if err := st.Flush(fctx); err != nil {
			t.Fatalf("%s: %d summaries never stored: %v", st.Agent, st.Pending(), err)
		}
		fcancel()
		want[st.Agent] = st.Acked()
		if st.Dropped() > 0 {
			t.Fatalf("%s dropped %d events", st.Agent, st.Dropped())
		}
	}
	for _, s := range []*fleetSub{fleet, drill} {
		deadline := time.Now().Add(20 * time.Second)
		for s == drill && s.missing(want) > 0 && time.Now().Before(deadline) {
			break // the drilling browser left: it holds what it was sent while there
		}
		for s == fleet && s.missing(want) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the fleet browser misses %d summaries: %s", s.missing(want), s.someMissing(want))
			}
			time.Sleep(20 * time.Millisecond)
		}
		s.mu.Lock()
		if s.sameConn > 0 {
			t.Errorf("%s: %d summaries arrived twice on one connection", s.url, s.sameConn)
		}
		s.mu.Unlock()
	}
	t.Logf("the fleet browser holds all %d summaries of the 3 agents, in %d connections", want["gpu1/agent"]+want["gpu2/agent"]+want["gpu3/agent"], fleet.conns)
}

// TestDetailTailToldOnResume: a browser drawing an agent leaves, the
// agent's detail goes on while the lease lasts and then the agent falls
// idle, so no later detail shows the jump. Coming back (?since=), the
// browser is told where that agent's detail stood (the history header's
// detail_at), and a Ring fed as the app feeds it counts exactly what it
// missed. A new browser is told no position: its detail starts with the
// first it gets.
func TestDetailTailToldOnResume(t *testing.T) {
	n := livetest.StartNATS(t)
	r := startReplica(t, n.URL(), livetest.FreeAddr(t))
	mon := monitorDetail(t, n.URL())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	const name = "gpu1/agent"
	st := livetest.StartSplitAgent(ctx, &wg, r.Addr, name)

	page := &detailPage{t: t, ctx: ctx, addr: r.Addr, agent: name, ring: event.NewRing(1 << 16)}
	dial, read, lastDetail, ring := page.dial, page.read, page.lastDetail, page.ring

	first := dial("")
	_, header, err := first.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := event.ReadHistory(header); !ok {
		t.Fatalf("the first message is %s, not the history header", header)
	} else if at := h.DetailAt; at != nil {
		t.Errorf("before any detail, a browser is told detail positions %v", at)
	}
	read(first, st.DetailOn) // the agent told to send
	const before, after = 5, 3
	for i := 1; i <= before; i++ {
		livetest.PublishRequest(st, i)
	}
	perRequest := uint64(livetest.RequestBatches + 1)
	read(first, func() bool { return lastDetail() == before*perRequest && page.since > 0 })
	first.Close(websocket.StatusNormalClosure, "away")

	// Away: the lease (event.WatchLease) still runs, so this detail is
	// sent, and no browser is there to take it. Then nothing more.
	sent := mon.count(name)
	for i := before + 1; i <= before+after; i++ {
		livetest.PublishRequest(st, i)
	}
	if !st.DetailOn() {
		t.Fatal("the lease lapsed before the agent's last requests; the test needs it running")
	}
	want := (before + after) * perRequest
	for deadline := time.Now().Add(10 * time.Second); ; {
		second := dial(fmt.Sprintf("&since=%d", page.since))
		_, header, err := second.Read(ctx) // the first message: {"history": N, ...}
		second.CloseNow()
		if err != nil {
			t.Fatal(err)
		}
		h, _ := event.ReadHistory(header)
		if got := h.DetailAt[name]; got == want {
			gaps := ring.DetailGaps
			ring.DetailAt(name, got) // as the app does, once the header's history is in
			if ring.DetailGaps-gaps != after*perRequest {
				t.Errorf("told dseq %d after seeing %d: the ring counts %d missed, want %d", got, before*perRequest, ring.DetailGaps-gaps, after*perRequest)
			}
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("coming back, the header says %s: want %s at dseq %d (%d detail messages on NATS, %d before leaving)", header, name, want, mon.count(name), sent)
		}
		time.Sleep(100 * time.Millisecond) // the last frames still on their way to the replica
	}
	fresh := dial("") // a page opened now is told no positions: its detail starts with the first it gets
	_, header, err = fresh.Read(ctx)
	fresh.CloseNow()
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := event.ReadHistory(header); h.DetailAt != nil {
		t.Errorf("a new browser told %s: positions from before it drew the agent", header)
	}
}

// detailPage is a browser drawing one agent's detail (/ws/live?detail=),
// its messages fed into a Ring as the app feeds it: DetailDue as it reads,
// as the app does as it draws.
type detailPage struct {
	t           *testing.T
	ctx         context.Context
	addr, agent string
	ring        *event.Ring
	since       uint64 // the last stream message seen
}

func (p *detailPage) dial(query string) *websocket.Conn {
	p.t.Helper()
	conn, _, err := websocket.Dial(p.ctx, "ws://"+p.addr+"/ws/live?detail="+p.agent+query, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	conn.SetReadLimit(event.MaxFrameBytes + 1024)
	return conn
}

// read takes one connection's messages into the ring until done says so
// (the fleet summary comes every second, so it is asked at least that
// often), and returns the history header.
func (p *detailPage) read(conn *websocket.Conn, done func() bool) []byte {
	p.t.Helper()
	rctx, rcancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer rcancel()
	var header []byte
	for !done() {
		_, data, err := conn.Read(rctx)
		if err != nil {
			p.t.Fatalf("reading: %v (ring at dseq gaps %d, %d events)", err, p.ring.DetailGaps, p.ring.Total)
		}
		p.ring.DetailDue(time.Now(), event.DetailGrace)
		if _, ok := event.HistoryCount(data); ok && header == nil {
			header = data
			continue
		}
		events, err := event.DecodeFrame(data)
		if err != nil {
			continue // the fleet summary
		}
		for _, e := range events {
			if e.Detail == 0 {
				p.since = max(p.since, e.Stream)
			}
			p.ring.Add(e)
		}
	}
	return header
}

// lastDetail is the last dseq of the agent's the ring holds.
func (p *detailPage) lastDetail() uint64 {
	var d uint64
	for _, e := range p.ring.Events() {
		if e.Agent == p.agent {
			d = max(d, e.Detail)
		}
	}
	return d
}

// TestDetailTailToldBySample: a browser draws an agent; the agent's last
// detail never leaves it (it takes its numbers and is not sent, as when
// the agent's detail queue or its link drops it), and it sends no more
// detail, so no jump shows the loss. Its next 1 Hz sample says how far its
// detail sequence got, and within event.DetailGrace of that the browser's
// ring counts exactly what it did not get; what did arrive is not counted.
func TestDetailTailToldBySample(t *testing.T) {
	n := livetest.StartNATS(t)
	r := startReplica(t, n.URL(), livetest.FreeAddr(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	const name = "gpu1/agent"
	st := livetest.StartSplitAgent(ctx, &wg, r.Addr, name)

	page := &detailPage{t: t, ctx: ctx, addr: r.Addr, agent: name, ring: event.NewRing(1 << 16)}
	conn := page.dial("")
	defer conn.CloseNow()
	page.read(conn, st.DetailOn) // the agent told to send
	const requests, lost = 3, 50
	for i := 1; i <= requests; i++ {
		livetest.PublishRequest(st, i)
	}
	perRequest := uint64(livetest.RequestBatches + 1)
	page.read(conn, func() bool { return page.lastDetail() == requests*perRequest })
	st.SkipDetail(lost) // numbered while drawn, never sent
	sample := &event.SampleData{GBps: 1, Requests: requests}
	st.Publish(event.Event{Kind: event.Sample, Sample: sample})
	if sample.DetailThrough != 0 {
		t.Error("Publish stamped the caller's sample")
	}
	start := time.Now()
	page.read(conn, func() bool { return page.ring.DetailGaps != 0 || time.Since(start) > 3*event.DetailGrace })
	if page.ring.DetailGaps != lost {
		t.Fatalf("%d detail gaps %v after the sample, want the %d lost (%d received)", page.ring.DetailGaps, time.Since(start).Round(time.Millisecond), lost, page.lastDetail())
	}
	if took := time.Since(start); took < event.DetailGrace {
		t.Errorf("counted %v after the sample was sent, before the grace of %v", took.Round(time.Millisecond), event.DetailGrace)
	}
	livetest.PublishRequest(st, requests+1) // and the detail after it continues with no second count
	want := (requests+1)*perRequest + lost
	page.read(conn, func() bool { return page.lastDetail() == want })
	if page.ring.DetailGaps != lost {
		t.Errorf("%d detail gaps after the next request's detail, want still %d", page.ring.DetailGaps, lost)
	}
}

// TestDetailPositionsTold: a hub tells a browser coming back where the
// detail of the agents it draws stood, but only while that position is
// fresh (handed within detailFresh); a new browser is told nothing.
func TestDetailPositionsTold(t *testing.T) {
	h := New(Options{})
	defer h.Close()
	h.Publish([]event.Event{{V: 1, Agent: "a", Seq: 1, TS: 1, Kind: event.Hello, Hello: &event.HelloData{Host: "a", Role: "both", Backend: "host", GPUs: []event.GPU{}}}})
	frame := []byte(`[{"v":1,"agent":"a","dseq":7,"kind":"desc_batch","ts_ns":1,"batch":{"request":"r","p_rank":0,"d_rank":0,"p_group":0,"d_group":0,"layer":"l","layer_kind":"full","descs":1,"bytes":1,"start_ns":0,"end_ns":1,"timing":"measured"}}]`)
	heads, err := event.Peek(frame)
	if err != nil {
		t.Fatal(err)
	}
	h.deliverDetail("a", frame, heads)
	told := func(back bool) map[string]uint64 {
		s, _ := h.subscribe()
		defer h.unsubscribe(s)
		return h.watch(s, detailInterest{all: true}, back)
	}
	if at := told(true); at["a"] != 7 || len(at) != 1 {
		t.Errorf("a browser coming back is told %v, want a at 7", at)
	}
	if at := told(false); len(at) != 0 {
		t.Errorf("a new browser is told %v, want nothing", at)
	}
	h.mu.Lock()
	h.agents["a"].detailAtTS = time.Now().Add(-detailFresh)
	h.mu.Unlock()
	if at := told(true); len(at) != 0 {
		t.Errorf("told a position handed %v ago: %v", detailFresh, at)
	}
}
