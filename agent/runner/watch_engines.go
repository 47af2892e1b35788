package runner

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/xfer"
)

// SideChannel is one vLLM engine's NIXL handshake listener
// (VLLM_NIXL_SIDE_CHANNEL_HOST:PORT + its data-parallel index).
type SideChannel struct {
	Addr string // host:port
	Side string // P, D or "" (not compared)
	// TP is how many ranks to ask for; 0 takes the scenario's TP for Side,
	// else 1. vLLM's listener dies on a rank it does not have, so only
	// ranks known to exist are asked for.
	TP int
}

// link ties a NIXL agent (a telemetry ring) to its engine's rank.
type link struct {
	Side   string // P or D
	Rank   int
	Engine string // the side channel's address, or "" when mapped in the scenario
	// Handshake is the handshake version the side channel's answer
	// implies, with the releases that send it ("" when mapped).
	Handshake string
}

// engineLine is how the Deployment panel names a linked agent's engine.
func (l link) engineLine(tp int) string {
	s := fmt.Sprintf("%s rank %d", l.Side, l.Rank)
	if tp > 0 {
		s += fmt.Sprintf(" of TP %d", tp)
	}
	if l.Engine != "" {
		s += " · side channel " + l.Engine
		if l.Handshake != "" {
			s += " · " + l.Handshake
		}
		return s
	}
	return s + " · mapped in the scenario"
}

// engine is the scenario's flags for side P or D.
func (w *watcher) engine(side string) plan.Engine {
	if side == "D" {
		return w.cfg.D
	}
	return w.cfg.P
}

// tp is the TP size of a side: the scenario's, else the largest a side
// channel of that side was given, else 0 (unknown).
func (w *watcher) tp(side string) int {
	if w.cfg.Model != nil {
		return max(w.engine(side).TensorParallelSize, 1)
	}
	n := 0
	for _, sc := range w.cfg.SideChannels {
		if strings.EqualFold(sc.Side, side) {
			n = max(n, sc.TP)
		}
	}
	return n
}

// hello (re)announces a NIXL agent with what is known of it: its ring,
// and the engine rank it belongs to.
func (w *watcher) hello(name string, a *watched) {
	w.mu.Lock()
	l, linked := w.links[name]
	version := a.ring
	w.mu.Unlock()
	host, _ := os.Hostname()
	what := fmt.Sprintf("NIXL agent %s, telemetry ring version %d in %s", name, version, w.cfg.Dir)
	if version == 0 {
		what = fmt.Sprintf("NIXL agent %s (no telemetry ring of it in %s)", name, w.cfg.Dir)
	}
	h := &event.HelloData{Host: host, Backend: "nixl (watched)", Memory: "VRAM", Role: "watch",
		GPUs: []event.GPU{}, NoGPU: "watching another process's NIXL agent", Scenario: what}
	if linked {
		h.Engine = l.engineLine(w.tp(l.Side))
		if w.cfg.Model != nil {
			h.Model = w.cfg.Model.Name
		}
	}
	w.emit(a, event.Event{Kind: event.Hello, Hello: h})
}

