package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"mime"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/runner"
	"github.com/kvscope/kvscope/agent/scenario"
	kvapp "github.com/kvscope/kvscope/app"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/server/api"
	"github.com/kvscope/kvscope/server/internal/hub"
	"github.com/kvscope/kvscope/server/live"
	"github.com/kvscope/kvscope/server/live/eventlog"
	"github.com/kvscope/kvscope/static"
	"github.com/kvscope/kvscope/web"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// serveOptions configure the kvscope server.
type serveOptions struct {
	Addr  string
	Token string // agents' bearer token; a random one when empty (only the embedded agent knows it)
	// RequireToken: the token was given (--token), so browsers and scripts
	// need it too (see access).
	RequireToken bool
	AllowedHosts []string   // --allowed-host: more Host names to answer to
	Limits       api.Limits // the API's limits (zero: api.DefaultLimits)
	Agent        string     // embedded or none
	Record       string     // --record: a JSONL file of every event
	// Bus is the JetStream event log (nil: the hub keeps events in memory
	// only, as replay and the tests run it).
	Bus *eventlog.Log
	// Replay is how many stored frames a replica reads back at start for
	// its browsers' history (0: live.DefaultReplay).
	Replay uint64
	// AgentBudget is what each agent may have stored a second (the zero
	// value: no bound).
	AgentBudget live.Budget
	// MaxConnsPerClient bounds the connections one remote IP may hold
	// open (0: DefaultMaxConnsPerClient; negative: unlimited).
	MaxConnsPerClient int
	// AgentMemory is the host memory the embedded agent's KV pools may
	// take (0: DefaultAgentMemoryMiB).
	AgentMemory int64
	Logf        func(format string, args ...any)
	// Hub resolves a request's "model" or "draft" that is not bundled as
	// a Hub id (nil: bundled names and inline configs only, as replay and
	// the tests run it).
	Hub *hub.Resolver
}

