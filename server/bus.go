package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// The event log is a NATS JetStream stream. Every frame of events an agent
// sends (after the hub drops what is already stored) is one message on
// the agent's subject, kvscope.ev.<agent>, with a message id made of the
// agent and the frame's sequence range, so JetStream drops a frame sent
// twice (an agent resending to another replica after a disconnect). Every
// replica reads the whole stream with one ordered consumer and fans it
// out to its browsers; browsers therefore see every agent of the fleet,
// whichever replica they and the agents are connected to.

// Stream and subject names.
const (
	streamName    = stream.StreamName
	subjectPrefix = event.SubjectPrefix
)

// busOptions say where the event log lives.
type busOptions struct {
	// URLs of an external NATS cluster; empty starts an embedded server.
	URLs string
	// DataDir holds the embedded server's JetStream files.
	DataDir string
	// Listen is the embedded server's client address (loopback only);
	// "" picks a free port.
	Listen string
	// Auth authenticates to an external cluster.
	Auth stream.NATSAuth
	// Token lets agents publish straight to the embedded server: user
	// name = the agent's name, password = the token, and each may publish
	// only on its own subject.
	Token string
	// MaxAge and MaxBytes bound the stream (0: 24 h, 1 GiB); Replicas is
	// its replication in a cluster (1 embedded).
	MaxAge   time.Duration
	MaxBytes int64
	Replicas int
	// ReadOnly opens the stream as it is (kvscope replay), creating and
	// changing nothing.
	ReadOnly bool
	Logf     func(string, ...any)
}

// bus is a replica's connection to the event log.
type bus struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	srv    *natsserver.Server // the embedded server, nil for a cluster
	url    string

	mu       sync.Mutex
	follower jetstream.Consumer // follow's consumer, for its figures
	closing  atomic.Bool        // close has begun: a disconnect is expected
}

// defaultDataDir is where the embedded server keeps its files.
func defaultDataDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "kvscope", "nats")
}

// openBus starts the embedded NATS server (or connects to the cluster)
// and creates or checks the stream.
func openBus(ctx context.Context, o busOptions) (*bus, error) {
	b := &bus{}
	url := o.URLs
	if url == "" {
		host, port := "127.0.0.1", natsserver.RANDOM_PORT
		if o.Listen != "" {
			h, p, err := splitLoopback(o.Listen)
			if err != nil {
				return nil, fmt.Errorf("--nats-listen %q: %w", o.Listen, err)
			}
			host, port = h, p
		}
		if o.DataDir == "" {
			o.DataDir = defaultDataDir()
		}
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("--data-dir %s: %w", o.DataDir, err)
		}
		internal := randomToken()
		srv, err := natsserver.NewServer(&natsserver.Options{
			ServerName: "kvscope", Host: host, Port: port, JetStream: true, StoreDir: o.DataDir,
			NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
			CustomClientAuthentication: &natsAuth{internal: internal, token: o.Token},
		})
		if err != nil {
			return nil, fmt.Errorf("embedded NATS server: %w", err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			srv.Shutdown()
			return nil, fmt.Errorf("embedded NATS server (data in %s): not ready within 10 s", o.DataDir)
		}
		b.srv, url = srv, srv.ClientURL()
		o.Auth = stream.NATSAuth{User: serveUser, Password: internal}
	}
	opts := []nats.Option{nats.Name("kvscope serve"), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20), nats.Timeout(5 * time.Second)}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	opts = append(opts,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if !b.closing.Load() {
				logf("NATS: disconnected (%v); reconnecting", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logf("NATS: reconnected to %s", nc.ConnectedUrlRedacted()) }))
	auth, err := o.Auth.Options()
	if err != nil {
		b.close()
		return nil, err
	}
	nc, err := nats.Connect(url, append(opts, auth...)...)
	if err != nil {
		b.close()
		return nil, fmt.Errorf("--nats %s: %w", redact(url), err)
	}
	b.nc, b.url = nc, url
	if b.js, err = jetstream.New(nc); err != nil {
		b.close()
		return nil, err
	}
	maxAge, maxBytes, replicas := o.MaxAge, o.MaxBytes, max(o.Replicas, 1)
	if maxAge <= 0 {
		maxAge = 24 * time.Hour
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	cfg := jetstream.StreamConfig{Name: streamName, Subjects: []string{subjectPrefix + ">"}, Storage: jetstream.FileStorage,
		MaxAge: maxAge, MaxBytes: maxBytes, Replicas: replicas, Duplicates: 2 * time.Minute, Discard: jetstream.DiscardOld,
		MaxMsgSize: 8 << 20, Description: "kvscope agents' events, one frame per message"}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if o.ReadOnly {
		b.stream, err = b.js.Stream(sctx, streamName)
	} else {
		b.stream, err = b.js.CreateOrUpdateStream(sctx, cfg)
	}
	if err != nil {
		b.close()
		return nil, fmt.Errorf("JetStream stream %s on %s: %w", streamName, redact(url), err)
	}
	return b, nil
}