// sideChannel asks an engine's side channel for every rank's handshake
// metadata, one request at a time, now and every SideChannelEvery: each
// answer links the rank's NIXL agent to the engine and is held against
// kvscope's registration for that rank. A failing channel is one error
// (and another when it fails again after answering).
func (w *watcher) sideChannel(ctx context.Context, sc SideChannel) {
	every := w.cfg.SideChannelEvery
	if every <= 0 {
		every = time.Minute
	}
	timeout := w.cfg.SideChannelTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ranks := sc.TP
	if ranks == 0 {
		ranks = max(w.tp(strings.ToUpper(sc.Side)), 1)
	}
	side := strings.ToUpper(sc.Side)
	seen := map[int]string{}
	agents := map[int]string{} // rank -> the NIXL agent it last named
	failing := false
	silent := map[int]time.Time{} // rank -> when it first failed to answer, while it fails
	for {
		round := xfer.Observed{Side: xfer.Side(side), Addr: sc.Addr}
		for r := 0; r < ranks; r++ {
			md, err := watch.QueryRank(ctx, sc.Addr, r, timeout, w.cfg.SideChannelMaxBytes)
			if ctx.Err() != nil {
				return
			}
			w.setTarget(sc.Addr, "side_channel", err == nil)
			w.setRank(sc.Addr, r, err == nil)
			if err != nil {
				a := w.quiet("nixl-side-channel-" + strings.ReplaceAll(sc.Addr, ":", "-"))
				if !failing {
					w.emit(a, event.Event{Kind: event.Error, Error: &event.ErrorData{Status: "ERR_REMOTE_DISCONNECT", Message: event.Clip(err.Error(), maxMessage)}})
				}
				if _, ok := silent[r]; !ok {
					silent[r] = time.Now()
					w.emit(a, event.Event{Kind: event.StuckTransfer, Stuck: &event.StuckData{Engine: fmt.Sprintf("%s rank %d · side channel %s", cmp.Or(side, "?"), r, sc.Addr),
						Source: "side_channel", SinceNS: silent[r].UnixNano(),
						Reason: event.Clip("the side channel stopped answering for this rank: check that the engine is up (its scheduler's nixl_handshake_listener), its port, and the network between the hosts; "+err.Error(), maxMessage)}})
				}
				failing = true
				break // the next round asks again
			}
			if since, ok := silent[r]; ok {
				delete(silent, r)
				a := w.quiet("nixl-side-channel-" + strings.ReplaceAll(sc.Addr, ":", "-"))
				w.emit(a, event.Event{Kind: event.StuckTransfer, Stuck: &event.StuckData{Engine: fmt.Sprintf("%s rank %d · side channel %s", cmp.Or(side, "?"), r, sc.Addr),
					Source: "side_channel", SinceNS: since.UnixNano(), AgeS: time.Since(since).Seconds(), Cleared: true, Reason: "the rank answers again"}})
			}
			failing = false
			if side != "P" && side != "D" {
				side = "?"
			}
			round.Ranks = append(round.Ranks, md.Advertised())
			l := link{Side: side, Rank: r, Engine: sc.Addr, Handshake: handshakeLine(md)}
			w.mu.Lock()
			if prev, ok := agents[r]; ok && prev != md.Agent && w.links[prev] == l {
				delete(w.links, prev) // the rank's agent restarted under a new name: one link per rank
			}
			agents[r] = md.Agent
			old, had := w.links[md.Agent]
			w.links[md.Agent] = l
			w.mu.Unlock()
			a := w.agent(md.Agent)
			if !had || old != l {
				w.hello(md.Agent, a)
			}
			key := fmt.Sprint(md.BlockSize, md.NumBlocks, md.BlockLens, md.Regions, md.Members)
			if seen[r] == key {
				continue
			}
			seen[r] = key
			ms := w.compareRank(md.Agent, l, md)
			w.setMismatches(md.Agent, ms)
			for _, m := range ms {
				w.emit(a, event.Event{Kind: event.PlanMismatch, Mismatch: &m})
			}
		}
		if len(round.Ranks) == ranks {
			w.preflight(round)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// handshakeLine names the handshake version a side channel's answer
// implies and the releases kvscope has read that send it.
func handshakeLine(md *watch.RankMetadata) string {
	s := fmt.Sprintf("handshake v%d", md.Version)
	if md.Version > 0 {
		s += " or later" // versions that add no member look like the one before
	}
	switch n := len(md.Releases); {
	case n == 1:
		s += " (as vLLM " + md.Releases[0] + " sends it)"
	case n > 1:
		s += fmt.Sprintf(" (as vLLM %s to %s send it)", md.Releases[0], md.Releases[n-1])
	}
	if len(md.Unknown) > 0 {
		s += fmt.Sprintf("; members kvscope does not know: %s", strings.Join(md.Unknown, ", "))
	}
	return s
}

// compareRank holds what a rank's side channel says against kvscope's
// registration of that rank: block size, blocks, regions, each region's
// block length and, where the engine sends them, each region's members.
// The layout is FlashAttention's split K/V unless the engine names a
// FlashInfer backend (or the model has state layers, where vLLM always
// uses blocks-first); kvscope's registration is its model of vLLM's
// register_kv_caches, so a difference can be kvscope's as well as the
// deployment's (the event says which source each side comes from).
func (w *watcher) compareRank(agent string, l link, md *watch.RankMetadata) []event.MismatchData {
	if w.cfg.Model == nil || (l.Side != "P" && l.Side != "D") {
		return nil
	}
	eng, side := w.engine(l.Side), xfer.Side(l.Side)
	src := fmt.Sprintf("side channel %s rank %d", l.Engine, l.Rank)
	mismatch := func(field, observed, predicted string) event.MismatchData {
		return event.MismatchData{Engine: agent, Side: l.Side, Field: field, Observed: observed, Predicted: predicted, Source: src}
	}
	p, err := plan.New(w.cfg.Model, eng)
	if err != nil {
		return []event.MismatchData{mismatch("plan", fmt.Sprintf("block_size=%d, num_blocks=%d", md.BlockSize, md.NumBlocks), "no plan: "+err.Error())}
	}
	layout := xfer.SplitKV
	if strings.Contains(strings.ToUpper(md.Backend), "FLASHINFER") {
		layout = xfer.BlocksFirst
	}
	reg, err := xfer.Register(w.cfg.Model, p, side, l.Rank, layout, nil)
	if err != nil {
		return []event.MismatchData{mismatch("registration", fmt.Sprintf("%d regions", md.Regions), "no registration: "+err.Error())}
	}
	pred := xfer.MetadataOf(reg)
	var out []event.MismatchData
	if prof, err := eng.Profile(); err == nil {
		h := prof.Handshake()
		if want, _ := vllm.VersionOfMembers(h.Members, h.Wrapped); !h.KvscopeOwn && want != md.Version {
			out = append(out, mismatch("nixl_connector_version", fmt.Sprintf("v%d (from %s)", md.Version, cmp.Or(md.VersionFrom, "no versioned member")),
				fmt.Sprintf("v%d's members (%s speaks v%d)", want, prof.Label, h.Version)))
		}
	}
	if md.BlockSize != pred.BlockSize {
		out = append(out, mismatch("block_size", strconv.Itoa(md.BlockSize), strconv.Itoa(pred.BlockSize)))
	}
	if md.NumBlocks != pred.NumBlocks {
		out = append(out, mismatch("num_blocks", strconv.FormatInt(md.NumBlocks, 10), strconv.FormatInt(pred.NumBlocks, 10)))
	}
	if md.Regions != len(pred.BlockLens) {
		out = append(out, mismatch("regions", strconv.Itoa(md.Regions), strconv.Itoa(len(pred.BlockLens))))
	}
	if !slices.Equal(md.BlockLens, pred.BlockLens) {
		out = append(out, mismatch("block_lens", xfer.ListText(md.BlockLens), xfer.ListText(pred.BlockLens)))
	}
	if md.Members != nil {
		for i := range min(len(md.Members), len(pred.Members)) {
			var names []string
			for _, m := range pred.Members[i] {
				names = append(names, m.Layer)
			}
			if !xfer.SameLayers(md.Members[i], names) { // vLLM names module paths, kvscope L<n>: by layer number
				out = append(out, mismatch(fmt.Sprintf("region_members[%d]", i), xfer.ListText(md.Members[i]), xfer.ListText(names)))
				break // one region says enough; the rest usually follow
			}
		}
	}
	return out
}

// quiet is an agent that sends no 1 Hz samples: a side channel's errors.
// Its first event is a hello, as every agent's is: a server and a browser
// tell a restarted watcher's side channel by it, instead of taking its
// errors for ones they already have.
func (w *watcher) quiet(name string) *watched {
	a := w.agent(name)
	w.mu.Lock()
	a.quiet = true
	fresh := !a.announced
	a.announced = true
	w.mu.Unlock()
	if fresh {
		host, _ := os.Hostname()
		w.emit(a, event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: host, Backend: "nixl (watched)", Memory: "VRAM", Role: "watch",
			GPUs: []event.GPU{}, NoGPU: "reporting an engine's NIXL side channel", Engine: name,
			Scenario: "a side channel's failures: the engine's handshake metadata could not be read"}})
	}
	return a
}

// band draws a linked agent's NIXL request in the deployment's bands: a
// batch between the initiator's rank and the remote rank it reads or
// writes, as vLLM's TP mapping pairs them. NIXL's telemetry names neither
// the remote agent nor the layers, so the request is one batch of all
// groups (group 0 of the drawing); where a rank talks to k remote ranks
// (the initiator's TP smaller), the bytes are split evenly over the k,
// and the batch's layer says so.
func (w *watcher) band(l link, request string, t *watch.Transfer) {
	pTP, dTP := w.tp("P"), w.tp("D")
	if pTP == 0 || dTP == 0 || (l.Side != "P" && l.Side != "D") {
		return
	}
	a := w.deployment(pTP, dTP)
	mine, theirs := dTP, pTP
	if l.Side == "P" {
		mine, theirs = pTP, dTP
	}
	var remote []int
	note := "one NIXL request (all layers and groups: telemetry does not name them)"
	if mine >= theirs {
		remote = []int{l.Rank / (mine / max(theirs, 1))}
	} else {
		k := theirs / mine
		for i := range k {
			remote = append(remote, l.Rank*k+i)
		}
		note = fmt.Sprintf("one NIXL request split evenly over %d remote ranks (telemetry names neither the remote agent nor the layers)", k)
	}
	w.mu.Lock()
	a.requests++
	a.window = append(a.window, done{at: time.Now(), bytes: int64(t.Bytes), us: float64(t.XferUS)})
	w.mu.Unlock()
	for _, r := range remote {
		b := &event.BatchData{Request: request, PRank: r, DRank: l.Rank, Layer: note, Descs: 0,
			Bytes: int64(t.Bytes) / int64(len(remote)), EndNS: int64(t.XferUS) * 1000, Timing: event.Measured}
		if l.Side == "P" {
			b.PRank, b.DRank = l.Rank, r
		}
		w.emit(a, event.Event{Kind: event.DescBatch, Batch: b})
	}
}

// deploymentSummary is the deployment agent's handshake summary.
func deploymentSummary(pTP, dTP int) string {
	return fmt.Sprintf("watched vLLM engines: P TP %d, D TP %d; NIXL-measured requests per rank pair, as vLLM's TP mapping pairs the ranks (inferred: NIXL's telemetry does not name the remote agent)", pTP, dTP)
}

// deployment is the engine pair's agent: its bands are the linked rings'
// NIXL requests per rank pair, its samples their rate and p50/p99 (a row
// of the Deployment panel), announced with both sides' TP sizes.
func (w *watcher) deployment(pTP, dTP int) *watched {
	a := w.agent("deployment")
	w.mu.Lock()
	fresh := !a.announced
	a.announced = true
	w.mu.Unlock()
	if fresh {
		host, _ := os.Hostname()
		w.emit(a, event.Event{Kind: event.Hello, Hello: &event.HelloData{Host: host, Backend: "nixl (watched)", Memory: "VRAM", Role: "watch",
			GPUs: []event.GPU{}, NoGPU: "drawing the watched engines' NIXL requests", Engine: fmt.Sprintf("P TP %d → D TP %d · every linked rank", pTP, dTP),
			Scenario: "the engine pair: the NIXL requests of every ring linked to a rank, drawn per rank pair"}})
		w.emit(a, event.Event{Kind: event.Handshake, Handshake: &event.HandshakeData{PTP: pTP, DTP: dTP, Summary: deploymentSummary(pTP, dTP)}})
	}
	return a
}

// preflight judges the engine pair from their side channels once both
// sides have been read in full, as kvscope pd --p-side-channel
// --d-side-channel does (xfer.PreflightObserved against the scenario's
// plans), and sends the verdict to the Deployment panel: a handshake event
// of the deployment agent, again whenever what the engines advertise
// changes. It needs the scenario (the model and both engines' flags) and
// exactly one side channel per side.
func (w *watcher) preflight(o xfer.Observed) {
	if w.cfg.Model == nil || (o.Side != xfer.P && o.Side != xfer.D) {
		return
	}
	n := map[string]int{}
	for _, sc := range w.cfg.SideChannels {
		n[strings.ToUpper(sc.Side)]++
	}
	if n["P"] != 1 || n["D"] != 1 {
		return
	}
	w.mu.Lock()
	w.observed[o.Side] = o
	p, okP := w.observed[xfer.P]
	d, okD := w.observed[xfer.D]
	key := fmt.Sprint(p, d)
	fresh := okP && okD && key != w.judged
	if fresh {
		w.judged = key
	}
	w.mu.Unlock()
	if !fresh {
		return
	}
	pTP, dTP := w.tp("P"), w.tp("D")
	h := &event.HandshakeData{PTP: pTP, DTP: dTP, Summary: deploymentSummary(pTP, dTP) + fmt.Sprintf("; preflight from the side channels P %s, D %s", p.Addr, d.Addr)}
	if op, err := w.judge(p, d); err != nil {
		h.Verdict, h.Sentence = "unverified", event.Clip("kvscope could not plan the scenario's engines: "+err.Error(), maxSentence)
	} else {
		h.Verdict, h.Sentence = op.Verdict, event.Clip(op.Sentence, maxSentence)
		if op.Rejection != nil {
			h.Rejection = op.Rejection.Rule
		}
	}
	w.emit(w.deployment(pTP, dTP), event.Event{Kind: event.Handshake, Handshake: h})
}

// maxSentence bounds the preflight's sentence in an event (bytes).
const maxSentence = 2048

// preflightPrompt is the request the preflight's sentence sizes (tokens).
const preflightPrompt = 1024

// judge plans the scenario's engines and judges what they advertise.
func (w *watcher) judge(p, d xfer.Observed) (*xfer.ObservedPreflight, error) {
	conn, err := xfer.ParseConnector(cmp.Or(w.cfg.Connector, "nixl"))
	if err != nil {
		return nil, err
	}
	r, err := xfer.Prepare(xfer.Setup{Model: w.cfg.Model, P: w.cfg.P, D: w.cfg.D, Connector: conn, Layout: xfer.SplitKV})
	if err != nil {
		return nil, err
	}
	var t *xfer.Transfer
	if _, ok := conn.Transport(); ok {
		if t, err = r.Compute(xfer.Request{PromptTokens: preflightPrompt}, false); err != nil {
			return nil, err
		}
	}
	r.Preflight = r.PreflightOf(t)
	return r.PreflightObserved(p, d), nil
}