func runServe(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "agent-token" {
		return runAgentToken(args[1:], stdout)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	token := fs.String("token", "", "the server's token (16 characters at least): browsers log in with it at /login, scripts send it as a bearer, and each agent's credential is made from it (kvscope serve agent-token NAME); required to listen beyond loopback")
	var allowed hostList
	fs.Var(&allowed, "allowed-host", "a Host name the server also answers to (repeatable; loopback names and the --addr host always)")
	agent := fs.String("agent", "embedded", "embedded (a host-memory agent in this process, streaming the default scenario) or none")
	record := fs.String("record", "", "append every agent event to this JSONL file (kvscope replay plays it back); a regular file, never a pipe or device")
	agentMem := fs.Int64("agent-memory-mib", DefaultAgentMemoryMiB, "host memory (MiB) the embedded agent's KV pools may take in all, P's ranks and D's: Run live fits a view's deployment into it")
	conns := fs.Int("max-conns-per-client", DefaultMaxConnsPerClient, fmt.Sprintf("connections one client (remote IP address) may hold open, 1 to %d; more are closed as they come", MaxConnsPerClientLimit))
	budget := budgetFlags(fs)
	lim := limitFlags(fs)
	busFlags := natsFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	l, err := lim()
	if err != nil {
		return &usageError{err}
	}
	if *conns < 1 || *conns > MaxConnsPerClientLimit {
		return &usageError{fmt.Errorf("--max-conns-per-client %d: must be between 1 and %d", *conns, MaxConnsPerClientLimit)}
	}
	b, err := budget()
	if err != nil {
		return &usageError{err}
	}
	if *agentMem < 16 || *agentMem > 1<<20 {
		return &usageError{fmt.Errorf("--agent-memory-mib %d: must be between 16 and %d", *agentMem, 1<<20)}
	}
	o := serveOptions{AgentMemory: *agentMem << 20, Addr: *addr, Token: *token, RequireToken: *token != "", AllowedHosts: allowed, Agent: *agent, Record: *record,
		Limits: l, MaxConnsPerClient: *conns, AgentBudget: b, Logf: log.New(stdout, "kvscope: ", log.LstdFlags).Printf,
		Hub: models().Hub}
	// Keep the heap near what admission allows: the runtime collects
	// sooner rather than growing past it (a soft limit, with room for the
	// server itself and the embedded agent).
	debug.SetMemoryLimit(l.MaxMemory + 768<<20)
	if err := o.check(); err != nil {
		return &usageError{err}
	}
	if o.Token == "" {
		o.Token = randomToken()
	}
	var rec io.Writer
	if o.Record != "" {
		f, err := openRecord(o.Record)
		if err != nil {
			return err
		}
		defer f.Close()
		rec = f
	}
	bo, err := busFlags()
	if err != nil {
		return &usageError{err}
	}
	bo.Logf, bo.Token = o.Logf, o.Token
	// Without its event log the server still serves what it can: the app,
	// the API and a live view kept in memory (what it says at start).
	switch b, err := eventlog.Open(context.Background(), bo); {
	case err != nil:
		o.Logf("event log unavailable: %v; serving without it: live events stay in this process's memory only (none survive a restart, other replicas do not see them)", err)
	case b.Embedded():
		defer b.Close()
		o.Logf("event log: embedded NATS JetStream on %s, data in %s (agents may publish there with kvscope-agent --nats)", b.URL(), bo.DataDir)
		o.Bus = b
	default:
		defer b.Close()
		o.Logf("event log: JetStream stream %s on %s", eventlog.StreamName, eventlog.Redact(b.URL()))
		o.Bus = b
	}
	srv := newServer(catalog(), o, rec)
	return srv.listenAndServe(o, func(ctx context.Context, addr string) {
		if srv.embedded != nil {
			cat, url := catalog(), "ws://"+addr+"/ws/agent"
			srv.embedded.begin(ctx, func(ctx context.Context, s scenario.Scenario) {
				runEmbeddedAgent(ctx, cat, url, o.Token, s, srv.embedded.memory, o.Logf)
			}, embeddedScenario())
		}
	})
}

// CPUProfileEnv names a file kvscope serve writes a CPU profile of its
// whole run into (until SIGINT or SIGTERM): a diagnostic, not a flag.
const CPUProfileEnv = "KVSCOPE_CPUPROFILE"

// listenAndServe serves on o.Addr until SIGINT or SIGTERM; started runs
// once the listener is up, with a context that ends at shutdown.
func (srv *server) listenAndServe(o serveOptions, started func(ctx context.Context, addr string)) error {
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	maxConns := o.MaxConnsPerClient
	if maxConns == 0 {
		maxConns = DefaultMaxConnsPerClient
	}
	ln = limitConns(ln, maxConns, func(string) {
		srv.metrics.Add("kvscope_http_refused_connections_total", "Connections closed as accepted: their client (remote IP) held --max-conns-per-client open already.", 1)
	})
	hs := newHTTPServer(srv.handler)
	o.Logf("serving the app on http://%s (open it in a browser)", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if path := os.Getenv(CPUProfileEnv); path != "" {
		// A diagnostic: the fleet benchmark profiles its replicas with it.
		if f, err := os.Create(path); err == nil {
			if err := pprof.StartCPUProfile(f); err == nil {
				defer func() { pprof.StopCPUProfile(); f.Close() }()
			}
		}
	}
	started(ctx, ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	srv.hub.Close()
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(shut)
}

// embeddedScenario is what the embedded agent streams at start: the
// default scenario.
func embeddedScenario() scenario.Scenario {
	s := scenario.Default()
	s.Name = "embedded"
	return s
}

// runEmbeddedAgent streams a scenario from this process, over a real
// websocket to this server, so make run shows live transfers at once (and
// "Run live" shows the app's own configuration). The hub counts its events
// into the server's /metrics, as for any agent, so the agent keeps no
// registry of its own.
func runEmbeddedAgent(ctx context.Context, cat model.Catalog, url, token string, s scenario.Scenario, memory int64, logf func(string, ...any)) {
	cred, err := event.IssueCredential(token, "embedded")
	if err != nil {
		logf("embedded agent: %v", err)
		return
	}
	err = runner.Start(ctx, runner.Config{Name: "embedded", Scenario: s, Catalog: cat, ServerURL: url, Token: cred,
		HostLimit: memory, Logf: logf})
	if err != nil && ctx.Err() == nil {
		logf("embedded agent stopped: %v", err)
	}
}

func randomToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// check refuses to listen beyond loopback without a token, and a token
// shorter than api.MinTokenLen.
func (o serveOptions) check() error {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", o.Addr, err)
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || ip != nil && ip.IsLoopback()
	if !loopback && o.Token == "" {
		return fmt.Errorf("--addr %s listens beyond loopback: give --token", o.Addr)
	}
	if n := utf8.RuneCountInString(o.Token); o.Token != "" && n < api.MinTokenLen {
		return fmt.Errorf("--token: %d characters, want at least %d (a random one: openssl rand -hex 16)", n, api.MinTokenLen)
	}
	switch o.Agent {
	case "embedded", "none":
	default:
		return fmt.Errorf("--agent %q: want embedded or none", o.Agent)
	}
	return nil
}

// openRecord opens --record's file to append to, creating it. Only a
// regular file is taken: a named pipe would block the server's start until
// a reader came (and stall the hub when the reader went), a device or
// directory is no recording. The file is opened without blocking and
// checked again once open, so a pipe put in its place meanwhile is
// refused too.
func openRecord(name string) (*os.File, error) {
	if fi, err := os.Stat(name); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("--record %s: %s, not a regular file: give a file to append the events to", name, fileKind(fi.Mode()))
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--record %s: %w", name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("--record %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("--record %s: %s, not a regular file: give a file to append the events to", name, fileKind(fi.Mode()))
	}
	return f, nil
}

// fileKind names what a file that is not a regular file is.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m.IsDir():
		return "a directory"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "a special file (" + m.Type().String() + ")"
}

func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// server is the kvscope server's handlers and state.
type server struct {
	handler  http.Handler // the routes behind the access rules
	api      *api.Server
	hub      *live.Hub
	metrics  *metrics.Registry
	embedded *embeddedAgent // nil with --agent none
}

// newServer routes the app, its assets, the JSON API, the websocket hub and
// /metrics.
func newServer(cat model.Catalog, o serveOptions, record io.Writer) *server {
	kvapp.Register(cat)
	reg := metrics.New()
	h := live.New(live.Options{Metrics: reg, Log: o.Bus, Replay: o.Replay, Record: record, AgentBudget: o.AgentBudget, Logf: o.Logf})
	mux := http.NewServeMux()
	a := api.New(cat, o.Limits)
	if o.Hub != nil {
		a.ResolveHubIDs(o.Hub)
	}
	a.Register(mux)
	var emb *embeddedAgent
	if o.Agent == "embedded" {
		emb = &embeddedAgent{memory: o.AgentMemory}
		if emb.memory == 0 {
			emb.memory = embeddedHostLimit
		}
	}
	mux.Handle("/api/live/run", liveRunHandler(emb, cat, a))
	mux.Handle("/ws/agent", h.AgentHandler(o.Token))
	mux.Handle("/ws/live", h.LiveHandler())
	mux.Handle("/metrics", reg.Handler())
	mux.Handle("/", appHandler(appHubEnv(o.Hub)))
	uiToken := ""
	if o.RequireToken {
		uiToken = o.Token
	}
	return &server{handler: api.NewAccess(o.Addr, uiToken, o.AllowedHosts).Wrap(mux), api: a, hub: h, metrics: reg, embedded: emb}
}

// newMux is the server's handler with no recording.
func newMux(cat model.Catalog, o serveOptions) http.Handler { return newServer(cat, o, nil).handler }

// limitFlags registers the API's limits on fs; the returned function
// reads them once parsed.
func limitFlags(fs *flag.FlagSet) func() (api.Limits, error) {
	d := api.DefaultLimits()
	mem := fs.String("max-memory", fmt.Sprintf("%dMiB", d.MaxMemory>>20), "memory the heavy API requests may hold at once, by their estimates (default: a sixteenth of this machine's)")
	pairs := fs.Int64("max-pairs", d.MaxPairs, "descriptor pairs one API request may compute")
	resp := fs.String("max-response", fmt.Sprintf("%dMiB", d.MaxResponse>>20), "estimated size of one API response")
	wait := fs.Duration("queue-wait", d.QueueWait, "how long a heavy request waits for memory before 429")
	queue := fs.Int("max-queue", d.MaxQueue, fmt.Sprintf("heavy requests that may wait for memory or a core at once, 0 to %d (429 beyond; 0: none waits)", api.MaxQueueLimit))
	tuneDeadline := fs.Duration("tune-deadline", d.TuneDeadline, fmt.Sprintf("how long one /api/tune may run, its wait in the queue included, at most %s (under the server's 60 s write timeout); a search still running then answers what it has, marked partial", api.MaxTuneDeadline))
	running := fs.Int("max-running", d.MaxRunning, fmt.Sprintf("heavy requests computing at once, 1 to %d (default: the cores but one)", api.MaxRunningLimit))
	return func() (api.Limits, error) {
		l := d
		var err error
		if l.MaxMemory, err = parseBytes(*mem); err != nil {
			return l, fmt.Errorf("--max-memory %q: %v", *mem, err)
		}
		if l.MaxResponse, err = parseBytes(*resp); err != nil {
			return l, fmt.Errorf("--max-response %q: %v", *resp, err)
		}
		if *pairs <= 0 {
			return l, fmt.Errorf("--max-pairs %d: must be positive", *pairs)
		}
		if *wait < 0 || *wait > 10*time.Minute {
			return l, fmt.Errorf("--queue-wait %s: must be between 0 and 10m", *wait)
		}
		if *queue < 0 || *queue > api.MaxQueueLimit {
			return l, fmt.Errorf("--max-queue %d: must be between 0 and %d", *queue, api.MaxQueueLimit)
		}
		if *running < 1 || *running > api.MaxRunningLimit {
			return l, fmt.Errorf("--max-running %d: must be between 1 and %d", *running, api.MaxRunningLimit)
		}
		if *tuneDeadline <= 0 || *tuneDeadline > api.MaxTuneDeadline {
			return l, fmt.Errorf("--tune-deadline %s: must be above 0 and at most %s", *tuneDeadline, api.MaxTuneDeadline)
		}
		l.MaxPairs, l.QueueWait, l.MaxQueue, l.MaxRunning, l.TuneDeadline = *pairs, *wait, *queue, *running, *tuneDeadline
		return l, nil
	}
}

// budgetFlags registers each agent's budget on fs; the returned function
// reads it once parsed.
func budgetFlags(fs *flag.FlagSet) func() (live.Budget, error) {
	d := live.DefaultAgentBudget
	events := fs.Float64("agent-events-per-sec", d.EventsPerSec, "events each agent may have stored a second (5 s of burst); past it its descriptor batches, samples and transfers are shed and counted (0: no bound)")
	bytes := fs.String("agent-bytes-per-sec", fmt.Sprintf("%dMiB", int64(d.BytesPerSec)>>20), "bytes of events each agent may have stored a second, as --agent-events-per-sec (0: no bound)")
	return func() (live.Budget, error) {
		b := d
		if *events < 0 || *events > 1e7 {
			return b, fmt.Errorf("--agent-events-per-sec %g: must be between 0 and 10000000", *events)
		}
		n, err := int64(0), error(nil)
		if *bytes != "0" {
			n, err = parseBytes(*bytes)
		}
		if err != nil || n < 0 {
			return b, fmt.Errorf("--agent-bytes-per-sec %q: want a size such as 4MiB (0: no bound)", event.Clip(*bytes, 64))
		}
		b.EventsPerSec, b.BytesPerSec = *events, float64(n)
		return b, nil
	}
}

// hostList is a repeatable string flag.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

func (h *hostList) Set(v string) error {
	if v == "" || strings.ContainsAny(v, "/:@ ") {
		return fmt.Errorf("want a host name such as kvscope.example")
	}
	*h = append(*h, v)
	return nil
}

// appHubEnv tells the app which Hub it fetches config.json from (the
// server's HF_ENDPOINT) and whether it fetches at all (HF_HUB_OFFLINE):
// the keys kvapp.HubEndpointEnv and kvapp.HubOfflineEnv of go-app's
// environment. A nil resolver tells nothing: the app asks the Hub itself.
func appHubEnv(r *hub.Resolver) map[string]string {
	if r == nil {
		return nil
	}
	env := map[string]string{kvapp.HubEndpointEnv: r.Endpoint()}
	if r.Offline() {
		env[kvapp.HubOfflineEnv] = "1"
	}
	return env
}

// appHandler is go-app's handler with every asset served from this binary:
// nothing is loaded from another host (a model's config.json the user
// names by its Hub id is fetched by the browser from the Hub, env's
// endpoint).
func appHandler(env map[string]string) *app.Handler {
	return &app.Handler{
		Env:         env,
		Name:        "kvscope",
		ShortName:   "kvscope",
		Title:       "kvscope: KV cache groups and P/D transfers",
		Description: "Plans vLLM's hybrid KV cache groups and proves prefill/decode KV transfers byte by byte.",
		Icon:        app.Icon{Default: "/web/icon-192.png", Large: "/web/icon-512.png", SVG: "/web/icon.svg", Maskable: "/web/icon-192.png"},
		Styles:      []string{"/web/kvscope.css"},
		// ECharts (about 1 MB) is deferred, so that it does not hold the
		// first paint of the server-rendered numbers; kvscope.js (small)
		// stays synchronous, so it is there before app.wasm can call it,
		// and draws a chart only once window.echarts exists.
		Scripts:    []string{"/web/kvscope.js"},
		RawHeaders: []string{`<script defer src="/web/echarts.min.js"></script>`},
		Resources:  newAssets(),
		// No progress figure: app.wasm comes gzip-encoded, so the
		// browser's byte count and the length header disagree (go-app
		// showed NaN%). The page's numbers are the server's until then.
		LoadingLabel: "starting the app in your browser (the numbers shown are the server's, from the same Go code)",
		ThemeColor:   "#1f2937",
	}
}

// assets serves /web/ from the embedded web root (app.wasm) and the
// embedded static assets, app.wasm gzip-compressed.
type assets struct {
	webFS, staticFS fs.FS
	gzOnce          sync.Once
	gz              []byte // app.wasm compressed, when make did not ship app.wasm.gz
}

func newAssets() *assets { return &assets{webFS: web.Files(), staticFS: static.Files()} }

// Resolve leaves paths as they are: everything is served from this handler.
func (a *assets) Resolve(p string) string { return p }

func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(path.Clean(r.URL.Path), "/web/")
	if name == "app.wasm" {
		a.serveWasm(w, r)
		return
	}
	// Only the app's assets: the static tree, and from the web root only
	// app.wasm (above), never its Go or README files.
	for _, candidate := range []struct {
		fsys fs.FS
		name string
	}{{a.staticFS, name}, {a.staticFS, "vendor/" + name}} {
		data, err := fs.ReadFile(candidate.fsys, candidate.name)
		if err != nil {
			continue
		}
		if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.Write(data)
		return
	}
	http.NotFound(w, r)
}

// serveWasm sends app.wasm, gzip-compressed when the browser accepts it.
func (a *assets) serveWasm(w http.ResponseWriter, r *http.Request) {
	raw, err := fs.ReadFile(a.webFS, "app.wasm")
	if err != nil {
		http.Error(w, "app.wasm is not built into this binary: run make run (it builds web/app.wasm first)", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/wasm")
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Write(raw)
		return
	}
	gz, err := fs.ReadFile(a.webFS, "app.wasm.gz")
	if err != nil {
		a.gzOnce.Do(func() { a.gz = gzipBytes(raw) })
		gz = a.gz
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Set("Vary", "Accept-Encoding")
	w.Write(gz)
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}
