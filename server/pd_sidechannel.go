package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/kvscope/kvscope/server/api"
)

// kvscope pd --p-side-channel --d-side-channel: the preflight of two
// running engines. kvscope plans each side from the engine flags (or the
// startup logs), asks each engine's NIXL side channel for the handshake
// metadata of every rank the plan has (one well-formed request at a time,
// each with a deadline: vLLM's listener stops on a request it cannot
// decode or a rank it does not have), optionally scrapes
// vllm:cache_config_info, and judges what the engines advertise
// (xfer.PreflightObserved) before printing the plan's own pd text.

// sideChannelFlags are pd's flags for running engines.
type sideChannelFlags struct {
	pAddr, dAddr       *string
	pMetrics, dMetrics *string
	timeout            *time.Duration
	maxBytes           *int64
}

func newSideChannelFlags(fs *flag.FlagSet) sideChannelFlags {
	return sideChannelFlags{
		pAddr:    fs.String("p-side-channel", "", "opt-in: P's NIXL side channel, HOST:PORT (VLLM_NIXL_SIDE_CHANNEL_PORT + DP index), asked for the metadata of each rank of P's TP (vLLM's listener stops on a rank it does not have: give P's TP right); with --d-side-channel"),
		dAddr:    fs.String("d-side-channel", "", "opt-in: D's NIXL side channel, HOST:PORT, asked for each rank of D's TP; with --p-side-channel"),
		pMetrics: fs.String("p-metrics", "", "with the side channels: P's vLLM /metrics URL, scraped once for vllm:cache_config_info"),
		dMetrics: fs.String("d-metrics", "", "with the side channels: D's vLLM /metrics URL, scraped once for vllm:cache_config_info"),
		timeout:  fs.Duration("side-channel-timeout", 5*time.Second, "how long each side channel request (and each metrics scrape) may wait for its answer"),
		maxBytes: fs.Int64("side-channel-max-bytes", watch.DefaultMaxAnswerBytes, "the most bytes a side channel answer may hold, all its ZMTP frames together"),
	}
}

// given reports whether any flag of running engines is set.
func (c sideChannelFlags) given() bool {
	return *c.pAddr != "" || *c.dAddr != "" || *c.pMetrics != "" || *c.dMetrics != ""
}

// check validates the flags before anything is planned or asked.
func (c sideChannelFlags) check() error {
	if *c.pAddr == "" || *c.dAddr == "" {
		return &usageError{fmt.Errorf("--p-side-channel %q, --d-side-channel %q: give both engines' side channels, HOST:PORT (--p-metrics and --d-metrics go with them)", *c.pAddr, *c.dAddr)}
	}
	for _, a := range []struct{ flag, v string }{{"p-side-channel", *c.pAddr}, {"d-side-channel", *c.dAddr}} {
		host, port, err := net.SplitHostPort(a.v)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return &usageError{fmt.Errorf("--%s %q: want HOST:PORT", a.flag, a.v)}
		}
	}
	for _, m := range []struct{ flag, v string }{{"p-metrics", *c.pMetrics}, {"d-metrics", *c.dMetrics}} {
		if m.v == "" {
			continue
		}
		if u, err := url.Parse(m.v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &usageError{fmt.Errorf("--%s %q: want http://HOST:PORT/metrics", m.flag, m.v)}
		}
	}
	if *c.timeout < 10*time.Millisecond || *c.timeout > time.Minute {
		return &usageError{fmt.Errorf("--side-channel-timeout %s: must be between 10ms and 1m", *c.timeout)}
	}
	if *c.maxBytes < 1<<10 || *c.maxBytes > 1<<30 {
		return &usageError{fmt.Errorf("--side-channel-max-bytes %d: must be between 1024 and 1073741824", *c.maxBytes)}
	}
	return nil
}

// sideFlags are one side's flag names and values.
type sideFlags struct {
	side    xfer.Side
	flag    string // p or d
	addr    string
	metrics string
	tp      int
}

// readEngines reads both engines at once, each one rank at a time; the
// errors of both are returned together.
func (c sideChannelFlags) readEngines(ctx context.Context, pTP, dTP int) (p, d xfer.Observed, err error) {
	sides := []sideFlags{{xfer.P, "p", *c.pAddr, *c.pMetrics, pTP}, {xfer.D, "d", *c.dAddr, *c.dMetrics, dTP}}
	var obs [2]xfer.Observed
	var errs [2]error
	var wg sync.WaitGroup
	for i, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs[i], errs[i] = c.readEngine(ctx, s)
		}()
	}
	wg.Wait()
	return obs[0], obs[1], errors.Join(errs[0], errs[1])
}

