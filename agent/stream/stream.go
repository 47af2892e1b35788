// Package stream sends an agent's events to a kvscope server over a
// websocket (/ws/agent, bearer token). Publishing never blocks: events wait
// in a bounded queue, which drops its oldest event (and counts it) when
// full. Frames leave at least every 50 ms while the server keeps up (at
// most InFlight frames wait for its acknowledgement); it acknowledges the last
// sequence number it stored, and after a reconnect (with backoff) the
// stream resumes after that number, so the only gaps a subscriber can see
// are the drops the agent counted.
package stream

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/kvscope/kvscope/core/event"
)

// Streamer queues and sends one agent's events. Its exported fields are set
// before Run; it is safe for concurrent use.
type Streamer struct {
	Agent string // the agent's name on every event
	URL   string // ws://host:port/ws/agent
	Token string // the agent's credential (kvscope serve agent-token NAME)
	// Epoch is this agent process's id, sent with every connection and
	// stored with its frames: a server tells a restarted agent (a new
	// epoch) from one resending (""): random, made at Run).
	Epoch      string
	QueueSize  int           // events kept until acknowledged (default 8192)
	FlushEvery time.Duration // the longest an event waits for its frame (default 25 ms, at most 50)
	MaxBatch   int           // events per frame (default 512)
	InFlight   int           // frames sent and not yet acknowledged, at most (default 2)
	Logf       func(format string, args ...any)
	// SplitDetail sends detail (event.IsDetail) apart from the
	// summaries: numbered in its own sequence, never stored, and only
	// while a browser draws this agent (detail.go). It needs a server
	// that knows the split (this release on); without it every event is
	// stored, as before.
	SplitDetail bool
	// OnRefused, when set, is called with a permanent refusal (see Run)
	// before Run returns it: whoever runs the streamer beside other work
	// can stop that work too.
	OnRefused func(*RefusedError)

	mu      sync.Mutex
	queue   []event.Event // unacknowledged events, in seq order
	seq     uint64        // the last sequence number assigned
	acked   uint64        // the last sequence number the server stored
	dropped uint64
	wake    chan struct{}
	once    sync.Once
	// state is the agent's hello and its latest handshakes and
	// registrations: sent again when a server has lost them (restarted).
	state       event.State
	sessionAcks int
	// The detail sequence (SplitDetail): the last dseq numbered, the
	// events waiting for their frame, until when a browser draws them,
	// and how many went unsent and how many frames went.
	dseq         uint64
	detail       []event.Event
	detailUntil  time.Time
	detailUnsent uint64
	detailFrames uint64
}

func (s *Streamer) init() {
	s.once.Do(func() {
		s.wake = make(chan struct{}, 1)
		if s.Epoch == "" {
			s.Epoch = rand.Text()[:16] // base32: letters and digits
		}
		if s.QueueSize <= 0 {
			s.QueueSize = 8192
		}
		// A server refuses a sequence number further past the last it
		// stored than this (event.MaxSeqJump): no queue holds more.
		s.QueueSize = min(s.QueueSize, event.MaxSeqJump)
		if s.FlushEvery <= 0 || s.FlushEvery > 50*time.Millisecond {
			s.FlushEvery = 25 * time.Millisecond
		}
		if s.MaxBatch <= 0 {
			s.MaxBatch = 512
		}
		if s.InFlight <= 0 {
			s.InFlight = 2
		}
	})
}

