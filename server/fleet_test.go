package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/eventlog"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// The fleet as a browser sees it, through the whole server (the app, its
// access rules, the hub): the hub's own fleet tests are server/live's.

// startReplica starts one kvscope serve (the whole server: the app, its
// access rules, the hub) on the shared event log, restartable.
func startReplica(t testing.TB, natsURL, addr string) *livetest.Replica {
	return livetest.StartReplica(t, natsURL, addr, func(ln net.Listener, nats string, replay uint64) func() {
		b, err := eventlog.Open(context.Background(), eventlog.Options{URLs: nats, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		srv := newServer(catalog(), serveOptions{Addr: ln.Addr().String(), Token: livetest.Token, Agent: "none", Bus: b, Replay: replay, Logf: func(string, ...any) {}}, nil)
		hs := newHTTPServer(srv.handler)
		go hs.Serve(ln)
		return func() { srv.hub.Close(); hs.Close(); b.Close() }
	})
}

// TestFleetBrowser: in Chromium, the live view on replica 2 shows the
// events of agents connected to replica 1 (through the shared JetStream
// log); replica 2 restarts meanwhile, the page reconnects and resumes from
// the log: in the end it has every event, with no sequence gap.
func TestFleetBrowser(t *testing.T) {
	ctx, _, _ := browser(t)
	const agents, perAgent, rate = 4, 600, 200
	n := livetest.StartNATS(t)
	r1 := startReplica(t, n.URL(), livetest.FreeAddr(t))
	r2 := startReplica(t, n.URL(), livetest.FreeAddr(t))
	openLivePanel(t, ctx, "http://"+r2.Addr+"/?view=flow")
	waitFor(t, ctx, "the live websocket opens", `!!document.querySelector('[data-testid="live-status"][data-state="open"]')`, 15*time.Second)
	actx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg, pubs sync.WaitGroup
	streamers := livetest.StartAgents(actx, &wg, &pubs, agents, perAgent, rate, "host%d/agent", r1.Addr)
	time.Sleep(time.Second)
	t.Log("restarting replica 2, the page's, with a history of 8 frames: the page must resume from the log")
	r2.Stop()
	r2.Replay = 8
	time.Sleep(500 * time.Millisecond)
	r2.Start()
	pubs.Wait()
	for _, st := range streamers {
		fctx, fcancel := context.WithTimeout(actx, 20*time.Second)
		if err := st.Flush(fctx); err != nil {
			t.Fatalf("%s: %v", st.Agent, err)
		}
		fcancel()
	}
	want := agents * perAgent
	waitFor(t, ctx, fmt.Sprintf("all %d events in the page", want),
		fmt.Sprintf(`document.querySelector('[data-testid="live-events"]')?.dataset.count == '%d'`, want), 30*time.Second)
	gaps, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-gaps"]').dataset.count`))
	if err != nil || gaps != "0" {
		t.Errorf("the page counts %s events missed (%v), want 0", gaps, err)
	}
	cancel()
	wg.Wait()
}

// TestFleetView: in Chromium, 25 agents stream (more than the page draws
// unasked): the fleet table lists all 25 with their rates, the page
// subscribes to none of their batches until a row is clicked, then draws
// that agent's bands only; the slowest transfers are listed fleet-wide.
func TestFleetView(t *testing.T) {
	ctx, _, _ := browser(t)
	n := livetest.StartNATS(t)
	r := startReplica(t, n.URL(), livetest.FreeAddr(t))
	actx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 25 {
		st := &stream.Streamer{Agent: fmt.Sprintf("gpu%02d/agent", i), URL: "ws://" + r.Addr + "/ws/agent", Token: livetest.Credential(fmt.Sprintf("gpu%02d/agent", i))}
		wg.Add(2)
		go func() { defer wg.Done(); st.Run(actx) }()
		go func() {
			defer wg.Done()
			st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: fmt.Sprintf("gpu%02d", i), Role: "both", Backend: "host", GPUs: []event.GPU{}}})
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for j := 2; actx.Err() == nil; j++ {
				select {
				case <-actx.Done():
					return
				case <-tick.C:
				}
				e := livetest.FleetEvent(j)
				if e.Done != nil {
					e.Done.TransferUS = float64(100*i + j%7) // agent 24 is the slowest
				}
				st.Publish(e)
			}
		}()
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+r.Addr+"/?view=flow")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "25 agents in the fleet table", `document.querySelectorAll('[data-testid="fleet-agent"]').length == 25`, 30*time.Second)
	waitFor(t, ctx, "rates in the fleet table",
		`[...document.querySelectorAll('[data-testid="fleet-agent"]')].every(r => Number(r.children[6].textContent.replace(/,/g, '')) > 0)`, 15*time.Second)
	time.Sleep(time.Second)
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="live-band"]').length`)); err != nil || n != 0 {
		t.Errorf("%d bands drawn before any agent was picked (%v): a page should not take every agent's batches", n, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`[data-testid="fleet-agent"][data-agent="gpu03/agent"]`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "gpu03's bands", `document.querySelectorAll('.live-agent[data-agent="gpu03/agent"] [data-testid="live-band"]').length > 0`, 20*time.Second)
	others, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll('.live-agent')].filter(d => d.dataset.agent != 'gpu03/agent').length`))
	if others != 0 {
		t.Errorf("%d other agents drawn after picking gpu03", others)
	}
	waitFor(t, ctx, "the slowest transfers, fleet-wide", `document.querySelector('[data-testid="fleet-slowest"] td')?.textContent == 'gpu24/agent'`, 15*time.Second)
	shot, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	artifact(t, "fleet", shot)
}

// TestMain lets a test run this test binary as kvscope itself
// (KVSCOPE_SERVER_MAIN=1): a real kvscope serve process.
func TestMain(m *testing.M) {
	if os.Getenv("KVSCOPE_SERVER_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer a process writes to while a test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeWithoutItsLog: kvscope serve --nats naming a server nobody runs
// says so, naming it, and serves the app and the API all the same.
func TestServeWithoutItsLog(t *testing.T) {
	dead := "nats://" + livetest.FreeAddr(t)
	addr := livetest.FreeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--addr", addr, "--agent", "none", "--nats", dead)
	cmd.Env = append(os.Environ(), "KVSCOPE_SERVER_MAIN=1")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/api/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/api/models: %d", resp.StatusCode)
			}
			break
		}
		if i == 100 {
			t.Fatalf("the server did not come up: %s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "event log unavailable") || !strings.Contains(out.String(), dead) {
		t.Errorf("the log does not say the event log at %s is unavailable:\n%s", dead, out.String())
	}
}

// TestFleetBrowserToldLostDetail: in Chromium, the live view draws an
// agent's detail. While the agent's samples say its detail got no further
// than what the page has, the page counts nothing missed; when the agent's
// last 50 detail events never leave it (numbered, not sent) and no more
// detail follows, its next sample tells the page, which shows the 50
// missed within event.DetailGrace and a redraw.
func TestFleetBrowserToldLostDetail(t *testing.T) {
	ctx, _, _ := browser(t)
	n := livetest.StartNATS(t)
	r := startReplica(t, n.URL(), livetest.FreeAddr(t))
	openLivePanel(t, ctx, "http://"+r.Addr+"/?view=flow")
	waitFor(t, ctx, "the live websocket opens", `!!document.querySelector('[data-testid="live-status"][data-state="open"]')`, 15*time.Second)
	actx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	const name = "gpu1/agent"
	st := livetest.StartSplitAgent(actx, &wg, r.Addr, name)
	for deadline := time.Now().Add(10 * time.Second); !st.DetailOn(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the page draws the agent, but the agent was never told to send its detail")
		}
	}
	sample := func(i int) {
		st.Publish(event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: 1, Requests: i}})
	}
	for i := 1; i <= 3; i++ {
		livetest.PublishRequest(st, i)
	}
	sample(3)
	waitFor(t, ctx, "the agent's bands and its sample", `document.querySelectorAll('[data-testid="live-band"]').length > 0 &&
		Number(document.querySelector('[data-testid="live-events"]')?.dataset.count || 0) > 3`, 15*time.Second)
	time.Sleep(event.DetailGrace + 500*time.Millisecond)
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="live-detail-gaps"]').length`)); n != 0 {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('[data-testid="live-detail-gaps"]').textContent`))
		t.Fatalf("nothing was lost, yet the page says: %s", text)
	}
	st.SkipDetail(50) // numbered while drawn, never sent: a lost tail
	sample(4)
	waitFor(t, ctx, "the page tells the 50 lost", `document.querySelector('[data-testid="live-detail-gaps"]')?.dataset.count === '50'`, 10*time.Second)
}