// readEngine asks one engine's side channel for ranks 0 to tp-1, stopping
// at the first that fails (an engine that does not answer one rank in
// time would make every later rank wait as long), then scrapes its
// metrics if given.
func (c sideChannelFlags) readEngine(ctx context.Context, s sideFlags) (xfer.Observed, error) {
	o := xfer.Observed{Side: s.side, Addr: s.addr}
	for rank := range s.tp {
		md, err := watch.QueryRank(ctx, s.addr, rank, *c.timeout, *c.maxBytes)
		if err != nil {
			var qe *watch.QueryError
			if errors.As(err, &qe) {
				err = qe.Err
			}
			more := ""
			if rank < s.tp-1 {
				more = fmt.Sprintf(" (ranks %d to %d not asked)", rank+1, s.tp-1)
			}
			return o, fmt.Errorf("--%s-side-channel %s (%s) rank %d of TP %d: %w%s", s.flag, s.addr, s.side, rank, s.tp, err, more)
		}
		o.Ranks = append(o.Ranks, md.Advertised())
	}
	if s.metrics == "" {
		return o, nil
	}
	ctx, cancel := context.WithTimeout(ctx, *c.timeout)
	defer cancel()
	engines, err := watch.Scrape(ctx, &http.Client{}, s.metrics, 0)
	if err != nil {
		return o, fmt.Errorf("--%s-metrics (%s): %w", s.flag, s.side, err)
	}
	var idx []string
	for k, e := range engines {
		if e.Cache != nil {
			idx = append(idx, k)
		}
	}
	if len(idx) == 0 {
		return o, fmt.Errorf("--%s-metrics %s (%s): no vllm:cache_config_info series (is it a vLLM engine's /metrics?)", s.flag, s.metrics, s.side)
	}
	sort.Strings(idx) // engine "0" first: the engine whose side channel is the base port
	o.CacheConfig, o.CacheSource = engines[idx[0]].Cache, s.metrics
	if len(idx) > 1 {
		o.CacheSource += " engine " + idx[0]
	}
	return o, nil
}

// oneEngine refuses two flags that reach one engine: P and D with one
// engine id.
func oneEngine(p, d xfer.Observed) error {
	if len(p.Ranks) == 0 || len(d.Ranks) == 0 || p.Ranks[0].EngineID == "" || p.Ranks[0].EngineID != d.Ranks[0].EngineID {
		return nil
	}
	return &usageError{fmt.Errorf("--p-side-channel %s and --d-side-channel %s answer as one engine (engine_id %s): give P's and D's own listeners", p.Addr, d.Addr, p.Ranks[0].EngineID)}
}

// sameEngineAsLog refuses a startup log and a side channel of different
// engines: a log whose vLLM release sends other handshake members than
// the side channel's answer has, or that logged another block size.
func sameEngineAsLog(flag, file string, r *check.Result, o xfer.Observed) error {
	if r == nil || len(o.Ranks) == 0 {
		return nil
	}
	a := o.Ranks[0]
	differ := func(what string) error {
		return fmt.Errorf("--%s-log %s and --%s-side-channel %s are not one engine: %s", flag, file, flag, o.Addr, what)
	}
	if r.VLLMVersion != "" {
		if v, err := vllm.ParseVersion(r.VLLMVersion); err == nil {
			h := vllm.For(v).Handshake()
			if want, _ := vllm.VersionOfMembers(h.Members, h.Wrapped); want != a.Handshake {
				from := a.HandshakeFrom
				if from == "" {
					from = "no versioned member"
				}
				return differ(fmt.Sprintf("the log's vLLM %s sends handshake v%d's members, rank 0 answers with v%d's (from %s)", r.VLLMVersion, want, a.Handshake, from))
			}
		}
	}
	for _, l := range r.Lines {
		if l.Name == "block_size" && l.Logged != "" && l.Logged != strconv.Itoa(a.BlockSize) {
			return differ(fmt.Sprintf("the log's engine logged block_size %s (line %d), rank 0 advertises %d", l.Logged, l.Line, a.BlockSize))
		}
	}
	return nil
}