// Publish stamps an event with the agent, the schema version and the next
// sequence number, and queues it. It never blocks: a full queue drops its
// oldest event.
func (s *Streamer) Publish(e event.Event) {
	s.init()
	if e.TS == 0 {
		e.TS = time.Now().UnixNano()
	}
	s.mu.Lock()
	if s.SplitDetail && event.IsDetail(e.Kind) {
		s.publishDetail(e)
		s.mu.Unlock()
		return // sent on the next tick
	}
	if s.SplitDetail && e.Kind == event.Sample && e.Sample != nil {
		stamped := *e.Sample // the caller's stays as it was
		stamped.DetailThrough = s.dseq
		e.Sample = &stamped
	}
	s.seq++
	e.V, e.Agent, e.Seq = event.Version, s.Agent, s.seq
	s.enqueue(e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// enqueue queues a stamped event and remembers the agent's state events;
// s.mu is held.
func (s *Streamer) enqueue(e event.Event) {
	if len(s.queue) >= s.QueueSize {
		// The oldest unacknowledged event goes. It may have reached the
		// server already; it counts as dropped all the same, so the count
		// bounds the gaps a subscriber can see.
		s.queue = s.queue[1:]
		s.dropped++
	}
	s.queue = append(s.queue, e)
	if event.IsState(e.Kind) {
		raw, _ := event.Encode(e) // its size, for the state's bound (the server's)
		s.state.Keep(e, raw)
	}
}

// Dropped is how many events the queue dropped so far.
func (s *Streamer) Dropped() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Pending is how many published events the server has not acknowledged.
func (s *Streamer) Pending() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq - s.acked
}

// Acked is the last sequence number the server acknowledged.
func (s *Streamer) Acked() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Flush waits until the server has acknowledged every event published so
// far, or ctx ends (then it returns ctx's error).
func (s *Streamer) Flush(ctx context.Context) error {
	s.init()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		done := s.acked >= s.seq
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ErrUnauthorized means the server refused the token (a *RefusedError of
// status 401 is this error).
var ErrUnauthorized = errors.New("stream: the server refused the agent's token (401)")

// RefusedError is the server refusing the agent's connection: the HTTP
// status and the reason the server gave (its response body, clipped).
type RefusedError struct {
	Agent  string
	Status int
	Reason string
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("stream: the server refused agent %q: %d %s", e.Agent, e.Status, http.StatusText(e.Status))
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	switch e.Status {
	case http.StatusUnauthorized:
		msg += " (check --token or $KVSCOPE_TOKEN)"
	case http.StatusBadRequest:
		msg += " (check --name)"
	}
	return msg
}

// Is makes a 401 refusal ErrUnauthorized.
func (e *RefusedError) Is(target error) bool {
	return target == ErrUnauthorized && e.Status == http.StatusUnauthorized
}

// Permanent reports a refusal that connecting again cannot change: a 4xx
// status other than 408 (timeout) and 429 (too many requests).
func (e *RefusedError) Permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests
}

// maxReason bounds the server's reason kept in a RefusedError.
const maxReason = 512

// refused reads a failed handshake's response into a RefusedError; nil
// when there is no response or it is not a client or server error.
func (s *Streamer) refused(resp *http.Response) *RefusedError {
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 1024)) // what the websocket library keeps of it
	}
	reason := strings.Join(strings.Fields(string(body)), " ") // one line: a reason cannot forge log lines
	return &RefusedError{Agent: s.Agent, Status: resp.StatusCode, Reason: event.Clip(reason, maxReason)}
}

