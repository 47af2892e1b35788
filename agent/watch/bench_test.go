package watch_test

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
)

// BenchmarkWatchCost is the watcher's CPU for NIXL transfers: each
// operation reads 10,000 transfers (40,000 events, version 4) out of a
// full ring and decodes them, so ns/op over 1e9 is the share of one core
// the watcher needs at 10,000 transfers a second. The baseline in the same
// run copies the same ring bytes out of the mapping without decoding.
func BenchmarkWatchCost(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("rings are read on Linux")
	}
	var batch []watch.Raw
	for i := 0; i < 10_000; i++ {
		batch = append(batch, watchtest.Transfer("rx", 1<<20, 20, 500)...)
	}
	dir := b.TempDir()
	w, err := watchtest.NewWriter(dir, "engine", 4, 1<<16)
	if err != nil {
		b.Fatal(err)
	}
	r, err := watch.OpenRing(w.Path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	b.Run("drain+decode", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			if n, err := w.Push(batch...); err != nil || n != len(batch) {
				b.Fatalf("pushed %d: %v", n, err)
			}
			b.StartTimer()
			events, bad, err := r.Drain(1 << 17)
			if err != nil || bad != 0 || len(events) != len(batch) {
				b.Fatalf("drained %d (%d bad): %v", len(events), bad, err)
			}
		}
	})
	raw, err := os.ReadFile(w.Path)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("copy the same bytes", func(b *testing.B) {
		dst := make([]byte, len(batch)*watch.EventBytes(4))
		for b.Loop() {
			copy(dst, raw[watch.HeaderBytes:])
		}
	})
}

// BenchmarkWatchLatency is the time from a transfer's events landing in
// the ring to the watcher's observation, at two read intervals (NIXL adds
// its own flush period, 100 ms by default, before the events land).
func BenchmarkWatchLatency(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("rings are read on Linux")
	}
	for _, iv := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond} {
		b.Run(iv.String(), func(b *testing.B) {
			dir := b.TempDir()
			w, err := watchtest.NewWriter(dir, "engine", 4, 4096)
			if err != nil {
				b.Fatal(err)
			}
			seen := make(chan time.Time, 16)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go (&watch.Watcher{Dir: dir, Interval: iv}).Run(ctx, func(o watch.Observation) {
				if o.Kind == "transfer" {
					seen <- time.Now()
				}
			})
			time.Sleep(2 * iv)
			var total time.Duration
			rng := rand.New(rand.NewPCG(1, 2))
			for b.Loop() {
				time.Sleep(time.Duration(rng.Int64N(int64(iv)))) // land anywhere in the read period
				start := time.Now()
				w.Push(watchtest.Transfer("rx", 1<<20, 20, 500)...)
				total += (<-seen).Sub(start)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1e3, "ms-latency")
		})
	}
}
