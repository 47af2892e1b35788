// Command kvscope-agent performs real KV transfers of a P/D deployment and
// streams descriptor events to a kvscope server.
//
// It discovers the host's GPUs (go-nvml; without a driver it says "no
// NVIDIA driver" once and goes on), plans the scenario's P and D engines
// with kvscope's core, registers every rank's KV regions with a transfer
// backend, and then for each request fills P's blocks as a prefill would,
// moves every descriptor pair, proves D's bytes with the byte oracle and
// reports it all as events.
//
//	kvscope-agent --server ws://127.0.0.1:8080 --token T
//	kvscope-agent --role p --listen :7700 --peer-token S       # on the P host
//	kvscope-agent --role d --peer phost:7700 --peer-token S --server ws://HOST:8080 --token T
//
// Backends: host (default; pure Go, host memory, real copies, rank pairs in
// parallel; also two agents over TCP with --role p / --role d) and nixl
// (build with -tags nixl where NIXL is installed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/agent/runner"
	"github.com/kvscope/kvscope/agent/scenario"
	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/agent/watch"
	modelcatalog "github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/plan/planflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(os.Stderr, "kvscope-agent: ", log.LstdFlags)
	if err := run(ctx, os.Args[1:], logger.Printf); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "kvscope-agent:", err)
		if ue := (*usageError)(nil); errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line the agent cannot run: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// checkName refuses an agent name the server would refuse (it checks
// names with event.CheckAgentName too), naming flag and the value.
// checkCredential refuses, before connecting, a --token that cannot
// carry agent name: the server's own token, or another agent's
// credential.
func checkCredential(token, name string) error {
	if token == "" {
		return nil // the server says what it wants
	}
	scope, err := event.CredentialScope(token)
	if err != nil {
		return &usageError{fmt.Errorf("--token: not an agent credential: give this agent its own, from kvscope serve agent-token %s on the server (the server's token is not accepted from agents)", name)}
	}
	if !event.InScope(scope, name) {
		return &usageError{fmt.Errorf("--token: the credential of %q cannot connect as %q (kvscope serve agent-token %s issues this agent's)", scope, name, name)}
	}
	return nil
}

func checkName(flag, name string) error {
	err := event.CheckAgentName(name)
	if err == nil {
		return nil
	}
	why := strings.TrimPrefix(err.Error(), fmt.Sprintf("agent name %q: ", name))
	return &usageError{fmt.Errorf("%s %q: %s (the server refuses any other name)", flag, name, why)}
}

// options are the agent's flags.
type options struct {
	config      runner.Config
	scenario    string
	edits       scenarioEdits // the flags that change the scenario's own fields
	engines     *planflag.Set // every engine flag, plainly and with p- / d-
	kvMiB       int64         // --kv-cache-memory-mib, the older spelling of --kv-cache-memory-bytes
	metricsAddr string
	hostMiB     int64
	warnings    []string // what the command line said in an older form
}

