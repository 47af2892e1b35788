package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/plan/planflag"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/kvscope/kvscope/server/api"
)

// pdFlags are the flags of kvscope pd (and kvscope oracle without --sweep).
type pdFlags struct {
	fs        *flag.FlagSet
	mf        modelFlags
	ef        *planflag.Set
	connector *string
	plans     *string
	layout    *string
	prompt    *int
	hit       *int
	maxPairs  *int64
	maxMemory *string
	// pLog and dLog plan each side from its engine's startup log; logs
	// says the command takes them (pd does, oracle not yet).
	pLog, dLog *string
	logs       bool
	explain    bool // pd --explain
	// sc reads two running engines (pd only: sideChannels).
	sc           sideChannelFlags
	sideChannels bool
}

func newPDFlags(fs *flag.FlagSet) *pdFlags {
	return &pdFlags{
		fs:        fs,
		mf:        newModelFlags(fs),
		ef:        planflag.Add(fs, "p", "d"),
		connector: fs.String("connector", "nixl", "nixl (D pulls), nixl-push (P pushes), offloading, simple-cpu-offload, or multi:a+b"),
		plans:     fs.String("plans", "auto", "auto (the TP-invariant plan where the connector needs matching groups), independent or invariant"),
		layout:    fs.String("layout", "split", "attention cache layout: split (K and V regions, HND) or blocks-first"),
		prompt:    fs.Int("prompt-tokens", 4096, "prompt tokens N of the request"),
		hit:       fs.Int("prefix-hit-tokens", 0, "tokens D already holds in its prefix cache"),
		maxPairs:  fs.Int64("max-pairs", api.DefaultLimits().MaxPairs, "refuse a transfer estimated above this many descriptor pairs"),
		maxMemory: fs.String("max-memory", fmt.Sprintf("%dMiB", cliMemory()>>20), "refuse work estimated to hold more memory (default: a quarter of this machine's)"),
		pLog:      fs.String("p-log", "", "plan P from its engine's startup log (with --d-log; --p- flags override what it says)"),
		dLog:      fs.String("d-log", "", "plan D from its engine's startup log (with --p-log; --d- flags override what it says)"),
		sc:        newSideChannelFlags(fs),
	}
}

// cliMemory is a command's default memory bound: a quarter of the
// machine (a server shares its sixteenth among requests).
func cliMemory() int64 { return max(api.TotalMemory()/4, 1<<30) }

// run plans the setup, bounds the transfer's cost from the plans and
// refuses it over --max-pairs or --max-memory, then computes it.
func (f *pdFlags) run(s xfer.Setup, need func(xfer.Cost) int64) (*xfer.PD, error) {
	mem, err := parseBytes(*f.maxMemory)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--max-memory %q: %v", *f.maxMemory, err)}
	}
	if *f.maxPairs <= 0 {
		return nil, &usageError{fmt.Errorf("--max-pairs %d: must be positive", *f.maxPairs)}
	}
	pd, err := xfer.Prepare(s)
	if err != nil {
		return nil, err
	}
	if _, ok := s.Connector.Transport(); !ok {
		pd.Preflight = pd.PreflightOf(nil)
		return pd, nil
	}
	lim := api.Limits{MaxPairs: *f.maxPairs, MaxMemory: mem}
	if _, err := lim.Admit(s, pd, false, need); err != nil {
		return nil, err
	}
	if pd.Transfer, err = pd.Compute(s.Request, s.KeepPairs); err != nil {
		return nil, err
	}
	pd.Preflight = pd.PreflightOf(pd.Transfer)
	return pd, nil
}

