package live

import (
	"sync"
	"sync/atomic"

	"github.com/kvscope/kvscope/core/event"
)

// subscriber is one browser's queue of frames.
type subscriber struct {
	frames  chan liveFrame
	dropped uint64 // frames dropped so far (h.mu held), also on /metrics
	// behind closes when the subscriber's queue overflows and the hub has
	// a log: the connection is closed and the browser resumes from the log
	// after the last event it saw, so it loses nothing.
	behind     chan struct{}
	behindOnce sync.Once
	queued     atomic.Int64 // bytes in frames
	// pending counts the frames queued and not yet written or dropped:
	// a closing hub lets browsers have them first.
	pending atomic.Int64
	// agents, when not nil, are the only agents whose events the
	// subscriber gets (the fleet summary covers every agent).
	agents map[string]bool
	detail detailInterest // whose detail it draws (h.mu held)
}

// liveFrame is a frame queued for a subscriber, with the stream message
// its events came from (0 without a log): a browser that resumed from the
// log skips the frames its catch-up already carried.
type liveFrame struct {
	data   []byte
	stream uint64
	events int
	agent  string // every event of a frame is one agent's
}

// subQueueBytes bounds the bytes queued for one subscriber.
const subQueueBytes = 8 << 20

// offer queues a frame for a subscriber. Without a log, a full queue
// drops its oldest frames to make room (a frame larger than the whole
// queue is dropped itself), each drop counted on /metrics and seen by the
// browser as a sequence gap; with a log, the subscriber is told to resume
// from the log instead. h.mu is held.
func (h *Hub) offer(s *subscriber, frame liveFrame) {
	if h.log != nil {
		select {
		case <-s.behind:
			// Told to resume: nothing more, though its queue may drain
			// meanwhile. A frame after the one it lost would carry it past
			// that frame's stream position, and it resumes from the last
			// position it saw.
			return
		default:
		}
		if s.queued.Load()+int64(len(frame.data)) > subQueueBytes {
			s.fallBehind(h)
			return
		}
		select {
		case s.frames <- frame:
			s.queued.Add(int64(len(frame.data)))
			s.pending.Add(1)
		default:
			s.fallBehind(h)
		}
		return
	}
	for {
		if s.queued.Load()+int64(len(frame.data)) <= subQueueBytes {
			select {
			case s.frames <- frame:
				s.queued.Add(int64(len(frame.data)))
				s.pending.Add(1)
				return
			default:
			}
		}
		select {
		case old := <-s.frames:
			s.queued.Add(-int64(len(old.data)))
			s.pending.Add(-1)
			h.dropFrame(s, old)
		default:
			if s.queued.Load() > 0 || len(frame.data) > subQueueBytes { // a frame larger than the whole queue: dropped
				h.dropFrame(s, frame)
				return
			}
		}
	}
}

// dropFrame counts a frame a subscriber loses.
func (h *Hub) dropFrame(s *subscriber, f liveFrame) {
	s.dropped++
	h.metrics.Add(metricSubscriberDroppedFrames, helpSubscriberDroppedFrames, 1)
	h.metrics.Add(metricSubscriberDroppedEvents, helpSubscriberDroppedEvents, float64(f.events))
}

// fallBehind tells a subscriber to resume from the log (once).
func (s *subscriber) fallBehind(h *Hub) {
	s.behindOnce.Do(func() {
		close(s.behind)
		h.metrics.Add("kvscope_hub_subscriber_resumes_total", "Browsers told to resume from the event log because they read too slowly.", 1)
	})
}

// take accounts for a frame leaving a subscriber's queue.
func (s *subscriber) take(f liveFrame) liveFrame {
	s.queued.Add(-int64(len(f.data)))
	return f
}

// subscribe registers a subscriber and returns its history frames. Under
// h.mu it only registers and copies slice headers (or takes the frames
// the last subscriber packed, when no event arrived since); the packing
// happens afterwards, so agents never wait for a subscriber (frames
// published meanwhile queue for it).
func (h *Hub) subscribe() (*subscriber, [][]byte) { return h.subscribeTo(nil) }

// subscribeTo is subscribe for the given agents only (nil: all of them).
func (h *Hub) subscribeTo(agents map[string]bool) (*subscriber, [][]byte) {
	h.builders <- struct{}{}
	defer func() { <-h.builders }()
	s := &subscriber{frames: make(chan liveFrame, h.subQueue), behind: make(chan struct{}), agents: agents}
	h.mu.Lock()
	version := h.version
	var state map[string][]event.Encoded
	var recent []event.Encoded
	frames := h.cached
	fresh := h.cachedVersion == version && frames != nil && agents == nil
	if !fresh {
		state, recent = h.snapshot()
	}
	h.subs[s] = struct{}{}
	n := len(h.subs)
	h.mu.Unlock()
	h.metrics.Set("kvscope_hub_subscribers", "Browsers subscribed to /ws/live.", float64(n))
	if !fresh {
		hist := history(state, recent)
		if agents != nil {
			for a := range hist {
				if !agents[a] {
					delete(hist, a)
				}
			}
		}
		frames = historyFrames(hist)
		if frames == nil {
			frames = [][]byte{}
		}
		if agents == nil {
			h.mu.Lock()
			if version >= h.cachedVersion {
				h.cached, h.cachedVersion = frames, version
			}
			h.mu.Unlock()
		}
	}
	return s, frames
}

func (h *Hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
	if s.detail.all {
		h.watchingAll--
	}
	for a := range s.detail.agents {
		if h.watching[a]--; h.watching[a] <= 0 {
			delete(h.watching, a)
		}
	}
	s.detail = detailInterest{}
	h.metrics.Set("kvscope_hub_subscribers", "Browsers subscribed to /ws/live.", float64(len(h.subs)))
}
