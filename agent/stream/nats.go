package stream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvscope/kvscope/core/event"
)

// The event log's stream and the headers of a stored frame: the agent,
// and the last sequence number and timestamp in it (how a replica learns
// where an agent resumes).
const (
	StreamName   = "KVSCOPE"
	HeaderAgent  = "Kvscope-Agent"
	HeaderLast   = "Kvscope-Last-Seq"
	HeaderLastTS = "Kvscope-Last-TS"
	HeaderFirst  = "Kvscope-First-Seq"
	HeaderEpoch  = "Kvscope-Epoch"
)

// InboxPrefix is the inbox an agent reads JetStream's acknowledgements
// on, the only subjects the embedded server lets it subscribe to: its own,
// so no agent reads what is answered to another.
func InboxPrefix(agent string) string {
	sum := sha256.Sum256([]byte(agent))
	return "_INBOX.kvscope." + hex.EncodeToString(sum[:12])
}

// NATSAuth is how a client authenticates to NATS: a credentials file
// (JWT and nkey seed), or a user and password, and TLS files.
type NATSAuth struct {
	Creds, User, Password string
	CA, Cert, Key         string
}

// Flags registers --nats-creds, --nats-user, --nats-ca, --nats-cert and
// --nats-key on fs (the password comes from $KVSCOPE_NATS_PASSWORD, never a
// flag: command lines are visible to every user of the host).
func (a *NATSAuth) Flags(fs *flag.FlagSet, credsHelp string) {
	fs.StringVar(&a.Creds, "nats-creds", "", credsHelp)
	fs.StringVar(&a.User, "nats-user", "", "NATS user for --nats (password from $KVSCOPE_NATS_PASSWORD)")
	fs.StringVar(&a.CA, "nats-ca", "", "CA file to verify the NATS servers' TLS certificates")
	fs.StringVar(&a.Cert, "nats-cert", "", "client certificate for NATS TLS (with --nats-key)")
	fs.StringVar(&a.Key, "nats-key", "", "client key for NATS TLS")
}

// Options are the nats.go options for a; a missing file is an error that
// names its flag.
func (a NATSAuth) Options() ([]nats.Option, error) {
	var opts []nats.Option
	for _, f := range []struct{ flag, path string }{{"--nats-creds", a.Creds}, {"--nats-ca", a.CA}, {"--nats-cert", a.Cert}, {"--nats-key", a.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s %s: %w", f.flag, f.path, err)
		}
	}
	if (a.Cert == "") != (a.Key == "") {
		return nil, errors.New("--nats-cert and --nats-key go together")
	}
	if a.Creds != "" {
		opts = append(opts, nats.UserCredentials(a.Creds))
	}
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.CA != "" {
		opts = append(opts, nats.RootCAs(a.CA))
	}
	if a.Cert != "" {
		opts = append(opts, nats.ClientCert(a.Cert, a.Key))
	}
	return opts, nil
}

// Frame is one frame of an agent's events on its way to the event log.
type Frame struct {
	Agent string
	// Epoch is the agent process's random id (Streamer.Epoch): a
	// restarted agent's ids never repeat its previous run's.
	Epoch       string
	Data        []byte
	First, Last uint64 // its events' sequence numbers
	LastTS      int64  // the last event's timestamp
	// Key makes the frame's message id (event.MessageIDKey).
	Key []byte
	// Stored, when set, reports whether stream message seq is this
	// frame: JetStream calls a frame a duplicate of message seq, and only
	// that message being this frame makes it one. Without it (an agent,
	// which may not read the stream), a duplicate is believed only for a
	// frame sent before under the same id (Resent, or a retry here).
	Stored func(ctx context.Context, seq uint64) (bool, error)
	// Resent says the frame went before under this id (its
	// acknowledgement was lost).
	Resent bool
	// Forged, when set, is told of each "duplicate" answer that was not
	// believed (stream message seq holds the frame's id and is not it):
	// the caller counts or logs it.
	Forged func(seq uint64)
}

// ErrDuplicateForged is a JetStream "duplicate" answer for a frame never
// stored: some other message holds its id.
var ErrDuplicateForged = errors.New("JetStream called the frame a duplicate of a message that is not it")

// PublishFrame stores one frame of an agent's events on its subject and
// returns once JetStream has it. Its message id (event.MessageID) lets
// JetStream drop a frame stored twice (an agent resending to another
// replica after a disconnect). An acknowledgement lost with a connection
// (a NATS server restarting) is not waited for: the frame goes again after
// publishAttempt, under the same id, until publishTimeout. A "duplicate"
// answer is an acknowledgement only when the frame was stored before
// (Frame.Stored, Frame.Resent); otherwise the frame goes again under a new
// id, and after maxReIDs new ids it is an error.
func PublishFrame(ctx context.Context, js jetstream.JetStream, f Frame) error {
	msg := nats.NewMsg(event.Subject(f.Agent))
	msg.Data = f.Data
	msg.Header.Set(HeaderAgent, f.Agent)
	msg.Header.Set(HeaderFirst, strconv.FormatUint(f.First, 10))
	msg.Header.Set(HeaderLast, strconv.FormatUint(f.Last, 10))
	msg.Header.Set(HeaderLastTS, strconv.FormatInt(f.LastTS, 10))
	if f.Epoch != "" {
		msg.Header.Set(HeaderEpoch, f.Epoch)
	}
	base := event.MessageID(f.Key, f.Agent, f.Epoch, f.First, f.Last)
	id, reIDs, resent := base, 0, f.Resent
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(pctx, publishAttempt)
		ack, err := js.PublishMsg(actx, msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(StreamName))
		acancel()
		switch {
		case err == nil && ack.Duplicate:
			stored := resent
			if f.Stored != nil {
				var serr error
				if stored, serr = f.Stored(pctx, ack.Sequence); serr != nil {
					return fmt.Errorf("storing %s's events %d-%d: JetStream calls them a duplicate of message %d, which does not read: %w", f.Agent, f.First, f.Last, ack.Sequence, serr)
				}
			}
			if stored {
				return nil
			}
			if f.Forged != nil {
				f.Forged(ack.Sequence)
			}
			if reIDs++; reIDs > maxReIDs {
				return fmt.Errorf("storing %s's events %d-%d (message id %s): %w (message %d), %d times", f.Agent, f.First, f.Last, base, ErrDuplicateForged, ack.Sequence, maxReIDs)
			}
			id, resent = base+"~"+strconv.Itoa(reIDs), false
			continue
		case err == nil:
			return nil
		case pctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)):
			resent = true // it may have been stored: a duplicate now is this frame
			select {      // again, under the same id
			case <-pctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		return fmt.Errorf("storing %s's events %d-%d in JetStream: %w", f.Agent, f.First, f.Last, err)
	}
}

