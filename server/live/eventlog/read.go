package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// Reading the log: following it into a replica's browsers, reading a
// range of it back (a browser catching up, kvscope replay --nats), and
// what a stored frame is read into.

// Follow reads the stream from replay messages before its end (history
// for a replica's browsers), then every new message, until ctx ends;
// each frame goes to deliver as Route reads it, with the agent process
// (epoch) that sent it, and a frame that does not read is reported to bad
// (with its stream sequence) and skipped. A message is its subject's
// agent's (MessageAgent), whatever it says of itself.
func (l *Log) Follow(ctx context.Context, replay uint64, deliver func(events []event.Event, raws [][]byte, epoch string), bad func(seq uint64, err error)) error {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return err
	}
	start := uint64(1)
	if last := info.State.LastSeq; last > replay {
		start = last - replay + 1
	}
	start = max(start, info.State.FirstSeq)
	cons, err := l.js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.SubjectPrefix + ">"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.follower = cons
	l.mu.Unlock()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		var seq uint64
		if meta != nil {
			seq = meta.Sequence.Stream
		}
		agent, err := MessageAgent(m.Subject(), m.Headers())
		if err != nil {
			bad(seq, err)
			return
		}
		events, raws, err := Route(m.Data(), agent, seq)
		if err != nil {
			bad(seq, err)
			return
		}
		deliver(events, raws, m.Headers().Get(stream.HeaderEpoch))
	}, jetstream.PullMaxBytes(pullBytes))
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// pullBytes is what a consumer of the log buffers ahead of its reader:
// twice the largest message (8 MiB), so a read of a range holds at most
// that, whatever its messages' count (1,024 messages of up to 8 MiB each
// could be buffered otherwise).
const pullBytes = 16 << 20

// MessageAgent is the agent a stream message is of: the one its subject
// names (an agent may publish on its own subject only). A message whose
// agent header names another is no one's.
func MessageAgent(subject string, h nats.Header) (string, error) {
	agent, err := event.AgentOfSubject(subject)
	if err != nil {
		return "", err
	}
	if named := h.Get(stream.HeaderAgent); named != "" && named != agent {
		return "", fmt.Errorf("header %s %q on the subject of agent %q", stream.HeaderAgent, event.Clip(named, 64), agent)
	}
	if epoch := h.Get(stream.HeaderEpoch); event.CheckEpoch(epoch) != nil {
		return "", fmt.Errorf("header %s: %v", stream.HeaderEpoch, event.CheckEpoch(epoch))
	}
	return agent, nil
}

// Decode reads a stored frame whole: its agent's events, each stamped
// with the message's stream sequence (kvscope replay plays them).
func Decode(data []byte, agent string, seq uint64) ([]event.Event, error) {
	events, err := event.DecodeFrame(data)
	if err == nil {
		err = event.CheckAgent(events, agent)
	}
	if err != nil {
		return nil, err
	}
	for i := range events {
		events[i].Stream = seq
	}
	return events, nil
}

// Route reads a stored frame for routing to browsers, without decoding
// what a replica does not read: each event's head (its payload decoded
// only for the kinds the hub reads, PayloadRead, and a transfer_done's
// without its pairs: event.Head.Decode) and its JSON as the
// agent wrote it, stamped with the message's stream sequence
// ({"stream_seq":N, then the event's own fields). The frame is checked as
// event.Peek checks; a payload of a kind the hub does not read reaches
// browsers checked for well-formed JSON only (the replica that stored it
// decoded it whole; an agent that publishes to NATS itself can spoil only
// its own events, which the browser counts as malformed).
func Route(data []byte, agent string, seq uint64) ([]event.Event, [][]byte, error) {
	heads, err := event.Peek(data)
	if err != nil {
		return nil, nil, err
	}
	prefix := `{"stream_seq":` + strconv.FormatUint(seq, 10) + `,`
	size := 0
	for i, h := range heads {
		switch {
		case h.Agent != agent:
			return nil, nil, &event.FrameError{Index: i, Field: "agent", Reason: fmt.Sprintf("%q in a message of agent %q", h.Agent, agent)}
		case h.Stream != 0 || bytes.Contains(h.Raw, []byte(`"stream_seq"`)):
			return nil, nil, &event.FrameError{Index: i, Field: "stream_seq", Reason: "set in a stored event (the log sets it)"}
		}
		size += len(prefix) + len(h.Raw) - 1
	}
	buf := make([]byte, 0, size)
	events := make([]event.Event, len(heads))
	raws := make([][]byte, len(heads))
	for i, h := range heads {
		e := event.Event{V: event.Version, Agent: h.Agent, Seq: h.Seq, Kind: h.Kind, TS: h.TS}
		if PayloadRead(h.Kind) {
			if e, err = h.Decode(); err != nil {
				err.(*event.FrameError).Index = i
				return nil, nil, err
			}
		}
		e.Stream = seq
		events[i] = e
		start := len(buf)
		buf = append(append(buf, prefix...), h.Raw[1:]...)
		raws[i] = buf[start:len(buf):len(buf)]
	}
	return events, raws, nil
}