// pdObserved is kvscope pd --p-side-channel --d-side-channel --json.
type pdObserved struct {
	Observed *xfer.ObservedPreflight `json:"observed"`
	P        xfer.Observed           `json:"p_engine"`
	D        xfer.Observed           `json:"d_engine"`
	PLog     *check.Result           `json:"p_log,omitempty"`
	DLog     *check.Result           `json:"d_log,omitempty"`
	PD       *xfer.PD                `json:"pd"`
	api.ModelSources
}

// runPDSideChannels is kvscope pd with --p-side-channel and
// --d-side-channel (and the logs, when given, to plan from).
func runPDSideChannels(f *pdFlags, asJSON bool, pairs int, stdout io.Writer) error {
	if err := f.sc.check(); err != nil {
		return err
	}
	var pl, dl sideLog
	s, err := f.setup(pairs > 0)
	if err != nil {
		return err
	}
	if f.logs {
		var pair *check.Pair
		if pl, dl, pair, err = f.fromLogs(); err != nil {
			return err
		}
		s.Model, s.P, s.D = pair.Model, pair.Engines[0], pair.Engines[1]
	}
	r, err := f.run(s, api.PDMemory)
	if err != nil {
		return err
	}
	trimPairs(r, pairs)
	pp, dp := r.UsedPlans()
	po, do, err := f.sc.readEngines(context.Background(), max(pp.Engine.TensorParallelSize, 1), max(dp.Engine.TensorParallelSize, 1))
	if err != nil {
		return err
	}
	if err := oneEngine(po, do); err != nil {
		return err
	}
	if f.logs {
		if err := errors.Join(sameEngineAsLog("p", pl.File, pl.Check, po), sameEngineAsLog("d", dl.File, dl.Check, do)); err != nil {
			return err
		}
	}
	op := r.PreflightObserved(po, do)
	if asJSON {
		return writeJSON(stdout, pdObserved{Observed: op, P: po, D: do, PLog: pl.Check, DLog: dl.Check, PD: r, ModelSources: f.mf.src.api()})
	}
	writeObserved(stdout, op, po, do)
	fmt.Fprintf(stdout, "kvscope's plan: %s\n  %s\n\n", r.Preflight.Verdict, r.Preflight.Sentence)
	if f.logs {
		writeSideLogs(stdout, pl, dl)
	}
	writeFacets(stdout, r.Preflight.Facets)
	writePDText(stdout, s, r, pairs, f.mf.src)
	return nil
}

// writeObserved prints the running engines' preflight: the verdict, who
// answered, their values side by side and every difference.
func writeObserved(w io.Writer, op *xfer.ObservedPreflight, engines ...xfer.Observed) {
	fmt.Fprintf(w, "observed verdict: %s\n  %s\n\n", op.Verdict, op.Sentence)
	for _, o := range engines {
		ids := map[string]bool{}
		for _, a := range o.Ranks {
			ids[a.EngineID] = true
		}
		line := fmt.Sprintf("%s side channel %s: %d ranks answered", o.Side, o.Addr, len(o.Ranks))
		if len(o.Ranks) == 1 {
			line = fmt.Sprintf("%s side channel %s: rank 0 answered", o.Side, o.Addr)
		}
		if len(o.Ranks) > 0 {
			line += ", engine_id " + o.Ranks[0].EngineID
			if len(ids) > 1 {
				line += fmt.Sprintf(" (%d engine ids)", len(ids))
			}
		}
		if o.CacheSource != "" {
			line += "; vllm:cache_config_info from " + o.CacheSource
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w, "  (the version is the lowest whose metadata has every member sent: versions that add no member look like the one before)")
	fmt.Fprintln(w)
	writeFacets(w, op.Facets)
	if len(op.Differences) == 0 {
		fmt.Fprintf(w, "against kvscope's plans: both engines advertise what kvscope plans (the compatibility hash is not compared: kvscope's is a stand-in)\n\n")
	} else {
		fmt.Fprintf(w, "against kvscope's plans (the compatibility hash is not compared: kvscope's is a stand-in):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, d := range op.Differences {
			note := d.Rule
			if d.Note != "" {
				note += ": " + d.Note
			}
			fmt.Fprintf(tw, "  %s %s\tobserved %s\t%s %s\t(%s)\t%s\n", d.Side, d.Field, d.Observed, strings.TrimPrefix(d.From, "kvscope's "), d.Expected, d.Source, note)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	for _, s := range op.Inferred {
		fmt.Fprintf(w, "inferred: %s\n", s)
	}
}