// setup builds the P/D setup from the parsed flags.
func (f *pdFlags) setup(keepPairs bool) (xfer.Setup, error) {
	pe, err := f.ef.Engine("p")
	if err != nil {
		return xfer.Setup{}, &usageError{err}
	}
	de, err := f.ef.Engine("d")
	if err != nil {
		return xfer.Setup{}, &usageError{err}
	}
	conn, err := xfer.ParseConnector(*f.connector)
	if err != nil {
		return xfer.Setup{}, &usageError{err}
	}
	var layout xfer.CacheLayout
	switch *f.layout {
	case "split", "":
		layout = xfer.SplitKV
	case "blocks-first":
		layout = xfer.BlocksFirst
	default:
		return xfer.Setup{}, &usageError{fmt.Errorf("--layout %q: want split or blocks-first", *f.layout)}
	}
	var m *model.Model // from the logs with --p-log and --d-log (fromLogs)
	switch {
	case f.sc.given() && !f.sideChannels:
		return xfer.Setup{}, &usageError{fmt.Errorf("--p-side-channel and --d-side-channel: only kvscope pd reads running engines so far")}
	case (*f.pLog != "" || *f.dLog != "") && !f.logs:
		return xfer.Setup{}, &usageError{fmt.Errorf("--p-log and --d-log: only kvscope pd plans from logs so far")}
	case *f.pLog == "" && *f.dLog == "":
		if m, err = f.mf.load(models()); err != nil {
			return xfer.Setup{}, err
		}
	}
	return xfer.Setup{
		Model: m, P: pe, D: de, Connector: conn, Plans: xfer.PlanChoice(*f.plans), Layout: layout, KeepPairs: keepPairs,
		Request: xfer.Request{PromptTokens: *f.prompt, PrefixHitTokens: *f.hit},
	}, nil
}