// PayloadRead reports whether Route decodes the payload of kind k: the
// kinds the hub reads (for the fleet summary and the metrics); the others
// are routed by their heads.
func PayloadRead(k event.Kind) bool {
	return k == event.Hello || k == event.TransferDone || k == event.Error || k == event.Sample || k == event.StuckTransfer || k == event.PlanMismatch
}

// Events reads stream messages from to through (0: the stream's last
// message when the first read starts) as a sequence of their events, each
// decoded whole and stamped with its message's stream sequence, reading
// chunk events at a time (at least: a message is read whole): it holds
// one chunk however long the range. Messages that do not decode are
// skipped. next returns io.EOF after the last.
func (l *Log) Events(ctx context.Context, from, through uint64, chunk int) (next func() (event.Event, error)) {
	var buf []event.Event
	done := false
	return func() (event.Event, error) {
		for len(buf) == 0 {
			if done {
				return event.Event{}, io.EOF
			}
			rr, err := l.ReadRange(ctx, Range{From: from, Through: through, MaxEvents: chunk}, func(data []byte, agent string, seq uint64) int {
				events, err := Decode(data, agent, seq)
				if err != nil {
					return 0
				}
				buf = append(buf, events...)
				return len(events)
			})
			if err != nil {
				return event.Event{}, err
			}
			through = rr.Through // fixed at the first read: a growing stream ends where it stood
			done = rr.Complete || rr.Last == 0
			from = rr.Last + 1
		}
		e := buf[0]
		buf = buf[1:]
		return e, nil
	}
}

// Range is a read of stream messages From to Through (0: the stream's
// last message when the read starts), stopping after the message that
// brings what was kept to MaxEvents events or MaxBytes bytes of messages
// (0: no bound), within Timeout (0: 30 s).
type Range struct {
	From, Through       uint64
	MaxEvents, MaxBytes int
	Timeout             time.Duration
}

// RangeRead is what a ReadRange read: through the last message it read
// (Last); Complete when that is the range's end. First is the first
// message the stream still holds when it is past From: messages From to
// First-1 are gone (the stream's limits dropped them), a gap the reader is
// owed a word about.
type RangeRead struct {
	Last     uint64
	Complete bool
	First    uint64
	Through  uint64 // the range's end, as the read resolved it
}

// Gone is how many messages of the range the stream no longer holds.
func (r RangeRead) Gone(from uint64) uint64 {
	if r.First > from {
		return r.First - from
	}
	return 0
}

