package live

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live/livetest"
)

// countingSub is a benchmark's browser stand-in: it counts the events it
// receives (once per agent and sequence) and samples their age, from the
// agent's publish to here.
type countingSub struct {
	events atomic.Int64
	mu     sync.Mutex
	last   map[string]uint64
	ages   []time.Duration
	since  uint64 // the last stream message seen: where a reconnection resumes
	// away ends the current connection; the next waits until back
	away context.CancelFunc
	back time.Time
}

// disconnect drops the subscriber's connection and keeps it away for d
// (a browser tab losing its network): it then resumes from the log.
func (s *countingSub) disconnect(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.back = time.Now().Add(d)
	if s.away != nil {
		s.away()
	}
}

func (s *countingSub) run(ctx context.Context, addr string) {
	s.last = map[string]uint64{}
	for ctx.Err() == nil {
		u := "ws://" + addr + "/ws/live"
		s.mu.Lock()
		if s.since > 0 {
			u += fmt.Sprintf("?since=%d", s.since)
		}
		wait := time.Until(s.back)
		cctx, away := context.WithCancel(ctx)
		s.away = away
		s.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		conn, _, err := websocket.Dial(cctx, u, nil)
		if err != nil {
			away()
			time.Sleep(50 * time.Millisecond)
			continue
		}
		conn.SetReadLimit(event.MaxFrameBytes + 1024)
		var in messageReader
		for {
			data, err := in.read(cctx, conn)
			if err != nil {
				break
			}
			events, err := event.Peek(data) // the fields it counts, as a browser reads them
			if err != nil {                 // the history header, a fleet summary
				continue
			}
			now := time.Now()
			s.mu.Lock()
			for _, e := range events {
				s.since = max(s.since, e.Stream)
				if e.Seq > s.last[e.Agent] {
					s.last[e.Agent] = e.Seq
					s.events.Add(1)
					if e.Seq%16 == 0 {
						s.ages = append(s.ages, now.Sub(time.Unix(0, e.TS)))
					}
				}
			}
			s.mu.Unlock()
		}
		conn.CloseNow()
		away()
	}
}

