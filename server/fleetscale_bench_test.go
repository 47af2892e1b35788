package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// BenchmarkFleetScale is the fleet at scale (issue 29): simulated agents,
// each its own websocket and name, run requests of the default scenario's
// shape (a start, 192 descriptor batches, a transfer_done) and a sample a
// second, to two kvscope serve replicas (this test binary run as kvscope,
// each its own process) on one NATS server with JetStream in a process of
// its own (nats-server built from the Go module), so that each one's CPU
// and memory is measured apart. Four browsers watch the fleet (every
// summary, no detail: /ws/live?detail=) and one drills into three agents
// (?detail=a,b,c). "split" is this release: detail on demand, agents on
// websockets to the replicas; "split-nats" is the same with the agents on
// NATS (kvscope-agent --nats), so that the replicas only read the stream
// and serve browsers; "store-all" is the path before the split at the same
// load: every event stored and sent to every browser. The load is
// KVSCOPE_FLEET_AGENTS agents (1,000) at KVSCOPE_FLEET_RPS requests a
// second each (20) for KVSCOPE_FLEET_SECONDS (10); KVSCOPE_FLEET_MODES
// picks the sub-benchmarks (split,split-nats,store-all).
//
//	go test ./server/... -run '^$' -bench FleetScale -benchtime 1x
func BenchmarkFleetScale(b *testing.B) {
	agents, rps, seconds := envInt("KVSCOPE_FLEET_AGENTS", 1000), envInt("KVSCOPE_FLEET_RPS", 20), envInt("KVSCOPE_FLEET_SECONDS", 10)
	natsBin := filepath.Join(b.TempDir(), "nats-server")
	if out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		b.Fatalf("building nats-server: %v\n%s", err, out)
	}
	modes := strings.Split(envString("KVSCOPE_FLEET_MODES", "split,split-nats,store-all"), ",")
	for _, mode := range modes {
		b.Run(fmt.Sprintf("%s/agents-%d/rps-%d", mode, agents, rps), func(b *testing.B) {
			for range b.N {
				fleetScale(b, natsBin, mode, agents, rps, seconds)
			}
		})
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// fleetToken is the replicas' token (kvscope serve wants 16 characters).
const fleetToken = "fleet-scale-token-0123456789"

// proc is a process whose CPU and peak RSS are sampled.
type proc struct {
	cmd     *exec.Cmd
	peakRSS atomic.Int64 // bytes
}

func startProc(b *testing.B, env []string, name string, args ...string) *proc {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if os.Getenv("KVSCOPE_FLEET_LOG") != "" { // the processes' own logs
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &proc{cmd: cmd}
	b.Cleanup(func() {
		// SIGTERM first, so that a replica writes its profile; then kill.
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return p
}

// cpu is the process's user and system CPU so far.
func (p *proc) cpu() time.Duration { return pidCPU(p.cmd.Process.Pid) }

// pidCPU is a process's user and system CPU so far, from /proc.
func pidCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
}

// sampleRSS keeps the process's peak RSS.
func (p *proc) sampleRSS() {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if kb*1024 > p.peakRSS.Load() {
				p.peakRSS.Store(kb * 1024)
			}
		}
	}
}

// scaleSub is a browser stand-in: it counts the summaries it receives
// (once per agent and seq) and the detail (dseq), with their ages from the
// agent's publish (transfer_done and every 16th batch).
type scaleSub struct {
	url   string
	mu    sync.Mutex
	last  map[string]uint64
	dring *event.Ring // the detail's sequences and gaps, counted as the app counts them
	// Per agent: the last dseq received, the last a sample said was
	// numbered, and the positions told (for the log, when detail is short).
	gotDetail, saidDetail map[string]uint64
	toldAt                map[string][]uint64
	// For the log, when summaries are short: how the last connection
	// ended, the stream messages told gone, where it resumes from, and
	// the messages read on the connection now open (-1: none open).
	lastEnd    string
	gone       uint64
	since      uint64
	readNow    int
	summaries  int64
	detail     int64
	resumes    int // connections after the first (fell behind, resumed ?since=)
	sumAges    []time.Duration
	detailAges []time.Duration
}

func (s *scaleSub) run(ctx context.Context) {
	s.last, s.dring = map[string]uint64{}, event.NewRing(1)
	s.gotDetail, s.saidDetail, s.toldAt = map[string]uint64{}, map[string]uint64{}, map[string][]uint64{}
	var since uint64
	for ctx.Err() == nil {
		u := s.url
		if since > 0 {
			u += fmt.Sprintf("&since=%d", since)
		}
		conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + fleetToken}}})
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if since > 0 {
			s.mu.Lock()
			s.resumes++
			s.mu.Unlock()
		}
		conn.SetReadLimit(event.MaxFrameBytes + 1024)
		s.mu.Lock()
		s.readNow = 0
		s.mu.Unlock()
		for {
			_, data, err := conn.Read(ctx)
			s.mu.Lock()
			if err != nil {
				s.lastEnd, s.readNow, s.since = err.Error(), -1, since
			} else {
				s.readNow++
			}
			s.mu.Unlock()
			if err != nil {
				break
			}
			heads, err := event.Peek(data)
			if err != nil { // the history header, the fleet summary
				if h, ok := event.ReadHistory(data); ok { // where detail stood: missed since, or starts
					s.mu.Lock()
					s.gone += h.Gone
					for agent, d := range h.DetailAt {
						s.toldAt[agent] = append(s.toldAt[agent], d)
						s.dring.DetailAt(agent, d)
					}
					s.mu.Unlock()
				}
				continue
			}
			now := time.Now()
			s.mu.Lock()
			s.dring.DetailDue(now, event.DetailGrace) // as the app does as it draws
			for _, h := range heads {
				since = max(since, h.Stream)
				if h.Kind == event.Sample { // how far the agent's detail got: a lost tail is told
					if e, err := h.Decode(); err == nil {
						if s.dring.Add(e) && e.Sample.DetailThrough > 0 {
							s.saidDetail[e.Agent] = e.Sample.DetailThrough
						}
					}
				}
				if h.Detail != 0 {
					if s.dring.Add(event.Event{Agent: h.Agent, Detail: h.Detail, Kind: h.Kind}) {
						s.gotDetail[h.Agent] = h.Detail
						s.detail++
						if h.Detail%16 == 0 {
							s.detailAges = append(s.detailAges, now.Sub(time.Unix(0, h.TS)))
						}
					}
					continue
				}
				if h.Seq > s.last[h.Agent] {
					s.last[h.Agent] = h.Seq
					s.summaries++
					if h.Kind == event.TransferDone {
						s.sumAges = append(s.sumAges, now.Sub(time.Unix(0, h.TS)))
					}
				}
			}
			s.mu.Unlock()
		}
		conn.CloseNow()
	}
}

