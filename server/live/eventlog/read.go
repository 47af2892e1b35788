package eventlog

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// Reading the log: following it into a replica's browsers, reading a
// range of it back (a browser catching up, kvscope replay --nats), and
// what a stored frame is read into.

// Follow reads the stream from replay messages before its end (history
// for a replica's browsers), then every new message, until ctx ends;
// each frame goes to deliver as Route reads it, and a frame that does
// not read is reported to bad (with its stream sequence) and skipped.
func (l *Log) Follow(ctx context.Context, replay uint64, deliver func(events []event.Event, raws [][]byte), bad func(seq uint64, err error)) error {
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
		events, raws, err := Route(m.Data(), m.Headers().Get(stream.HeaderAgent), seq)
		if err != nil {
			bad(seq, err)
			return
		}
		deliver(events, raws)
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	return nil
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
// only for the kinds the hub reads, PayloadRead) and its JSON as the
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
			if e, err = event.DecodeEvent(h.Raw); err != nil {
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
	return k == event.Hello || k == event.TransferDone || k == event.Error || k == event.Sample
}

// ReadEvents reads the events of stream messages from to through (0: the
// stream's last message when the read starts), at most maxEvents (the
// read stops after the message that passes it), each decoded whole;
// messages that do not decode are skipped.
func (l *Log) ReadEvents(ctx context.Context, from, through uint64, maxEvents int) ([]event.Event, error) {
	var out []event.Event
	_, err := l.ReadRange(ctx, from, through, maxEvents, func(data []byte, agent string, seq uint64) int {
		events, err := Decode(data, agent, seq)
		if err != nil {
			return 0
		}
		out = append(out, events...)
		return len(events)
	})
	return out, err
}

// ReadRange hands take each stream message from to through (0: the
// stream's last message when the read starts) with its agent and stream
// sequence; take says how many events it kept, and the read stops after
// the message that brings them to maxEvents. complete says it read
// through. A read takes at most 30 s.
func (l *Log) ReadRange(ctx context.Context, from, through uint64, maxEvents int, take func(data []byte, agent string, seq uint64) int) (complete bool, err error) {
	info, err := l.stream.Info(ctx)
	if err != nil {
		return false, err
	}
	if through == 0 || through > info.State.LastSeq {
		through = info.State.LastSeq
	}
	from = max(from, info.State.FirstSeq)
	if from > through {
		return true, nil
	}
	cons, err := l.js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.SubjectPrefix + ">"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
	if err != nil {
		return false, err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return false, err
	}
	defer it.Stop()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stop := context.AfterFunc(rctx, it.Stop)
	defer stop()
	kept := 0
	for {
		m, err := it.Next()
		if err != nil {
			if rctx.Err() != nil {
				return false, fmt.Errorf("reading stream messages %d-%d: %w", from, through, rctx.Err())
			}
			return false, err
		}
		meta, err := m.Metadata()
		if err != nil {
			return false, err
		}
		seq := meta.Sequence.Stream
		kept += take(m.Data(), m.Headers().Get(stream.HeaderAgent), seq)
		if seq >= through || kept >= maxEvents {
			return seq >= through, nil
		}
	}
}
