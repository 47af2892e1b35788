// Package eventlog is kvscope's event log: agents' events stored in a NATS
// JetStream stream, so that a server that restarts finds its history and
// every replica of a fleet sees every agent.
//
// Every frame of events an agent sends (after the hub drops what is
// already stored) is one message on the agent's subject,
// kvscope.ev.<agent> (event.Subject), with a message id made of the agent
// and the frame's sequence range, so JetStream drops a frame sent twice (an
// agent resending to another replica after a disconnect). A replica reads
// the whole stream with one ordered consumer (Log.Follow) and fans it out
// to its browsers; a returning browser is caught up with Log.ReadRange.
//
// Open starts an embedded NATS server with JetStream on file storage
// (loopback only) when no cluster is named, so one machine needs no other
// service; with URLs it joins a cluster and creates or checks the stream
// there. The package knows nothing of websockets or browsers (the hub,
// server/live, does); it never reads flags (kvscope serve turns its flags
// into Options).
package eventlog

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
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

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// StreamName is the stream that holds the log.
const StreamName = stream.StreamName

// Options say where the event log lives. The zero value starts an
// embedded server on a free loopback port with its files in
// DefaultDataDir, and a stream that keeps 24 h and 1 GiB.
type Options struct {
	// URLs of an external NATS cluster; empty starts an embedded server.
	URLs string
	// DataDir holds the embedded server's JetStream files ("":
	// DefaultDataDir).
	DataDir string
	// Listen is the embedded server's client address (loopback only);
	// "" picks a free port.
	Listen string
	// Auth authenticates to an external cluster.
	Auth stream.NATSAuth
	// Token is the server's secret: agents publish straight to the
	// embedded server with their name as the user and the credential it
	// issued them (event.IssueCredential) as the password; each may
	// publish on its own subject only and read its own inbox only.
	Token string
	// MaxConnections bounds the embedded server's client connections (0:
	// DefaultMaxConnections), MaxAgentConnections each agent's (0:
	// DefaultMaxAgentConnections): one credential cannot take every file
	// descriptor of the process.
	MaxConnections, MaxAgentConnections int
	// MaxFramesPerAgent bounds the frames the stream keeps of one agent
	// (0: DefaultMaxFramesPerAgent), so that one agent's flood cannot
	// evict every other agent's history.
	MaxFramesPerAgent int64
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

// The embedded server's and the stream's defaults.
const (
	DefaultMaxConnections      = 1024
	DefaultMaxAgentConnections = 16
	DefaultMaxFramesPerAgent   = 200_000
)

// Log is a replica's connection to the event log. It is safe for
// concurrent use.
type Log struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	srv    *natsserver.Server // the embedded server, nil for a cluster
	auth   *natsAuth          // its client authentication, nil for a cluster
	url    string
	secret string        // the server's token: the key of the message ids it makes
	forged atomic.Uint64 // "duplicate" answers for frames not stored before (Publish)

	mu       sync.Mutex
	follower jetstream.Consumer // Follow's consumer, for its figures
	closing  atomic.Bool        // Close has begun: a disconnect is expected
}

// DefaultDataDir is where the embedded server keeps its files:
// kvscope/nats under the user's cache directory.
func DefaultDataDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "kvscope", "nats")
}

