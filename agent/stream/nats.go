package stream

import (
	"context"
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
)

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

// PublishFrame stores one frame of an agent's events on its subject, with
// the message id agent#first-last (JetStream drops a frame stored twice),
// and returns once JetStream has it. An acknowledgement lost with a
// connection (a NATS server restarting) is not waited for: the frame goes
// again after publishAttempt, under the same id, until publishTimeout.
func PublishFrame(ctx context.Context, js jetstream.JetStream, agent string, frame []byte, first, last uint64, lastTS int64) error {
	msg := nats.NewMsg(event.Subject(agent))
	msg.Data = frame
	msg.Header.Set(HeaderAgent, agent)
	msg.Header.Set(HeaderLast, strconv.FormatUint(last, 10))
	msg.Header.Set(HeaderLastTS, strconv.FormatInt(lastTS, 10))
	id := fmt.Sprintf("%s#%d-%d", agent, first, last)
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(pctx, publishAttempt)
		_, err := js.PublishMsg(actx, msg, jetstream.WithMsgID(id), jetstream.WithExpectStream(StreamName))
		acancel()
		switch {
		case err == nil:
			return nil
		case pctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)):
			select { // again, under the same id
			case <-pctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		return fmt.Errorf("storing %s's events %d-%d in JetStream: %w", agent, first, last, err)
	}
}

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
		nats.Timeout(5 * time.Second)}, auth...)
	var nc *nats.Conn
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, 5*time.Second) {
		if nc, err = nats.Connect(n.URLs, opts...); err == nil {
			break
		}
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return fmt.Errorf("--nats %s refused agent %q: %w (the embedded server takes the agent's name as the user and kvscope serve's --token as the password)", n.URLs, n.Agent, err)
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
	tick := time.NewTicker(n.FlushEvery)
	defer tick.Stop()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
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
			if err := PublishFrame(ctx, js, n.Agent, frame, batch[0].Seq, last.Seq, last.TS); err != nil {
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