func runPD(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pd", flag.ContinueOnError)
	f := newPDFlags(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pairs := fs.Int("pairs", 0, "also list the first N descriptor pairs of every rank pair (and include them in --json)")
	explain := fs.Bool("explain", false, "say why each engine's plan has its groups and what makes P's and D's differ (--json: an \"explain\" object)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.explain = *explain
	f.logs = *f.pLog != "" || *f.dLog != ""
	if f.sc.given() {
		f.sideChannels = true
		return runPDSideChannels(f, *asJSON, *pairs, stdout)
	}
	if f.logs {
		return runPDLogs(f, *asJSON, *pairs, stdout)
	}
	s, err := f.setup(*pairs > 0)
	if err != nil {
		return err
	}
	r, err := f.run(s, api.PDMemory)
	if err != nil {
		return err
	}
	trimPairs(r, *pairs)
	if *asJSON {
		var x *xfer.PlanExplanation
		if f.explain {
			x = r.Explain()
		}
		if f.mf.src.resolved() || x != nil {
			return writeJSON(stdout, struct {
				*xfer.PD
				*modelSources
				Explain *xfer.PlanExplanation `json:"explain,omitempty"`
			}{r, f.mf.src, x})
		}
		return writeJSON(stdout, r)
	}
	writePDText(stdout, s, r, *pairs, f.mf.src)
	if f.explain {
		writePDExplain(stdout, r.Explain())
	}
	return nil
}

// writePDExplain prints why each side's own plan is what it is, and what
// makes them differ.
func writePDExplain(w io.Writer, x *xfer.PlanExplanation) {
	fmt.Fprintln(w)
	for _, l := range x.Difference {
		fmt.Fprintf(w, "P vs D: %s\n", l)
	}
	writeExplain(w, "P ", x.P)
	writeExplain(w, "D ", x.D)
}

// trimPairs keeps the first n descriptor pairs of every rank pair.
func trimPairs(r *xfer.PD, n int) {
	if r.Transfer == nil || n <= 0 {
		return
	}
	for i := range r.Transfer.RankPairs {
		rp := &r.Transfer.RankPairs[i]
		rp.Pairs = rp.Pairs[:min(len(rp.Pairs), n)]
	}
}

// writePDText prints both plans, the handshake, the advice and the
// descriptor totals.
func writePDText(w io.Writer, s xfer.Setup, r *xfer.PD, pairs int, src *modelSources) {
	inv := r.Invariant
	fmt.Fprintf(w, "vLLM profile %s: %s\n", r.VLLMVersion, r.VLLMProfile)
	fmt.Fprintf(w, "model %s, connector %s", s.Model.Name, r.Connector)
	if r.NeedsMatching {
		fmt.Fprintf(w, " (needs matching KV cache groups)")
	}
	fmt.Fprintf(w, ", transfer uses the %s plans\n", r.Plans)
	src.writeText(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\tP (TP %d)\tD (TP %d)\n", inv.PIndependent.Engine.TensorParallelSize, inv.DIndependent.Engine.TensorParallelSize)
	row := func(label string, f func(*plan.Plan) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", label, f(inv.PIndependent), f(inv.DIndependent))
	}
	invRow := func(label string, f func(*plan.Plan) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", label, f(inv.P), f(inv.D))
	}
	groups := func(p *plan.Plan) string {
		return fmt.Sprintf("%d groups of %d slots, block %d", p.NumGroups, p.Slots, p.BlockSize)
	}
	tokens := func(p *plan.Plan) string { return plan.Commas(p.KVCacheTokens) }
	row("independent plan", groups)
	row("  KV cache tokens", tokens)
	invRow("TP-invariant plan (inferred)", groups)
	invRow("  KV cache tokens", tokens)
	fmt.Fprintf(tw, "  TP-invariant vs independent\t%+.2f%%\t%+.2f%%\n", r.PCost.DiffPercent, r.DCost.DiffPercent)
	tw.Flush()
	fmt.Fprintf(w, "\nused plans: %d layers change group, slot or block size from P to D (same layout: %v, same block sizes: %v)\n",
		len(r.Diff.Changes), r.Diff.SameLayout, r.Diff.SameBlockSizes)
	fmt.Fprintf(w, "block size: %s\n", r.Advice.Log)
	if r.Note != "" && r.Transfer != nil {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	if r.Transfer == nil {
		fmt.Fprintf(w, "\n%s\n", r.Note)
		return
	}
	t := r.Transfer
	fmt.Fprintf(w, "\nhandshake %s\n", t.Handshake.Summary())
	for _, c := range t.Handshake.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %-18s %s\n", mark, c.Rule, c.Detail)
	}
	if t.Rejection != nil {
		fmt.Fprintf(w, "\nREJECTED (%s, %s): %s\n  fix: %s\n", t.Rejection.Rule, t.Rejection.Side, t.Rejection.Detail, t.Rejection.Fix)
		if t.Rejection.VLLMError != "" {
			fmt.Fprintf(w, "  vLLM's error: %s\n", t.Rejection.VLLMError)
		}
		if t.Rejection.Since == "" && t.Rejection.Source != "" {
			fmt.Fprintf(w, "  no release kvscope has read accepts it (%s)\n", t.Rejection.Source)
		}
		return
	}
	fmt.Fprintf(w, "\n%s %d prompt tokens (D prefix hit %d), path %s: %s\n", t.Mode, t.Request.PromptTokens, t.Request.PrefixHitTokens, t.Path, t.PathReason)
	for _, l := range t.Logs {
		fmt.Fprintf(w, "INFO %s\n", l)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rank pair\top\tdescriptors\tmerged\tbytes\t")
	for _, rp := range t.RankPairs {
		fmt.Fprintf(tw, "P%d -> D%d\t%s\t%s\t%s\t%s\t\n", rp.P, rp.D, rp.Op, plan.Commas(int64(rp.Descs)), plan.Commas(int64(rp.Merged)), plan.Commas(rp.Bytes))
	}
	fmt.Fprintf(tw, "total\t\t%s\t%s\t%s\t\n", plan.Commas(int64(t.Descs)), plan.Commas(int64(t.Merged)), plan.Commas(t.Bytes))
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group pair\tkind\tlayers\tdescriptors\tbytes\t")
	for _, g := range t.GroupPairs {
		fmt.Fprintf(tw, "P g%d -> D g%d\t%s\t%d\t%s\t%s\t\n", g.PGroup, g.DGroup, g.Kind, g.Layers, plan.Commas(int64(g.Descs)), plan.Commas(g.Bytes))
	}
	tw.Flush()
	if pairs > 0 {
		for _, rp := range t.RankPairs {
			fmt.Fprintf(w, "\nP%d -> D%d, first %d pairs:\n", rp.P, rp.D, len(rp.Pairs))
			for _, p := range rp.Pairs {
				fmt.Fprintf(w, "  P r%d+%#x -> D r%d+%#x  %6d B  %-8s %-7s idx [%d,%d) tokens [%d,%d) g%d->g%d\n",
					p.Src.Region, p.Src.Offset, p.Dst.Region, p.Dst.Offset, p.Len, p.Layer, p.Seg, p.Lo, p.Hi, p.Tokens.Lo, p.Tokens.Hi, p.PGroup, p.DGroup)
			}
		}
	}
	if len(t.Inferred) > 0 {
		fmt.Fprintln(w)
		for _, s := range t.Inferred {
			fmt.Fprintf(w, "inferred: %s\n", s)
		}
	}
}
