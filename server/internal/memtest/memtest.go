// Package memtest measures what code holds on the heap while it runs, for
// the tests that hold the server's memory estimates above it (admission)
// or its memory below a bound (streaming a recording).
package memtest

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// heapObjects is the heap's objects: live ones and garbage not collected
// yet.
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// PeakGrowth runs run and returns the largest growth of the heap's
// objects over what the heap held before it (after two collections, which
// empty the pools too), sampled every while run runs and once when it
// returns.
func PeakGrowth(every time.Duration, run func()) int64 {
	runtime.GC()
	runtime.GC()
	base := heapObjects()
	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), heapObjects()-base))
			select {
			case <-done:
				return
			case <-time.After(every):
			}
		}
	}()
	run()
	close(done)
	<-sampled
	peak.Store(max(peak.Load(), heapObjects()-base))
	return peak.Load()
}