func parse(args []string) (*options, error) {
	fs := flag.NewFlagSet("kvscope-agent", flag.ContinueOnError)
	o := &options{}
	c := &o.config
	fs.StringVar(&c.ServerURL, "server", "", "kvscope server, ws://HOST:PORT (its /ws/agent endpoint; empty: log events here)")
	fs.StringVar(&c.Token, "token", os.Getenv("KVSCOPE_TOKEN"), "this agent's credential, from kvscope serve agent-token NAME on the server (default $KVSCOPE_TOKEN)")
	fs.StringVar(&c.NATS, "nats", "", "send the events straight to the event log, nats://HOST:PORT[,…] (kvscope serve's embedded NATS server, or the fleet's cluster) instead of --server")
	c.NATSAuth.Flags(fs, "a NATS credentials file for --nats (default: the agent's name as the user, --token as the password, as the embedded server takes)")
	fs.StringVar(&c.Backend, "backend", "host", "transfer backend: host or nixl (needs a -tags nixl build)")
	fs.StringVar(&c.Role, "role", "both", "both (P and D here), p (serve P's regions on --listen) or d (read from the P agent at --peer)")
	fs.StringVar(&c.Listen, "listen", "", "role p: TCP address D agents connect to, e.g. :7700")
	fs.StringVar(&c.Peer, "peer", "", "role d: the P agent's address, host:port")
	fs.StringVar(&c.PeerToken, "peer-token", os.Getenv("KVSCOPE_PEER_TOKEN"), "token D presents to P (default $KVSCOPE_PEER_TOKEN); required for --listen beyond loopback")
	fs.IntVar(&c.PeerConns, "peer-conns", 4, "role d: parallel connections to P")
	fs.StringVar(&c.Name, "name", "", "agent name on its events (default: the host name)")
	fs.Float64Var(&c.KVFromGPU, "kv-from-gpu", 0, "size each engine's KV cache as this fraction of the smallest GPU's memory (0: the scenario's)")
	fs.StringVar(&o.scenario, "scenario", "", "scenario JSON file (default: the built-in default scenario)")
	o.edits.text(fs, "model", "override the scenario's model (a bundled model name)", func(s *scenario.Scenario, v string) { s.Model = v })
	o.edits.text(fs, "draft", "override the scenario's draft: a bundled model or mtp", func(s *scenario.Scenario, v string) { s.Draft = v })
	o.edits.text(fs, "connector", "override the scenario's connector: nixl (D pulls) or nixl-push (P pushes)", func(s *scenario.Scenario, v string) { s.Connector = v })
	// The scenario's engines take every engine flag kvscope pd takes, by
	// vLLM's names: plain for both engines, --p-NAME or --d-NAME for one
	// (--kv-cache-memory-bytes is host memory with --backend host).
	o.engines = planflag.Add(fs, "p", "d")
	fs.Int64Var(&o.kvMiB, "kv-cache-memory-mib", 0, "deprecated: --kv-cache-memory-bytes NMiB")
	o.edits.number(fs, "rate", "override the scenario's requests per second (0: as fast as the backend goes)", func(s *scenario.Scenario, x float64) { s.Rate = x })
	o.edits.whole(fs, "requests", "override the scenario's request count (0: unlimited)", func(s *scenario.Scenario, n int) { s.Requests = n })
	o.edits.number(fs, "duration", "override the scenario's duration in seconds (0: until stopped)", func(s *scenario.Scenario, x float64) { s.DurationS = x })
	o.edits.whole(fs, "verify-every", "override: prove every Nth request with the oracle (1: every one)", func(s *scenario.Scenario, n int) { s.VerifyEvery = n })
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address, e.g. 127.0.0.1:9464")
	fs.Int64Var(&o.hostMiB, "host-memory-mib", 1024, "host memory the host backend may allocate, MiB")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	streaming := c.ServerURL != "" || c.NATS != ""
	if c.Name == "" {
		name, err := runner.DefaultName(c.Role)
		if err != nil {
			return nil, err
		}
		if streaming && event.CheckAgentName(name) != nil {
			return nil, &usageError{fmt.Errorf("the host name %q, the default --name, is no agent name the server takes (letters, digits and . _ - : @ / +): give --name", name)}
		}
		c.Name = name
	} else if err := checkName("--name", c.Name); err != nil {
		return nil, err
	}
	if streaming && (c.NATSAuth.Creds == "" && c.NATSAuth.User == "") {
		if err := checkCredential(c.Token, c.Name); err != nil {
			return nil, err
		}
	}
	s := scenario.Default()
	if o.scenario != "" {
		var err error
		if s, err = scenario.Load(o.scenario); err != nil {
			return nil, err
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, edit := range o.edits {
		edit(&s)
	}
	if set["kv-cache-memory-mib"] {
		if o.kvMiB <= 0 || o.kvMiB > 1<<30 {
			return nil, fmt.Errorf("--kv-cache-memory-mib %d: must be positive", o.kvMiB)
		}
		if set["kv-cache-memory-bytes"] {
			return nil, &usageError{fmt.Errorf("--kv-cache-memory-mib and --kv-cache-memory-bytes: give one (--kv-cache-memory-mib is the older spelling)")}
		}
		o.warnings = append(o.warnings, fmt.Sprintf("--kv-cache-memory-mib is deprecated: give --kv-cache-memory-bytes %dMiB", o.kvMiB))
		s.P.KVCacheMemoryBytes, s.D.KVCacheMemoryBytes = o.kvMiB<<20, o.kvMiB<<20
	}
	for _, side := range []struct {
		name string
		e    *plan.Engine
	}{{"p", &s.P}, {"d", &s.D}} {
		if err := o.engines.Overlay(side.name, side.e, nil); err != nil {
			return nil, &usageError{err}
		}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if c.ServerURL != "" {
		u, err := serverURL(c.ServerURL)
		if err != nil {
			return nil, err
		}
		c.ServerURL = u
	}
	if c.NATS != "" {
		if c.ServerURL != "" {
			return nil, fmt.Errorf("--nats and --server: give one (the events go to the event log or to a server)")
		}
		if err := natsURLs(c.NATS); err != nil {
			return nil, err
		}
		if c.NATSAuth.Creds == "" && c.NATSAuth.User == "" {
			c.NATSAuth.User, c.NATSAuth.Password = c.Name, c.Token // kvscope serve's embedded server
		} else if c.NATSAuth.User != "" {
			c.NATSAuth.Password = os.Getenv("KVSCOPE_NATS_PASSWORD")
		}
	}
	if o.hostMiB <= 0 {
		return nil, fmt.Errorf("--host-memory-mib %d: must be positive", o.hostMiB)
	}
	if c.Role == "p" && c.PeerToken == "" && !loopback(c.Listen) {
		return nil, fmt.Errorf("--listen %s listens beyond loopback: give --peer-token", c.Listen)
	}
	c.Scenario, c.HostLimit = s, o.hostMiB<<20
	return o, nil
}

// scenarioEdits are the changes the command line makes to the scenario's
// own fields, in the order given, applied over the scenario once it is
// loaded.
type scenarioEdits []func(*scenario.Scenario)

// text registers a flag whose value sets a string field.
func (e *scenarioEdits) text(fs *flag.FlagSet, name, usage string, set func(*scenario.Scenario, string)) {
	fs.Func(name, usage, func(v string) error {
		*e = append(*e, func(s *scenario.Scenario) { set(s, v) })
		return nil
	})
}

// number registers a flag whose value sets a number.
func (e *scenarioEdits) number(fs *flag.FlagSet, name, usage string, set func(*scenario.Scenario, float64)) {
	fs.Func(name, usage, func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return errors.New("want a number")
		}
		*e = append(*e, func(s *scenario.Scenario) { set(s, x) })
		return nil
	})
}

// whole registers a flag whose value sets a whole number.
func (e *scenarioEdits) whole(fs *flag.FlagSet, name, usage string, set func(*scenario.Scenario, int)) {
	fs.Func(name, usage, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("want a whole number")
		}
		*e = append(*e, func(s *scenario.Scenario) { set(s, n) })
		return nil
	})
}