// Open starts the embedded NATS server (or connects to the cluster) and
// creates or checks the stream. Its errors name the flag that set what
// failed (--nats, --nats-listen, --data-dir).
func Open(ctx context.Context, o Options) (*Log, error) {
	l := &Log{}
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
			o.DataDir = DefaultDataDir()
		}
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("--data-dir %s: %w", o.DataDir, err)
		}
		internal := rand.Text() // kvscope serve's own password, never shown
		maxConn := o.MaxConnections
		if maxConn <= 0 {
			maxConn = DefaultMaxConnections
		}
		auth := &natsAuth{internal: internal, token: o.Token, perAgent: o.MaxAgentConnections, logf: o.Logf}
		if auth.perAgent <= 0 {
			auth.perAgent = DefaultMaxAgentConnections
		}
		srv, err := natsserver.NewServer(&natsserver.Options{
			ServerName: "kvscope", Host: host, Port: port, JetStream: true, StoreDir: o.DataDir,
			NoSigs: true, NoLog: true, MaxPayload: 8 << 20, MaxConn: maxConn,
			CustomClientAuthentication: auth,
		})
		if err != nil {
			return nil, fmt.Errorf("embedded NATS server: %w", err)
		}
		auth.srv = srv
		srv.SetLogger(auth, false, false) // counts what the server refuses (Refused)
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			srv.Shutdown()
			return nil, fmt.Errorf("embedded NATS server (data in %s): not ready within 10 s", o.DataDir)
		}
		l.srv, url = srv, srv.ClientURL()
		l.auth = auth
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
			if !l.closing.Load() {
				logf("NATS: disconnected (%v); reconnecting", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logf("NATS: reconnected to %s", nc.ConnectedUrlRedacted()) }))
	auth, err := o.Auth.Options()
	if err != nil {
		l.Close()
		return nil, err
	}
	nc, err := nats.Connect(url, append(opts, auth...)...)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("--nats %s: %w", Redact(url), err)
	}
	l.nc, l.url = nc, url
	if l.js, err = jetstream.New(nc); err != nil {
		l.Close()
		return nil, err
	}
	l.secret = o.Token
	maxAge, maxBytes, replicas := o.MaxAge, o.MaxBytes, max(o.Replicas, 1)
	perAgent := o.MaxFramesPerAgent
	if perAgent <= 0 {
		perAgent = DefaultMaxFramesPerAgent
	}
	if maxAge <= 0 {
		maxAge = 24 * time.Hour
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	cfg := jetstream.StreamConfig{Name: StreamName, Subjects: []string{event.SubjectPrefix + ">"}, Storage: jetstream.FileStorage,
		MaxAge: maxAge, MaxBytes: maxBytes, MaxMsgsPerSubject: perAgent, Replicas: replicas, Duplicates: 2 * time.Minute, Discard: jetstream.DiscardOld,
		MaxMsgSize: 8 << 20, Description: "kvscope agents' events, one frame per message"}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if o.ReadOnly {
		l.stream, err = l.js.Stream(sctx, StreamName)
	} else {
		l.stream, err = l.js.CreateOrUpdateStream(sctx, cfg)
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("JetStream stream %s on %s: %w", StreamName, Redact(url), err)
	}
	return l, nil
}

// Embedded reports whether the log runs on the server Open started in
// this process (rather than on a cluster).
func (l *Log) Embedded() bool { return l.srv != nil }

// URL is the NATS server's client URL (the embedded server's, or the
// cluster's as given): what kvscope-agent --nats is pointed at.
func (l *Log) URL() string { return l.url }

// Close ends the connection and the embedded server.
func (l *Log) Close() {
	l.closing.Store(true)
	if l.nc != nil {
		l.nc.Drain()
		l.nc.Close()
	}
	if l.srv != nil {
		l.srv.Shutdown()
		l.srv.WaitForShutdown()
	}
}

// serveUser is kvscope serve's own user on the embedded NATS server.
const serveUser = "kvscope-serve"

// natsAuth admits clients to the embedded NATS server: kvscope serve with
// its own random password (every permission), and agents publishing
// straight to the log (kvscope-agent --nats) with their name as the user
// and their credential as the password, each allowed to publish on its
// own subject only and to read its own inbox only (stream.InboxPrefix:
// where JetStream's acknowledgements come), at most perAgent connections
// each.
type natsAuth struct {
	internal, token string
	perAgent        int
	srv             *natsserver.Server
	logf            func(string, ...any)

	// The connections per user: those open at the last count (from the
	// server's own list, at most every 200 ms) that had started a second
	// before it, and those admitted since then (by admission time): an
	// over-estimate by the ones closed meanwhile, never an under-estimate.
	refused [refusedReasons]atomic.Uint64

	mu       sync.Mutex
	told     time.Time // when a refusal was last logged
	counting bool
	countAt  time.Time
	conns    map[string]int
	admitted map[string][]time.Time
}