// ReadRange hands take each stream message of r with its agent ("" for a
// message that is no agent's: MessageAgent) and stream sequence; take says
// how many events it kept.
func (l *Log) ReadRange(ctx context.Context, r Range, take func(data []byte, agent string, seq uint64) int) (RangeRead, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := l.stream.Info(rctx)
	if err != nil {
		return RangeRead{}, err
	}
	var out RangeRead
	through, from := r.Through, r.From
	if through == 0 || through > info.State.LastSeq {
		through = info.State.LastSeq
	}
	out.Through = through
	if info.State.FirstSeq > from && from > 0 {
		out.First = info.State.FirstSeq
	}
	from = max(from, info.State.FirstSeq)
	if from > through {
		out.Complete = true
		return out, nil
	}
	cons, err := l.js.OrderedConsumer(rctx, StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.SubjectPrefix + ">"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
	if err != nil {
		return RangeRead{}, err
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(pullBytes))
	if err != nil {
		return RangeRead{}, err
	}
	defer it.Stop()
	stop := context.AfterFunc(rctx, it.Stop)
	defer stop()
	kept, bytes := 0, 0
	for {
		m, err := it.Next()
		if err != nil {
			if rctx.Err() != nil {
				return RangeRead{}, fmt.Errorf("reading stream messages %d-%d: %w", from, through, rctx.Err())
			}
			return RangeRead{}, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return RangeRead{}, err
		}
		seq := meta.Sequence.Stream
		agent, err := MessageAgent(m.Subject(), m.Headers())
		if err != nil {
			agent = "" // no agent's: take counts it as a message that does not read
		}
		n := take(m.Data(), agent, seq)
		kept += n
		if n > 0 {
			bytes += len(m.Data())
		}
		out.Last = seq
		if seq >= through || r.MaxEvents > 0 && kept >= r.MaxEvents || r.MaxBytes > 0 && bytes >= r.MaxBytes {
			out.Complete = seq >= through
			return out, nil
		}
	}
}

// Recent is a read of what the stream stored of a few agents lately: their
// messages from Window before the newest of them on (0: 2 minutes), at
// most about MaxMessages of them (0: 1,024; when the window holds more,
// it is narrowed to its newest part), within Timeout (0: 10 s). A browser
// that picks agents out of a large fleet is sent this: the replica's
// memory holds only the fleet's last moments.
type Recent struct {
	Agents      []string
	Window      time.Duration
	MaxMessages int
	Timeout     time.Duration
}

// ReadRecent hands take the messages of r, oldest first, each with its
// agent and stream sequence, and returns the last stream sequence it
// handed (0: none). It reads each agent's subject only (JetStream's
// per-subject index): its cost is the picked agents' messages, not the
// fleet's. A message that is no agent's (MessageAgent) is left out.
func (l *Log) ReadRecent(ctx context.Context, r Recent, take func(data []byte, agent string, seq uint64)) (uint64, error) {
	window, most, timeout := r.Window, r.MaxMessages, r.Timeout
	if window <= 0 {
		window = 2 * time.Minute
	}
	if most <= 0 {
		most = 1024
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Each agent's newest message says whether it has any in the window
	// and where the window ends; an agent with none is not read (a read
	// that finds nothing would wait for a message that never comes).
	type last struct {
		subject string
		at      time.Time
	}
	var lasts []last
	var newest time.Time
	for _, a := range r.Agents {
		subject := event.Subject(a)
		m, err := l.stream.GetLastMsgForSubject(rctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("the newest stored message of agent %q: %w", event.Clip(a, 64), err)
		}
		lasts = append(lasts, last{subject, m.Time})
		if m.Time.After(newest) {
			newest = m.Time
		}
	}
	start := newest.Add(-window)
	for try := 0; ; try++ {
		var subjects []string
		for _, l := range lasts {
			if !l.at.Before(start) {
				subjects = append(subjects, l.subject)
			}
		}
		if len(subjects) == 0 {
			return 0, nil
		}
		cons, err := l.js.OrderedConsumer(rctx, StreamName, jetstream.OrderedConsumerConfig{
			FilterSubjects: subjects, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start})
		if err != nil {
			return 0, err
		}
		through, narrower, err := readRecent(rctx, cons, newest, most, try < 2, take)
		if err != nil || narrower.IsZero() {
			return through, err
		}
		start = narrower
	}
}

// readRecent reads cons until it has no more (its messages' NumPending
// reaches 0). When narrow is set and the first message says that more
// than most follow, it reads nothing and returns a later start instead:
// the window's newest most messages, were they evenly spread.
func readRecent(ctx context.Context, cons jetstream.Consumer, newest time.Time, most int, narrow bool, take func(data []byte, agent string, seq uint64)) (through uint64, narrower time.Time, err error) {
	it, err := cons.Messages(jetstream.PullMaxBytes(pullBytes))
	if err != nil {
		return 0, time.Time{}, err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for first := true; ; first = false {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return 0, time.Time{}, fmt.Errorf("reading the picked agents' recent messages: %w", ctx.Err())
			}
			return 0, time.Time{}, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0, time.Time{}, err
		}
		if first && narrow && meta.NumPending+1 > uint64(most) {
			span := newest.Sub(meta.Timestamp)
			return 0, newest.Add(-time.Duration(float64(span) * float64(most) / float64(meta.NumPending+1))), nil
		}
		if agent, err := MessageAgent(m.Subject(), m.Headers()); err == nil {
			take(m.Data(), agent, meta.Sequence.Stream)
		}
		through = max(through, meta.Sequence.Stream)
		if meta.NumPending == 0 {
			return through, time.Time{}, nil
		}
	}
}