// Run connects, sends and reconnects until ctx ends, or until the server
// refuses the agent for good (a *RefusedError that is Permanent: a bad
// name, a wrong token), which it returns.
func (s *Streamer) Run(ctx context.Context) error {
	s.init()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		s.mu.Lock()
		s.sessionAcks = 0
		s.mu.Unlock()
		err := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if re := (*RefusedError)(nil); errors.As(err, &re) && re.Permanent() {
			if s.Logf != nil {
				s.Logf("%v; not connecting again", err)
			}
			if s.OnRefused != nil {
				s.OnRefused(re)
			}
			return err
		}
		s.mu.Lock()
		worked := s.sessionAcks > 0
		s.mu.Unlock()
		if worked { // the connection carried events: start the backoff again
			backoff = 100 * time.Millisecond
		}
		if s.Logf != nil {
			s.Logf("stream: %v; reconnecting in %v", err, backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

// endpoint is the URL with the agent's name, which the server ties the
// connection to.
func (s *Streamer) endpoint() (string, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return "", fmt.Errorf("stream: server URL %q: %w", s.URL, err)
	}
	q := u.Query()
	q.Set("agent", s.Agent)
	q.Set("epoch", s.Epoch)
	if s.SplitDetail {
		q.Set("detail", "1") // this agent numbers its detail apart and sends it on demand
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// session is one connection: send every unacknowledged event, then new
// ones as they come, reading acknowledgements meanwhile.
func (s *Streamer) session(ctx context.Context) error {
	endpoint, err := s.endpoint()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, resp, err := websocket.Dial(dctx, endpoint, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + s.Token}}})
	cancel()
	if err != nil {
		if re := s.refused(resp); re != nil {
			return re
		}
		return err
	}
	defer conn.CloseNow()
	defer s.watchedFor(0) // a replica that takes over says again whether detail is drawn
	conn.SetReadLimit(64 << 10)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	readErr := make(chan error, 1)
	go func() { readErr <- s.readAcks(ctx, conn) }()

	s.mu.Lock()
	sent := s.acked // resume after what the server stored
	s.mu.Unlock()
	tick := time.NewTicker(s.FlushEvery)
	defer tick.Stop()
	// A window of frames in flight: while it is full, events gather into
	// the next frame, so a busy agent sends fewer, larger frames (and the
	// server stores fewer messages) instead of one frame per event.
	var inflight []uint64 // the last sequence number of each frame not acknowledged
	lastAck := sent
	for {
		acked := s.Acked()
		if acked < lastAck { // the server lost what it stored: nothing is in flight
			inflight = nil
		}
		lastAck = acked
		for len(inflight) > 0 && inflight[0] <= acked {
			inflight = inflight[1:]
		}
		for _, frame := range s.takeDetailFrames() { // never acknowledged: sent once
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Write(wctx, websocket.MessageText, frame)
			cancel()
			if err != nil {
				return err
			}
		}
		if len(inflight) < s.InFlight {
			if batch := s.pending(sent); len(batch) > 0 {
				frame, err := s.frame(&batch)
				if err != nil {
					return err
				}
				if frame == nil { // one event too large for any frame: dropped
					sent = batch[0].Seq
					continue
				}
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = conn.Write(wctx, websocket.MessageText, frame)
				cancel()
				if err != nil {
					return err
				}
				sent = batch[len(batch)-1].Seq
				inflight = append(inflight, sent)
				if len(batch) == s.MaxBatch {
					continue // more waiting
				}
			}
		}
		select {
		case <-ctx.Done():
			conn.Close(websocket.StatusNormalClosure, "agent stopping")
			return ctx.Err()
		case err := <-readErr:
			return err
		case <-tick.C:
		case <-s.wake:
		}
	}
}

// frame encodes as many of the batch's events as one frame takes
// (event.Packer's limits, the server's), shortening the batch to them. An
// event too large for any frame is removed from the queue and counted as
// dropped; frame is then nil.
func (s *Streamer) frame(batch *[]event.Event) ([]byte, error) {
	var p event.Packer
	for i, e := range *batch {
		raw, err := event.Encode(e)
		if err != nil {
			return nil, err
		}
		if len(raw) > event.MaxEventBytes {
			if i > 0 { // it goes, alone, after the events before it
				break
			}
			s.mu.Lock()
			for j, q := range s.queue {
				if q.Seq == e.Seq {
					s.queue = append(s.queue[:j], s.queue[j+1:]...)
					s.dropped++
					break
				}
			}
			s.mu.Unlock()
			if s.Logf != nil {
				s.Logf("stream: event %d is larger than a frame (%d bytes); dropped", e.Seq, len(raw)+2)
			}
			return nil, nil
		}
		if !p.Fits(len(raw), 1) {
			break
		}
		p.Add(raw, 1)
	}
	frame, n := p.Frame()
	*batch = (*batch)[:n]
	return frame, nil
}

// pending returns up to MaxBatch queued events after seq.
func (s *Streamer) pending(after uint64) []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.queue) && s.queue[i].Seq <= after {
		i++
	}
	n := min(len(s.queue)-i, s.MaxBatch)
	return append([]event.Event(nil), s.queue[i:i+n]...)
}

// Ack is the server's acknowledgement message; to an agent that splits
// its detail the server also sends {"detail":true} or {"detail":false}
// (Detail set, no ack), whether a browser draws this agent.
type Ack struct {
	Ack    uint64 `json:"ack"`
	Detail *bool  `json:"detail,omitempty"`
}

func (s *Streamer) readAcks(ctx context.Context, conn *websocket.Conn) error {
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		var a Ack
		if err := json.Unmarshal(data, &a); err != nil {
			return fmt.Errorf("stream: bad acknowledgement %q", data)
		}
		if a.Detail != nil {
			if *a.Detail {
				s.watchedFor(forever)
			} else {
				s.watchedFor(0)
			}
			select { // queued detail goes now
			case s.wake <- struct{}{}:
			default:
			}
			continue
		}
		s.mu.Lock()
		s.sessionAcks++
		if a.Ack < s.acked {
			// The server has lost events it once stored (it restarted):
			// send who this agent is again, under new sequence numbers.
			for _, st := range s.state.List() { // enqueue keeps a new list: this one stays
				e := st.Event
				s.seq++
				e.Seq = s.seq
				s.enqueue(e)
			}
			s.acked = a.Ack // it no longer holds the rest either
		}
		s.mu.Unlock()
		s.ackUpTo(a.Ack)
		select { // the window may have room again
		case s.wake <- struct{}{}:
		default:
		}
	}
}