// maxReIDs is how many new ids a frame JetStream wrongly calls a
// duplicate is sent under before PublishFrame gives up.
const maxReIDs = 3

// publishAttempt is how long one publish waits for JetStream's
// acknowledgement before sending the frame again; publishTimeout is how
// long PublishFrame tries in all.
const (
	publishAttempt = 1 * time.Second
	publishTimeout = 10 * time.Second
)

// NATS sends an agent's events straight to the event log (kvscope-agent
// --nats), with Streamer's queue: events wait, in order, until JetStream
// has stored them (the acknowledgement), the oldest going first when the
// queue is full. Every kvscope serve replica reading the stream shows
// them. The agent may publish only on its own subject.
type NATS struct {
	Streamer // Agent, QueueSize, FlushEvery, MaxBatch, Logf and the queue
	URLs     string
	Auth     NATSAuth
}

// Run connects (reconnecting as long as ctx lasts) and stores the queued
// events until ctx ends.
func (n *NATS) Run(ctx context.Context) error {
	n.init()
	auth, err := n.Auth.Options()
	if err != nil {
		return err
	}
	opts := append([]nats.Option{nats.Name("kvscope-agent " + n.Agent), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.Timeout(5 * time.Second), nats.CustomInboxPrefix(InboxPrefix(n.Agent))}, auth...)
	var nc *nats.Conn
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, 5*time.Second) {
		if nc, err = nats.Connect(n.URLs, opts...); err == nil {
			break
		}
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return fmt.Errorf("--nats %s refused agent %q: %w (the embedded server takes the agent's name as the user and its credential, from kvscope serve agent-token NAME, as the password)", n.URLs, n.Agent, err)
		}
		if n.Logf != nil {
			n.Logf("stream: --nats %s: %v; again in %v", n.URLs, err, wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if n.SplitDetail {
		// A replica says on these subjects, at least every
		// event.WatchEvery, that a browser draws this agent (or every
		// agent): detail goes while the last word is fresh.
		for _, subject := range []string{event.WatchSubject(n.Agent), event.WatchAll} {
			sub, err := nc.Subscribe(subject, func(*nats.Msg) { n.watchedFor(event.WatchLease) })
			if err != nil {
				return fmt.Errorf("stream: subscribing to %s: %w", subject, err)
			}
			defer sub.Unsubscribe()
		}
	}
	tick := time.NewTicker(n.FlushEvery)
	defer tick.Stop()
	backoff := 100 * time.Millisecond
	key := event.MessageIDKey(n.Auth.Password, n.Agent)
	var sentFirst, sentLast uint64 // the frame sent last: sent again, a duplicate is it
	for ctx.Err() == nil {
		for _, frame := range n.takeDetailFrames() { // core NATS: not stored, not acknowledged
			nc.Publish(event.DetailSubject(n.Agent), frame)
		}
		n.mu.Lock()
		acked := n.acked
		n.mu.Unlock()
		if batch := n.pending(acked); len(batch) > 0 {
			frame, err := n.frame(&batch)
			if err != nil {
				return err
			}
			if frame == nil {
				continue // one event too large for any frame: dropped
			}
			last := batch[len(batch)-1]
			f := Frame{Agent: n.Agent, Epoch: n.Epoch, Data: frame, First: batch[0].Seq, Last: last.Seq, LastTS: last.TS,
				Key: key, Resent: sentFirst == batch[0].Seq && sentLast == last.Seq, Forged: func(seq uint64) {
					if n.Logf != nil {
						n.Logf("stream: JetStream called events %d-%d a duplicate of message %d, which this agent did not send: sent again under a new id", batch[0].Seq, last.Seq, seq)
					}
				}}
			sentFirst, sentLast = f.First, f.Last
			if err := PublishFrame(ctx, js, f); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if n.Logf != nil {
					n.Logf("stream: %v; again in %v", err, backoff)
				}
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			n.ackUpTo(last.Seq)
			if len(batch) == n.MaxBatch {
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		case <-n.wake:
		}
	}
	return nil
}

// ackUpTo drops the events the log stored from the queue.
func (s *Streamer) ackUpTo(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.acked || seq > s.seq {
		return
	}
	s.acked = seq
	i := 0
	for i < len(s.queue) && s.queue[i].Seq <= seq {
		i++
	}
	s.queue = s.queue[i:]
}