// natsURLs checks --nats: comma-separated nats:// (or tls://) URLs.
func natsURLs(s string) error {
	for _, one := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls") {
			return fmt.Errorf("--nats %q: want nats://HOST:PORT[,…]", one)
		}
	}
	return nil
}

// serverURL is the agent endpoint of a server given as ws(s)://HOST:PORT
// (or with the /ws/agent path already there; http(s) is taken as ws(s)).
func serverURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("--server %q: want ws://HOST:PORT", s)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("--server %q: scheme %q, want ws or wss", s, u.Scheme)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/ws/agent"
	}
	return u.String(), nil
}

// loopback reports whether addr names a loopback host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

func run(ctx context.Context, args []string, logf func(string, ...any)) error {
	if len(args) > 0 && args[0] == "watch" {
		return runWatch(ctx, args[1:], logf)
	}
	o, err := parse(args)
	if err != nil {
		return err
	}
	c := o.config
	c.Catalog = catalog()
	c.Logf = logf
	for _, w := range o.warnings {
		logf("%s", w)
	}
	c.Metrics = metrics.New()
	if o.metricsAddr != "" {
		stop, err := serveMetrics(o.metricsAddr, c.Metrics, logf)
		if err != nil {
			return err
		}
		defer stop()
	}
	if c.ServerURL == "" {
		return runner.Start(ctx, c)
	}
	// A server that refuses the agent for good (its name, its token)
	// stops the agent with the server's reason, rather than transfers
	// whose events go nowhere.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	c.Streamer = &stream.Streamer{Agent: c.Name, URL: c.ServerURL, Token: c.Token, Logf: logf, SplitDetail: true,
		OnRefused: func(re *stream.RefusedError) { stop(re) }}
	err = runner.Start(ctx, c)
	if re := (*stream.RefusedError)(nil); errors.As(context.Cause(ctx), &re) {
		return re
	}
	return err
}