func p99(ages []time.Duration) float64 {
	if len(ages) == 0 {
		return 0
	}
	sort.Slice(ages, func(i, j int) bool { return ages[i] < ages[j] })
	return float64(ages[len(ages)*99/100].Microseconds()) / 1000
}

// fleetScale is one run.
func fleetScale(b *testing.B, natsBin, mode string, agents, rps, seconds int) {
	split, direct := mode != "store-all", mode == "split-nats"
	if mode != "split" && mode != "split-nats" && mode != "store-all" {
		b.Fatalf("KVSCOPE_FLEET_MODES: %q is none of split, split-nats, store-all", mode)
	}
	natsAddr := livetest.FreeAddr(b)
	host, port, _ := strings.Cut(natsAddr, ":")
	conf := filepath.Join(b.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, []byte("max_payload: 8MB\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	np := startProc(b, nil, natsBin, "-a", host, "-p", port, "-js", "-sd", b.TempDir(), "-c", conf)
	natsURL := "nats://" + natsAddr
	var nc *nats.Conn
	for i := 0; ; i++ {
		var err error
		if nc, err = nats.Connect(natsURL); err == nil {
			break
		}
		if i == 100 {
			b.Fatalf("nats-server did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer nc.Close()
	var replicas []*proc
	var addrs []string
	for i := range 2 {
		addr := livetest.FreeAddr(b)
		env := []string{"KVSCOPE_SERVER_MAIN=1"}
		if dir := os.Getenv("KVSCOPE_FLEET_PROFILE"); dir != "" { // each replica's CPU profile, written as it stops
			env = append(env, CPUProfileEnv+"="+filepath.Join(dir, fmt.Sprintf("%s-replica-%d.pprof", strings.ReplaceAll(b.Name(), "/", "-"), i)))
		}
		replicas = append(replicas, startProc(b, env, os.Args[0], "serve", "--addr", addr, "--agent", "none",
			"--token", fleetToken, "--nats", natsURL, "--agent-events-per-sec", "0", "--agent-bytes-per-sec", "0"))
		addrs = append(addrs, addr)
	}
	for _, addr := range addrs {
		for i := 0; ; i++ {
			if resp, err := http.Get("http://" + addr + "/api/models"); err == nil {
				resp.Body.Close()
				break
			}
			if i == 200 {
				b.Fatalf("replica %s did not start", addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	name := func(i int) string { return fmt.Sprintf("host%04d/agent", i) }
	drilled := map[string]bool{name(0): true, name(1): true, name(2): true}
	// Detail that reaches NATS, by whether a browser draws its agent.
	var unwatched, watched atomic.Int64
	nc.Subscribe(event.DetailPrefix+">", func(m *nats.Msg) {
		if agent, _ := event.AgentOfDetail(m.Subject); drilled[agent] {
			watched.Add(1)
		} else {
			unwatched.Add(1)
		}
	})
	nc.Flush()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var subs []*scaleSub
	for i := range 4 {
		subs = append(subs, &scaleSub{url: "ws://" + addrs[i%2] + "/ws/live?detail="})
	}
	drill := &scaleSub{url: "ws://" + addrs[1] + "/ws/live?detail=" + name(0) + "," + name(1) + "," + name(2)}
	var wg sync.WaitGroup
	for _, s := range append(subs, drill) {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	time.Sleep(500 * time.Millisecond)

	streamers := make([]*stream.Streamer, agents)
	for i := range streamers {
		wg.Add(1)
		if direct { // its own NATS connection, as kvscope-agent --nats
			n := &stream.NATS{Streamer: stream.Streamer{Agent: name(i), SplitDetail: true}, URLs: natsURL,
				Auth: stream.NATSAuth{User: name(i), Password: scaleCredential(name(i))}}
			streamers[i] = &n.Streamer
			go func() { defer wg.Done(); n.Run(ctx) }()
			continue
		}
		streamers[i] = &stream.Streamer{Agent: name(i), URL: "ws://" + addrs[i%2] + "/ws/agent", Token: scaleCredential(name(i)), SplitDetail: split}
		go func() { defer wg.Done(); streamers[i].Run(ctx) }()
	}
	time.Sleep(time.Second) // connected, and the drilled agents told
	cpu0 := []time.Duration{replicas[0].cpu(), replicas[1].cpu(), np.cpu(), pidCPU(os.Getpid())}
	start := time.Now()
	var pubs sync.WaitGroup
	var requests atomic.Int64
	for _, st := range streamers {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: st.Agent, Role: "both", Backend: "host", GPUs: []event.GPU{}}})
			tick := time.NewTicker(time.Second / time.Duration(rps))
			defer tick.Stop()
			for i := 1; i <= rps*seconds; i++ {
				<-tick.C
				livetest.PublishRequest(st, i)
				requests.Add(1)
				if i%rps == 0 {
					st.Publish(event.Event{Kind: event.Sample, Sample: &event.SampleData{GBps: 27.9, P50US: 800, P99US: 900, Requests: i}})
				}
			}
		}()
	}
	sampling := time.NewTicker(200 * time.Millisecond)
	stopSampling := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopSampling:
				return
			case <-sampling.C:
				for _, p := range replicas {
					p.sampleRSS()
				}
			}
		}
	}()
	pubs.Wait()
	loadTime := time.Since(start)
	// Every summary stored: each agent's last seq acknowledged (bounded).
	want := int64(0)
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	for _, st := range streamers {
		st.Flush(fctx)
		want += int64(st.Acked())
	}
	fcancel()
	least := func() int64 {
		n := want
		for _, s := range subs {
			s.mu.Lock()
			n = min(n, s.summaries)
			s.mu.Unlock()
		}
		return n
	}
	for deadline := time.Now().Add(60 * time.Second); least() < want && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	elapsed := time.Since(start)
	cpu1 := []time.Duration{replicas[0].cpu(), replicas[1].cpu(), np.cpu(), pidCPU(os.Getpid())}
	close(stopSampling)
	// The drilled-in detail shares its browser's queue with every summary:
	// behind a backlog it comes late. Wait (bounded, outside the CPU
	// figures) until that browser has every summary too and its detail,
	// received or told missed, has stopped coming for longer than a
	// sample's word takes to be counted (event.DetailGrace and a poll:
	// the drill browser counts as it reads and at each poll here).
	drilledSoFar := func() (int64, int64) {
		drill.mu.Lock()
		defer drill.mu.Unlock()
		drill.dring.DetailDue(time.Now(), event.DetailGrace) // as the app does on its draw tick, messages or not
		return drill.summaries, drill.detail + int64(drill.dring.DetailGaps)
	}
	n, still := int64(-1), 0
	stable := int((event.DetailGrace + 2*time.Second) / (500 * time.Millisecond))
	for deadline := time.Now().Add(60 * time.Second); still < stable && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		sums, m := drilledSoFar()
		if m != n || sums < want {
			n, still = m, 0
		} else {
			still++
		}
	}
	cancel()

	var sumAges []time.Duration
	for _, s := range subs {
		s.mu.Lock()
		sumAges = append(sumAges, s.sumAges...)
		s.mu.Unlock()
	}
	drill.mu.Lock()
	detailP99, detailEvents, detailGaps, drillResumes, drillSums := p99(drill.detailAges), drill.detail, drill.dring.DetailGaps, drill.resumes, drill.summaries
	drill.mu.Unlock()
	reqs := float64(requests.Load())
	perK := func(d time.Duration) float64 {
		return d.Seconds() / (reqs / loadTime.Seconds() / 1000) / elapsed.Seconds()
	} // cores per 1,000 requests/s
	rc := []float64{(cpu1[0] - cpu0[0]).Seconds() / elapsed.Seconds(), (cpu1[1] - cpu0[1]).Seconds() / elapsed.Seconds()}
	if least() < want { // who is short, and how often it resumed: late or lost
		for i, s := range subs {
			s.mu.Lock()
			b.Logf("fleet browser %d: %d of %d summaries, %d resumes, %d told gone; last connection ended %q resuming after %d; messages on the open one %d",
				i, s.summaries, want, s.resumes, s.gone, s.lastEnd, s.since, s.readNow)
			s.mu.Unlock()
		}
	}
	b.ReportMetric(float64(least())/elapsed.Seconds(), "summaries/s")
	b.ReportMetric(reqs/loadTime.Seconds(), "requests/s")
	b.ReportMetric(p99(sumAges), "summary-p99-ms")
	b.ReportMetric(detailP99, "detail-p99-ms")
	b.ReportMetric(100*float64(least())/float64(max(want, 1)), "delivered-%")
	b.ReportMetric(float64(max(replicas[0].peakRSS.Load(), replicas[1].peakRSS.Load()))/(1<<20), "replica-rss-MiB")
	b.ReportMetric(max(rc[0], rc[1]), "replica-cores")
	b.ReportMetric((cpu1[2]-cpu0[2]).Seconds()/elapsed.Seconds(), "nats-cores")
	b.ReportMetric(perK(cpu1[0]-cpu0[0]+cpu1[1]-cpu0[1]), "replicas-cores-per-1k-req/s")
	b.ReportMetric(perK(cpu1[2]-cpu0[2]), "nats-cores-per-1k-req/s")
	// The load itself (every agent, every browser: this process), so that a
	// saturated machine is seen as one.
	b.ReportMetric((cpu1[3]-cpu0[3]).Seconds()/elapsed.Seconds(), "load-cores")
	b.ReportMetric(float64(unwatched.Load()), "unwatched-detail-msgs")
	b.ReportMetric(float64(watched.Load()), "drilled-detail-msgs")
	b.ReportMetric(float64(detailEvents), "drilled-detail-events")
	// Of every detail event the drilled agents made (a start and the
	// batches of each request), what reached the browser.
	made := len(drilled) * rps * seconds * (livetest.RequestBatches + 1)
	b.ReportMetric(100*float64(detailEvents)/float64(made), "drilled-detail-%")
	b.ReportMetric(100*float64(detailEvents+int64(detailGaps))/float64(made), "drilled-detail-told-%") // received, or told missed
	if detailEvents+int64(detailGaps) < int64(made) {
		drill.mu.Lock()
		for a := range drilled {
			b.Logf("drilled %s: last dseq received %d, last said by a sample %d, positions told %v", a, drill.gotDetail[a], drill.saidDetail[a], drill.toldAt[a])
		}
		drill.mu.Unlock()
	}
	b.ReportMetric(float64(drillResumes), "drill-resumes")
	b.ReportMetric(100*float64(drillSums)/float64(max(want, 1)), "drill-summaries-%") // the drill browser caught up by the end
	b.ReportMetric(float64(detailGaps), "drilled-detail-gaps")
	b.ReportMetric(0, "ns/op")
	wg.Wait()
}

// scaleCredential is agent's credential from the replicas' token.
func scaleCredential(agent string) string {
	cred, _ := event.IssueCredential(fleetToken, agent)
	return cred
}