// serveUser is kvscope serve's own user on the embedded NATS server.
const serveUser = "kvscope-serve"

// natsAuth admits clients to the embedded NATS server: kvscope serve with
// its own random password (every permission), and agents publishing
// straight to the log (kvscope-agent --nats) with their name as the user
// and the server's token as the password, each allowed to publish on its
// own subject only (and to read the JetStream acknowledgements).
type natsAuth struct {
	internal, token string
}

// Check implements natsserver.Authentication.
func (a *natsAuth) Check(c natsserver.ClientAuthentication) bool {
	opts := c.GetOpts()
	same := func(x, y string) bool { return y != "" && subtle.ConstantTimeCompare([]byte(x), []byte(y)) == 1 }
	switch {
	case opts.Username == serveUser && same(opts.Password, a.internal):
		c.RegisterUser(&natsserver.User{Username: serveUser})
		return true
	case opts.Username != serveUser && event.CheckAgentName(opts.Username) == nil && same(opts.Password, a.token):
		c.RegisterUser(&natsserver.User{Username: opts.Username, Permissions: &natsserver.Permissions{
			Publish:   &natsserver.SubjectPermission{Allow: []string{event.Subject(opts.Username)}},
			Subscribe: &natsserver.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}})
		return true
	}
	return false
}

// redact drops a password from a NATS URL for messages.
func redact(url string) string {
	if at := strings.LastIndex(url, "@"); at >= 0 {
		if scheme := strings.Index(url, "://"); scheme >= 0 && scheme < at {
			return url[:scheme+3] + "…@" + url[at+1:]
		}
	}
	return url
}

// splitLoopback reads a loopback host:port.
func splitLoopback(addr string) (string, int, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return "", 0, errors.New("want HOST:PORT")
	}
	host, p := strings.Trim(addr[:i], "[]"), addr[i+1:]
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, errors.New("the port must be a number up to 65535")
	}
	if host != "127.0.0.1" && host != "localhost" && host != "::1" {
		return "", 0, errors.New("the embedded NATS server listens on loopback only (run a NATS cluster and give --nats beyond one host)")
	}
	return host, port, nil
}

// publish stores one frame of an agent's events and returns once
// JetStream has it (or says why not).
func (b *bus) publish(ctx context.Context, agent string, frame []byte, first, last uint64, lastTS int64) error {
	return stream.PublishFrame(ctx, b.js, agent, frame, first, last, lastTS)
}

// lastStored is the last sequence number (and its timestamp) stored for
// an agent: an agent connecting to this replica resumes after it, whichever
// replica stored it.
func (b *bus) lastStored(ctx context.Context, agent string) (uint64, int64, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := b.stream.GetLastMsgForSubject(gctx, event.Subject(agent))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	seq, err := strconv.ParseUint(m.Header.Get(stream.HeaderLast), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("stream message %d: header %s %q: %w", m.Sequence, stream.HeaderLast, m.Header.Get(stream.HeaderLast), err)
	}
	ts, _ := strconv.ParseInt(m.Header.Get(stream.HeaderLastTS), 10, 64)
	return seq, ts, nil
}