// fleetLoad is one benchmark run: agents publish perAgent events each to
// the replicas' /ws/agent (round robin), paced by the acknowledgements,
// and every subscriber should receive them all. It returns the events per
// second stored and delivered (from the first publish to the last
// subscriber done), the p99 age at the subscribers, the heap in use and
// the least fraction of the events a subscriber received.
func fleetLoad(b *testing.B, replicas []string, agents, perAgent, subsPer, perSecond int, during func(subs []*countingSub)) (rate float64, p99 time.Duration, heapMiB, delivered float64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var subs []*countingSub
	for _, addr := range replicas {
		for range subsPer {
			s := &countingSub{}
			subs = append(subs, s)
			go s.run(ctx, addr)
		}
	}
	time.Sleep(300 * time.Millisecond) // subscribed
	start := time.Now()
	var wg sync.WaitGroup
	for i := range agents {
		st := &stream.Streamer{Agent: fmt.Sprintf("host%03d/agent", i), URL: "ws://" + replicas[i%len(replicas)] + "/ws/agent", Token: livetest.Credential(fmt.Sprintf("host%03d/agent", i))}
		go st.Run(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.Publish(event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: st.Agent, Role: "both", GPUs: []event.GPU{}}})
			// Paced, each agent publishes perSecond events a second: every
			// 5 ms, the events due by then (a ticker per event would cost
			// more than the events).
			var tick <-chan time.Time
			began, due := time.Now(), 0
			if perSecond > 0 {
				t := time.NewTicker(5 * time.Millisecond)
				defer t.Stop()
				tick = t.C
			}
			for j := 2; j <= perAgent; j++ {
				for tick != nil && due < j {
					<-tick
					due = int(time.Since(began).Seconds() * float64(perSecond))
				}
				for st.Pending() > 4096 {
					time.Sleep(time.Millisecond)
				}
				st.Publish(livetest.FleetEvent(j))
			}
			fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
			defer fcancel()
			if err := st.Flush(fctx); err != nil || st.Dropped() > 0 {
				b.Errorf("%s: %v, %d dropped", st.Agent, err, st.Dropped())
			}
		}()
	}
	if during != nil {
		during(subs)
	}
	wg.Wait()
	want := int64(agents * perAgent)
	// Wait for every subscriber to have everything, or to get nothing more
	// for a while (the in-memory hub drops a slow browser's frames by
	// design: 2 s; on the log, recovering from faults takes longer: 30 s).
	stall := 30 * time.Second
	if len(replicas) == 1 {
		stall = 2 * time.Second
	}
	total := func() (sum, least int64) {
		least = want
		for _, s := range subs {
			n := s.events.Load()
			sum, least = sum+n, min(least, n)
		}
		return sum, least
	}
	last, lastAt := int64(-1), time.Now()
	for {
		sum, least := total()
		if least == want || time.Since(lastAt) > stall {
			break
		}
		if sum != last {
			last, lastAt = sum, time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if _, least := total(); least < want {
		elapsed -= stall // the wait for nothing
		delivered = float64(least) / float64(want)
	} else {
		delivered = 1
	}
	// The age at the subscribers that stayed (one sent away for 10 s
	// receives what it missed 10 s late, by design).
	var ages []time.Duration
	for _, s := range subs {
		s.mu.Lock()
		if s.back.IsZero() {
			ages = append(ages, s.ages...)
		}
		s.mu.Unlock()
	}
	sort.Slice(ages, func(i, j int) bool { return ages[i] < ages[j] })
	if len(ages) > 0 {
		p99 = ages[len(ages)*99/100]
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(want) / elapsed.Seconds(), p99, float64(ms.HeapInuse) / (1 << 20), delivered
}

// BenchmarkFleet: 100 agents (each its own connection and name, a mix of
// descriptor batches, transfers and samples) through the hub (served as
// kvscope serve mounts it) to four subscribers: "memory" is one replica with the in-memory hub, the
// baseline; "jetstream" is two replicas on one NATS JetStream log (file
// storage), every subscriber receiving every agent's events. Unpaced, the
// agents publish as fast as the acknowledgements let them (throughput;
// the age is then the agents' own queueing); "-paced" runs 20,000 events
// a second in all, for the age of an event at a subscriber under load;
// "jetstream-faults" restarts a replica and the NATS server mid-run, and
// every subscriber must still get every event.
// Everything runs in this one process on loopback: heap-MiB covers the
// NATS server, both replicas, the agents and the subscribers.
func BenchmarkFleet(b *testing.B) {
	const agents, perAgent = 100, 2000
	modes := []string{"memory", "jetstream", "memory-paced-20k", "jetstream-paced-10k", "jetstream-paced-20k", "jetstream-paced-40k",
		"jetstream-paced-60k", "memory-paced-60k", "jetstream-faults-paced-20k"}
	for _, mode := range modes {
		b.Run(mode, func(b *testing.B) {
			perSecond, n := 0, perAgent
			if _, k, ok := strings.Cut(mode, "-paced-"); ok { // k thousand events a second in all, for 5 s
				thousands, err := strconv.Atoi(strings.TrimSuffix(k, "k"))
				if err != nil {
					b.Fatal(err)
				}
				perSecond = thousands * 1000 / agents
				n = 5 * perSecond
				if strings.Contains(mode, "-faults") { // long enough for a subscriber 10 s away
					n = 15 * perSecond
				}
			}
			for range b.N {
				var addrs []string
				var during func([]*countingSub)
				switch strings.Split(mode, "-")[0] {
				case "memory":
					l := startServer(b, "127.0.0.1:0", serverOptions{token: livetest.Token})
					defer l.stop()
					addrs = []string{l.addr}
				case "jetstream":
					n := livetest.StartNATS(b)
					r1, r2 := startReplica(b, n.URL(), livetest.FreeAddr(b)), startReplica(b, n.URL(), livetest.FreeAddr(b))
					addrs = []string{r1.Addr, r2.Addr}
					if strings.Contains(mode, "-faults") {
						// While the agents publish: a subscriber goes away for
						// 10 s, replica 1 restarts, then the NATS server (file
						// storage); nothing may be lost.
						during = func(subs []*countingSub) {
							time.Sleep(time.Second)
							subs[0].disconnect(10 * time.Second)
							r1.Stop()
							time.Sleep(300 * time.Millisecond)
							r1.Start()
							time.Sleep(time.Second)
							n.Stop()
							time.Sleep(300 * time.Millisecond)
							n.Start()
						}
					}
				}
				subsPer := 4 / len(addrs) // four subscribers in all
				rate, p99, heap, delivered := fleetLoad(b, addrs, agents, n, subsPer, perSecond, during)
				if delivered < 1 && strings.HasPrefix(mode, "jetstream") {
					b.Errorf("a subscriber got %.2f%% of the events: the log lost some", 100*delivered)
				}
				b.ReportMetric(100*delivered, "least-delivered-%")
				b.ReportMetric(rate, "events/s")
				b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(heap, "heap-MiB")
				b.ReportMetric(0, "ns/op")
			}
		})
	}
}
