package live

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
)

// DefaultRecordQueue is the events that may wait for the recording's
// file (Options.RecordQueue): about a second of a busy agent's events.
const DefaultRecordQueue = 4096

const (
	// recordQueueBytes bounds the bytes of the events waiting for the
	// file, whatever their number.
	recordQueueBytes = 32 << 20
	// recordBatchBytes is about the most one write carries: what waits is
	// written in as few writes as that allows.
	recordBatchBytes = 256 << 10
	// recordDrain is how long closing waits for the file to take what
	// waits.
	recordDrain = 5 * time.Second
)

// recorder writes the recording (kvscope serve --record: one event's
// JSON a line) from a goroutine of its own, so that the hub, which
// queues every stored event for it while holding the lock agents and
// browsers wait on, never waits for a file. Its queue is bounded in
// events and bytes; an event that finds it full is dropped, not waited
// for, and counted (kvscope_hub_record_dropped_total): a recording is a
// history, so what is already queued is kept in order and the newest
// event goes. A failed write is logged (once until writes work again)
// and its events counted (kvscope_hub_record_errors_total). A nil
// recorder records nothing.
type recorder struct {
	w       io.Writer
	queue   chan []byte  // encoded events, oldest first
	queued  atomic.Int64 // bytes in queue
	metrics *metrics.Registry
	logf    func(format string, args ...any)

	closing   chan struct{} // closed by close: write what waits, then stop
	done      chan struct{} // closed when the writer has stopped
	closeOnce sync.Once
}

// newRecorder starts a recorder writing to w, with room for depth events
// (0: DefaultRecordQueue).
func newRecorder(w io.Writer, depth int, reg *metrics.Registry, logf func(string, ...any)) *recorder {
	if depth <= 0 {
		depth = DefaultRecordQueue
	}
	r := &recorder{w: w, queue: make(chan []byte, depth), metrics: reg, logf: logf, closing: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// add queues an encoded event for the file. It never blocks: a full
// queue (or a closed recorder) drops the event and counts it. raw is not
// modified.
func (r *recorder) add(raw []byte) {
	if r == nil {
		return
	}
	select {
	case <-r.closing:
		r.drop(1)
		return
	default:
	}
	if r.queued.Add(int64(len(raw))) > recordQueueBytes {
		r.queued.Add(-int64(len(raw)))
		r.drop(1)
		return
	}
	select {
	case r.queue <- raw:
	default:
		r.queued.Add(-int64(len(raw)))
		r.drop(1)
	}
}

// drop counts events the recording lost.
func (r *recorder) drop(n int) { r.metrics.Add(metricRecordDropped, helpRecordDropped, float64(n)) }

// run writes what is queued until close, then what is left.
func (r *recorder) run() {
	defer close(r.done)
	var buf []byte
	failing := false
	for {
		select {
		case raw := <-r.queue:
			buf = r.write(buf, raw, &failing)
		case <-r.closing:
			for {
				select {
				case raw := <-r.queue:
					buf = r.write(buf, raw, &failing)
				default:
					return
				}
			}
		}
	}
}

// write writes first and whatever waits behind it (up to about
// recordBatchBytes) in one write, each event a line; it returns the
// buffer for the next write.
func (r *recorder) write(buf, first []byte, failing *bool) []byte {
	buf = append(append(buf[:0], first...), '\n')
	taken, n := len(first), 1
gather:
	for len(buf) < recordBatchBytes {
		select {
		case raw := <-r.queue:
			buf = append(append(buf, raw...), '\n')
			taken, n = taken+len(raw), n+1
		default:
			break gather
		}
	}
	r.queued.Add(-int64(taken))
	_, err := r.w.Write(buf)
	if err != nil {
		r.metrics.Add(metricRecordErrors, helpRecordErrors, float64(n))
		if !*failing {
			r.logf("recording: %v (events are not recorded until writes work again)", err)
		}
	}
	*failing = err != nil
	if cap(buf) > 4*recordBatchBytes { // one huge event: let its buffer go
		buf = nil
	}
	return buf
}

// close writes what waits (for up to recordDrain) and stops the writer;
// events added afterwards are dropped and counted. The writer itself is
// the caller's to close.
func (r *recorder) close() {
	if r == nil {
		return
	}
	r.closeOnce.Do(func() {
		close(r.closing)
		select {
		case <-r.done:
		case <-time.After(recordDrain):
			r.logf("recording: the file has not taken the last %d events within %v; they are not recorded", len(r.queue), recordDrain)
		}
	})
}