// Check implements natsserver.Authentication.
func (a *natsAuth) Check(c natsserver.ClientAuthentication) bool {
	opts := c.GetOpts()
	same := func(x, y string) bool { return y != "" && subtle.ConstantTimeCompare([]byte(x), []byte(y)) == 1 }
	user := opts.Username
	switch {
	case user == serveUser:
		if !same(opts.Password, a.internal) {
			return false
		}
		c.RegisterUser(&natsserver.User{Username: serveUser})
		return true
	case event.CheckAgentName(user) != nil:
		a.refused[refusedCredential].Add(1)
		return false
	}
	scope, err := event.CredentialScope(opts.Password)
	if err == nil && scope != user {
		err = fmt.Errorf("the credential of %q is for that agent's own connections to NATS (user %q)", scope, user)
	}
	if err == nil {
		err = event.CheckCredential(a.token, opts.Password, user)
	}
	if err != nil {
		a.refused[refusedCredential].Add(1)
		a.log("NATS: agent %q from %s refused: %v", user, c.RemoteAddress(), err)
		return false
	}
	if !a.admit(user) {
		a.refused[refusedConnections].Add(1)
		a.log("NATS: agent %q from %s refused: it has %d connections already (at most %d an agent)", user, c.RemoteAddress(), a.perAgent, a.perAgent)
		return false
	}
	c.RegisterUser(&natsserver.User{Username: user, Permissions: &natsserver.Permissions{
		// Its events, stored, and its detail, not stored; its inbox, and
		// whether a browser draws it (its watch subject, and every agent's).
		Publish:   &natsserver.SubjectPermission{Allow: []string{event.Subject(user), event.DetailSubject(user)}},
		Subscribe: &natsserver.SubjectPermission{Allow: []string{stream.InboxPrefix(user) + ".>", event.WatchSubject(user), event.WatchAll}},
	}})
	return true
}

// Why the embedded server refused a client something, as counted.
const (
	refusedCredential  = iota // a connection with a credential that is not its user's
	refusedConnections        // a connection past the agent's or the server's bound
	refusedPublish            // a publish outside the client's own subject
	refusedSubscribe          // a subscription outside the client's own inbox
	refusedReasons
)

var refusedNames = [refusedReasons]string{"credential", "connections", "publish", "subscribe"}

// Refused is what the embedded server refused its clients so far, by
// reason (credential, connections, publish, subscribe); nil for a
// cluster.
func (l *Log) Refused() map[string]uint64 {
	if l.auth == nil {
		return nil
	}
	out := map[string]uint64{}
	for i, name := range refusedNames {
		out[name] = l.auth.refused[i].Load()
	}
	return out
}

// The embedded server's log: natsAuth is its logger, and keeps of it the
// refusals it counts (the server reports a permissions violation only
// there), logging each kind of refusal at most once a minute.
func (a *natsAuth) Noticef(string, ...any) {}
func (a *natsAuth) Warnf(string, ...any)   {}
func (a *natsAuth) Fatalf(string, ...any)  {}
func (a *natsAuth) Debugf(string, ...any)  {}
func (a *natsAuth) Tracef(string, ...any)  {}
func (a *natsAuth) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	switch {
	case strings.Contains(msg, "Publish Violation"):
		a.refused[refusedPublish].Add(1)
	case strings.Contains(msg, "Subscription Violation"):
		a.refused[refusedSubscribe].Add(1)
	case strings.Contains(strings.ToLower(msg), "maximum connections"):
		a.refused[refusedConnections].Add(1)
	default:
		return
	}
	a.mu.Lock()
	tell := time.Since(a.told) > time.Minute
	if tell {
		a.told = time.Now()
	}
	a.mu.Unlock()
	if tell {
		a.log("NATS: refused: %s (counted on /metrics as kvscope_nats_refused_total; told at most once a minute)", event.Clip(msg, 200))
	}
}

func (a *natsAuth) log(format string, args ...any) {
	if a.logf != nil {
		a.logf(format, args...)
	}
}

