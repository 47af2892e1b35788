package live

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// batchEvent is a typical descriptor-batch event.
func batchEvent() event.Event {
	return event.Event{Kind: event.DescBatch, Batch: &event.BatchData{Request: "req-1", PRank: 1, DRank: 3, PGroup: 0, DGroup: 1,
		Layer: "model.layers.17.self_attn", Kind: "sliding", Descs: 64, Bytes: 262144, StartNS: 1000, EndNS: 9000, Timing: event.Measured}}
}

// BenchmarkLiveEvents measures events from an agent's streamer through
// the hub to a /ws/live subscriber over loopback websockets:
// events per second when the agent publishes as fast as it can, and the
// publish-to-receive latency when it publishes 10,000 events a second in
// bursts of 100. The baseline in the same run is the JSON codec alone
// (encode and decode frames of 512 events), the work the pipeline cannot
// avoid.
func BenchmarkLiveEvents(b *testing.B) {
	b.Run("pipeline", func(b *testing.B) { livePipeline(b, 0) })
	b.Run("pipeline-paced", func(b *testing.B) { livePipeline(b, 100) })
	b.Run("codec", func(b *testing.B) {
		frame := make([]event.Event, 512)
		for i := range frame {
			frame[i] = batchEvent()
			frame[i].V, frame[i].Agent, frame[i].Seq, frame[i].TS = 1, "bench", uint64(i+1), 1
		}
		for i := 0; i < b.N; i += len(frame) { // one operation is one event
			data, err := event.EncodeFrame(frame)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := event.DecodeFrame(data); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// livePipeline publishes b.N events, in bursts of burst every 10 ms (all
// at once when burst is 0), and waits for the subscriber to get them all.
func livePipeline(b *testing.B, burst int) {
	l := startLive(b, "127.0.0.1:0", "tok", nil)
	defer l.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+l.addr+"/ws/live", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(16 << 20)
	var mu sync.Mutex
	var lat []time.Duration
	got := make(chan struct{})
	go func() {
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			now := time.Now().UnixNano()
			if _, ok := event.HistoryCount(data); ok {
				continue
			}
			if _, ok := event.ParseFleet(data); ok {
				continue // the fleet summary
			}
			evs, err := event.DecodeFrame(data)
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			for _, e := range evs {
				lat = append(lat, time.Duration(now-e.TS))
			}
			n := len(lat)
			mu.Unlock()
			if n == b.N {
				close(got)
				return
			}
		}
	}()
	st := &stream.Streamer{Agent: "bench", URL: "ws://" + l.addr + "/ws/agent", Token: credFor("tok", "bench"), QueueSize: b.N + 1}
	go st.Run(ctx)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.Publish(batchEvent())
		if burst > 0 && (i+1)%burst == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	select {
	case <-got:
	case <-time.After(60 * time.Second):
		b.Fatalf("the subscriber got %d of %d events", len(lat), b.N)
	}
	b.StopTimer()
	if d := st.Dropped(); d != 0 {
		b.Fatalf("the agent dropped %d events", d)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