// follow reads the stream from replay messages before its end (history
// for this replica's browsers), then every new message, until ctx ends;
// frames that do not decode are reported (naming the stream sequence)
// and skipped.
func (b *bus) follow(ctx context.Context, replay uint64, deliver func(events []event.Event, raws [][]byte), bad func(seq uint64, err error)) error {
	info, err := b.stream.Info(ctx)
	if err != nil {
		return err
	}
	start := uint64(1)
	if last := info.State.LastSeq; last > replay {
		start = last - replay + 1
	}
	start = max(start, info.State.FirstSeq)
	cons, err := b.js.OrderedConsumer(ctx, streamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjectPrefix + ">"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start})
	if err != nil {
		return err
	}
	b.mu.Lock()
	b.follower = cons
	b.mu.Unlock()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, _ := m.Metadata()
		var seq uint64
		if meta != nil {
			seq = meta.Sequence.Stream
		}
		events, raws, err := routeStored(m.Data(), m.Headers().Get(stream.HeaderAgent), seq)
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

// close ends the connection and the embedded server.
func (b *bus) close() {
	b.closing.Store(true)
	if b.nc != nil {
		b.nc.Drain()
		b.nc.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}

// natsFlags registers the event log's flags on fs; the returned function
// reads them once parsed.
func natsFlags(fs *flag.FlagSet) func() (busOptions, error) {
	var o busOptions
	fs.StringVar(&o.URLs, "nats", "", "an external NATS cluster, nats://HOST:PORT[,…] (default: an embedded NATS server with JetStream, loopback only)")
	fs.StringVar(&o.DataDir, "data-dir", defaultDataDir(), "where the embedded NATS server keeps the event log")
	fs.StringVar(&o.Listen, "nats-listen", "", "the embedded NATS server's client address, loopback (default: a free port)")
	o.Auth.Flags(fs, "a NATS credentials file (JWT and nkey seed) for --nats")
	fs.DurationVar(&o.MaxAge, "retention-age", 24*time.Hour, "how long the event log keeps events")
	bytes := fs.String("retention-bytes", "1GiB", "how much the event log keeps (oldest go first)")
	fs.IntVar(&o.Replicas, "stream-replicas", 1, "the stream's replicas in a NATS cluster (3 for an R3 stream)")
	return func() (busOptions, error) {
		var err error
		if o.MaxBytes, err = parseBytes(*bytes); err != nil || o.MaxBytes < 1<<20 {
			return o, fmt.Errorf("--retention-bytes %q: want a size of at least 1MiB", *bytes)
		}
		if o.MaxAge < time.Minute {
			return o, fmt.Errorf("--retention-age %s: must be at least 1m", o.MaxAge)
		}
		if o.Replicas < 1 || o.Replicas > 5 {
			return o, fmt.Errorf("--stream-replicas %d: must be between 1 and 5", o.Replicas)
		}
		if o.URLs != "" && o.Listen != "" {
			return o, errors.New("--nats-listen is the embedded server's: it does not go with --nats")
		}
		o.Auth.Password = os.Getenv("KVSCOPE_NATS_PASSWORD")
		return o, nil
	}
}

// decodeStored reads a stored frame whole: its agent's events, each
// stamped with the message's stream sequence (kvscope replay plays them).
func decodeStored(data []byte, agent string, seq uint64) ([]event.Event, error) {
	events, err := event.DecodeFrame(data)
	if err == nil {
		err = sameAgent(events, agent)
	}
	if err != nil {
		return nil, err
	}
	for i := range events {
		events[i].Stream = seq
	}
	return events, nil
}

// routeStored reads a stored frame for routing to browsers, without
// decoding what the hub does not read: each event's head (its payload
// decoded only for the kinds the hub reads, payloadRead) and its JSON as
// the agent wrote it, stamped with the message's stream sequence
// ({"stream_seq":N, then the event's own fields). The frame is checked
// as event.Peek checks; a payload of a kind the hub does not read reaches
// browsers checked for well-formed JSON only (the replica that stored it
// decoded it whole; an agent that publishes to NATS itself can spoil only
// its own events, which the browser counts as malformed).
func routeStored(data []byte, agent string, seq uint64) ([]event.Event, [][]byte, error) {
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
		if payloadRead(h.Kind) {
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

// payloadRead reports the kinds whose payload the hub reads (the fleet
// summary and the metrics): the others are routed by their heads.
func payloadRead(k event.Kind) bool {
	return k == event.Hello || k == event.TransferDone || k == event.Error || k == event.Sample
}

// readEvents reads the events of stream messages from to through (0: the
// stream's last message when the read starts), at most maxEvents (the
// read stops after the message that passes it), each decoded whole;
// messages that do not decode are skipped.
func (b *bus) readEvents(ctx context.Context, from, through uint64, maxEvents int) ([]event.Event, error) {
	var out []event.Event
	_, err := b.readRange(ctx, from, through, maxEvents, func(data []byte, agent string, seq uint64) int {
		events, err := decodeStored(data, agent, seq)
		if err != nil {
			return 0
		}
		out = append(out, events...)
		return len(events)
	})
	return out, err
}

// readRange hands take each stream message from to through (0: the
// stream's last message when the read starts) with its agent and stream
// sequence; take says how many events it kept, and the read stops after
// the message that brings them to maxEvents. complete says it read
// through.
func (b *bus) readRange(ctx context.Context, from, through uint64, maxEvents int, take func(data []byte, agent string, seq uint64) int) (complete bool, err error) {
	info, err := b.stream.Info(ctx)
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
	cons, err := b.js.OrderedConsumer(ctx, streamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjectPrefix + ">"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
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

// busCollector reports the event log's figures when /metrics is scraped:
// the stream's (stored messages and bytes, first and last sequence), this
// replica's consumer (delivered, redelivered, lag behind the stream) and
// its NATS connection.
type busCollector struct{ b *bus }

var (
	descStreamMsgs    = prometheus.NewDesc("kvscope_stream_messages", "Frames stored in the event log (JetStream stream KVSCOPE).", nil, nil)
	descStreamBytes   = prometheus.NewDesc("kvscope_stream_bytes", "Bytes stored in the event log.", nil, nil)
	descStreamLast    = prometheus.NewDesc("kvscope_stream_last_seq", "The event log's last sequence number.", nil, nil)
	descStreamFirst   = prometheus.NewDesc("kvscope_stream_first_seq", "The event log's first sequence number still kept.", nil, nil)
	descDelivered     = prometheus.NewDesc("kvscope_stream_consumer_delivered_total", "Frames delivered to this replica's consumer.", nil, nil)
	descRedelivered   = prometheus.NewDesc("kvscope_stream_consumer_redelivered", "Frames redelivered to this replica's consumer.", nil, nil)
	descLag           = prometheus.NewDesc("kvscope_stream_consumer_lag", "Frames stored that this replica's consumer has not delivered yet.", nil, nil)
	descNATSReconnect = prometheus.NewDesc("kvscope_nats_reconnects_total", "Times this replica reconnected to NATS.", nil, nil)
	descNATSIn        = prometheus.NewDesc("kvscope_nats_in_msgs_total", "Messages this replica received from NATS.", nil, nil)
	descNATSOut       = prometheus.NewDesc("kvscope_nats_out_msgs_total", "Messages this replica sent to NATS.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c busCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStreamMsgs, descStreamBytes, descStreamLast, descStreamFirst, descDelivered, descRedelivered, descLag,
		descNATSReconnect, descNATSIn, descNATSOut} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; what NATS does not answer within
// 2 s is left out of this scrape.
func (c busCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.nc.Stats()
	ch <- prometheus.MustNewConstMetric(descNATSReconnect, prometheus.CounterValue, float64(st.Reconnects))
	ch <- prometheus.MustNewConstMetric(descNATSIn, prometheus.CounterValue, float64(st.InMsgs))
	ch <- prometheus.MustNewConstMetric(descNATSOut, prometheus.CounterValue, float64(st.OutMsgs))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.b.stream.Info(ctx)
	if err != nil {
		return
	}
	s := info.State
	ch <- prometheus.MustNewConstMetric(descStreamMsgs, prometheus.GaugeValue, float64(s.Msgs))
	ch <- prometheus.MustNewConstMetric(descStreamBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(descStreamLast, prometheus.GaugeValue, float64(s.LastSeq))
	ch <- prometheus.MustNewConstMetric(descStreamFirst, prometheus.GaugeValue, float64(s.FirstSeq))
	c.b.mu.Lock()
	f := c.b.follower
	c.b.mu.Unlock()
	if f == nil {
		return
	}
	ci, err := f.Info(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descDelivered, prometheus.CounterValue, float64(ci.Delivered.Consumer))
	ch <- prometheus.MustNewConstMetric(descRedelivered, prometheus.GaugeValue, float64(ci.NumRedelivered))
	ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(s.LastSeq-min(ci.Delivered.Stream, s.LastSeq)))
}