// runWatch is kvscope-agent watch: the NIXL telemetry of the vLLM
// engines on this host, as events (see runner.Watch).
func runWatch(ctx context.Context, args []string, logf func(string, ...any)) error {
	fs := flag.NewFlagSet("kvscope-agent watch", flag.ContinueOnError)
	c := runner.WatchConfig{Logf: logf, Metrics: metrics.New()}
	fs.StringVar(&c.Dir, "nixl-telemetry-dir", os.Getenv("NIXL_TELEMETRY_DIR"), "the engines' NIXL_TELEMETRY_DIR (default $NIXL_TELEMETRY_DIR); this watcher must be its only reader")
	fs.StringVar(&c.ServerURL, "server", "", "kvscope server, ws://HOST:PORT (empty: log events here)")
	fs.StringVar(&c.Token, "token", os.Getenv("KVSCOPE_TOKEN"), "this agent's credential, from kvscope serve agent-token NAME on the server (default $KVSCOPE_TOKEN)")
	fs.StringVar(&c.Name, "name", "", "prefix of the watched agents' names (default: the host name)")
	fs.DurationVar(&c.Interval, "interval", 100*time.Millisecond, "how often the rings are read (NIXL flushes every 100 ms by default)")
	urls := fs.String("vllm-metrics", "", "comma-separated vLLM /metrics URLs, each optionally p= or d= (each engine's NIXL histograms and cache_config_info)")
	scenarioFile := fs.String("scenario", "", "the deployment's model and P and D engine flags (a scenario file): each p=/d= engine's observed plan is held against kvscope's")
	fs.DurationVar(&c.ScrapeEvery, "scrape-every", 5*time.Second, "how often --vllm-metrics are scraped (and the scrape's timeout)")
	sides := fs.String("side-channel", "", "opt-in: comma-separated engines' NIXL side channels, [p=|d=]HOST:PORT[/TP] (VLLM_NIXL_SIDE_CHANNEL_PORT + DP index), asked for each rank's handshake metadata, one well-formed request at a time; with --scenario and one p= and one d= channel, the pair's preflight (as kvscope pd --p-side-channel judges it) heads the Deployment panel")
	fs.DurationVar(&c.SideChannelEvery, "side-channel-every", time.Minute, "how often --side-channel engines are asked again")
	fs.Int64Var(&c.SideChannelMaxBytes, "side-channel-max-bytes", watch.DefaultMaxAnswerBytes, "the most bytes a --side-channel answer may hold, all its ZMTP frames together (a frame claiming more is refused from its header)")
	fs.IntVar(&c.MaxAgents, "max-agents", runner.DefaultMaxAgents, "the most agents this watcher streams (rings, scraped engines, side channel agents), one server connection each; the rest are counted and logged")
	fs.IntVar(&c.MaxSeries, "max-series", watch.DefaultMaxSeries, "the most series a --vllm-metrics scrape may hold; a scrape with more is an error")
	fs.DurationVar(&c.StuckAfter, "stuck-after", runner.StuckAfterFromEnv(os.Getenv), "a NIXL request posted and not completed for this long is a stuck_transfer (default: $VLLM_NIXL_ABORT_REQUEST_TIMEOUT seconds, set it as the engine's, else 2m)")
	metricsAddr := fs.String("metrics-addr", "", "serve the watcher's Prometheus /metrics on this address, e.g. 127.0.0.1:9464 (engine pairs, rank pairs, stuck transfers, plan mismatches)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{err}
	}
	if c.Name != "" {
		// Each watched agent is named NAME/<its ring>.
		if err := checkName("--name", c.Name); err != nil {
			return err
		}
	}
	c.Sides = map[string]string{}
	for _, u := range strings.Split(*urls, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		side := ""
		if s, rest, ok := strings.Cut(u, "="); ok && (s == "p" || s == "d" || s == "P" || s == "D") {
			side, u = strings.ToUpper(s), rest
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("--vllm-metrics %q: want [p=|d=]http://HOST:PORT/metrics", u)
		}
		c.VLLMMetrics = append(c.VLLMMetrics, u)
		if side != "" {
			c.Sides[u] = side
		}
	}
	for _, v := range strings.Split(*sides, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		sc, err := parseSideChannel(v)
		if err != nil {
			return err
		}
		c.SideChannels = append(c.SideChannels, sc)
	}
	if *scenarioFile != "" {
		s, err := scenario.Load(*scenarioFile)
		if err != nil {
			return err
		}
		m, err := s.LoadModel(catalog())
		if err != nil {
			return err
		}
		c.Model, c.P, c.D, c.Agents, c.Connector = m, s.P, s.D, s.Agents, s.Connector
	}
	if c.SideChannelEvery < time.Second || c.SideChannelEvery > time.Hour {
		return fmt.Errorf("--side-channel-every %s: must be between 1s and 1h", c.SideChannelEvery)
	}
	if c.ScrapeEvery < 100*time.Millisecond || c.ScrapeEvery > 10*time.Minute {
		return fmt.Errorf("--scrape-every %s: must be between 100ms and 10m", c.ScrapeEvery)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.SideChannelMaxBytes < 1<<10 || c.SideChannelMaxBytes > 1<<30 {
		return fmt.Errorf("--side-channel-max-bytes %d: must be between 1024 and 1073741824", c.SideChannelMaxBytes)
	}
	if c.MaxAgents < 1 || c.MaxAgents > 1<<16 {
		return fmt.Errorf("--max-agents %d: must be between 1 and 65536", c.MaxAgents)
	}
	if c.MaxSeries < 1 || c.MaxSeries > 10_000_000 {
		return fmt.Errorf("--max-series %d: must be between 1 and 10000000", c.MaxSeries)
	}
	if c.Interval < time.Millisecond || c.Interval > time.Minute {
		return fmt.Errorf("--interval %s: must be between 1ms and 1m", c.Interval)
	}
	if c.StuckAfter < 100*time.Millisecond || c.StuckAfter > 24*time.Hour {
		return fmt.Errorf("--stuck-after %s: must be between 100ms and 24h", c.StuckAfter)
	}
	if c.ServerURL != "" {
		u, err := serverURL(c.ServerURL)
		if err != nil {
			return err
		}
		c.ServerURL = u
		name := c.Name
		if name == "" {
			name, _ = os.Hostname()
		}
		if err := checkCredential(c.Token, name); err != nil {
			return err
		}
	}
	if *metricsAddr != "" {
		stop, err := serveMetrics(*metricsAddr, c.Metrics, logf)
		if err != nil {
			return err
		}
		defer stop()
	}
	return runner.Watch(ctx, c)
}

// serveMetrics serves a registry's /metrics on addr until stop.
func serveMetrics(addr string, reg *metrics.Registry, logf func(string, ...any)) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", reg.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	logf("metrics on http://%s/metrics", ln.Addr())
	return func() { srv.Close() }, nil
}

// parseSideChannel reads one --side-channel entry, [p=|d=]HOST:PORT[/TP].
func parseSideChannel(v string) (runner.SideChannel, error) {
	var sc runner.SideChannel
	bad := func(why string) (runner.SideChannel, error) {
		return sc, fmt.Errorf("--side-channel %q: %s (want [p=|d=]HOST:PORT[/TP])", v, why)
	}
	rest := v
	if s, r, ok := strings.Cut(rest, "="); ok {
		if s != "p" && s != "d" && s != "P" && s != "D" {
			return bad("the side must be p or d")
		}
		sc.Side, rest = strings.ToUpper(s), r
	}
	if a, tp, ok := strings.Cut(rest, "/"); ok {
		n, err := strconv.Atoi(tp)
		if err != nil || n < 1 || n > 1024 {
			return bad("TP must be between 1 and 1024")
		}
		sc.TP, rest = n, a
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" {
		return bad("not HOST:PORT")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return bad("the port must be between 1 and 65535")
	}
	sc.Addr = rest
	return sc, nil
}

// catalog is the bundled model configs, embedded in the binary.
func catalog() model.Catalog { return modelcatalog.Bundled() }