// admit counts a connection of user, refusing it past perAgent.
func (a *natsAuth) admit(user string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if a.srv != nil && !a.counting && now.Sub(a.countAt) > 200*time.Millisecond {
		a.counting = true
		go a.count(now) // not here: Check runs inside the server's connect path
	}
	if a.admitted == nil {
		a.admitted = map[string][]time.Time{}
	}
	cutoff := a.countAt.Add(-countedAfter)
	n := a.conns[user]
	for _, t := range a.admitted[user] {
		if t.After(cutoff) {
			n++
		}
	}
	if n >= a.perAgent {
		return false
	}
	a.admitted[user] = append(a.admitted[user], now)
	return true
}

// countedAfter is how long a connection is counted by its admission
// rather than by the server's list (a connection's start in the list
// precedes its admission).
const countedAfter = time.Second

// count reads the open connections per user from the server at at.
func (a *natsAuth) count(at time.Time) {
	conns := map[string]int{}
	cz, err := a.srv.Connz(&natsserver.ConnzOptions{Username: true, Limit: 1 << 20})
	cutoff := at.Add(-countedAfter)
	if err == nil {
		for _, ci := range cz.Conns {
			if !ci.Start.After(cutoff) {
				conns[ci.AuthorizedUser]++
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.counting = false
	if err != nil {
		return
	}
	a.conns, a.countAt = conns, at
	for user, times := range a.admitted { // what the list counts now goes
		keep := times[:0]
		for _, t := range times {
			if t.After(cutoff) {
				keep = append(keep, t)
			}
		}
		if len(keep) == 0 {
			delete(a.admitted, user)
		} else {
			a.admitted[user] = keep
		}
	}
}

// Redact drops a password from a NATS URL for messages.
func Redact(url string) string {
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

// Publish stores one frame of an agent's events (sequence numbers first
// to last, the last stamped lastTS, sent by the agent process epoch) and
// returns once JetStream has it (or says why not). Its message id is keyed
// with the server's secret, so no agent can make it; a "duplicate" answer
// counts only when the message JetStream names is this frame.
func (l *Log) Publish(ctx context.Context, agent, epoch string, frame []byte, first, last uint64, lastTS int64) error {
	subject := event.Subject(agent)
	return stream.PublishFrame(ctx, l.js, stream.Frame{Agent: agent, Epoch: epoch, Data: frame, First: first, Last: last, LastTS: lastTS,
		Key:    event.MessageIDKey(l.secret, agent),
		Forged: func(uint64) { l.forged.Add(1) },
		Stored: func(ctx context.Context, seq uint64) (bool, error) {
			gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			m, err := l.stream.GetMsg(gctx, seq)
			if err != nil {
				return false, err
			}
			h := m.Header
			return m.Subject == subject && h.Get(stream.HeaderEpoch) == epoch &&
				h.Get(stream.HeaderFirst) == strconv.FormatUint(first, 10) && h.Get(stream.HeaderLast) == strconv.FormatUint(last, 10), nil
		}})
}

// Stored is where an agent's events stand in the log: the last sequence
// number stored, its timestamp, and the agent process (epoch) that sent
// it.
type Stored struct {
	Seq   uint64
	TS    int64
	Epoch string
}

// LastStored is what the log holds last of an agent: an agent connecting
// to a replica resumes after it, whichever replica stored it.
func (l *Log) LastStored(ctx context.Context, agent string) (Stored, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := l.stream.GetLastMsgForSubject(gctx, event.Subject(agent))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Stored{}, nil
	}
	if err != nil {
		return Stored{}, err
	}
	seq, err := strconv.ParseUint(m.Header.Get(stream.HeaderLast), 10, 64)
	if err != nil {
		return Stored{}, fmt.Errorf("stream message %d: header %s %q: %w", m.Sequence, stream.HeaderLast, event.Clip(m.Header.Get(stream.HeaderLast), 40), err)
	}
	ts, _ := strconv.ParseInt(m.Header.Get(stream.HeaderLastTS), 10, 64)
	return Stored{Seq: seq, TS: ts, Epoch: m.Header.Get(stream.HeaderEpoch)}, nil
}
