package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vlog"
	"github.com/kvscope/kvscope/core/xfer"
	"github.com/kvscope/kvscope/server/api"
)

// sideLog is one engine's startup log planned as kvscope check plans it.
type sideLog struct {
	Side  string // P or D
	File  string
	Check *check.Result
}

// fromLogs plans each side from its own startup log (version, non-default
// arguments, TP, memory, draft), with the side's kvscope flags over what
// the log says, and checks it against the log's figures (check.RunPair).
// Both logs must serve one model.
func (f *pdFlags) fromLogs() (p, d sideLog, pair *check.Pair, err error) {
	if *f.pLog == "" || *f.dLog == "" {
		return p, d, nil, &usageError{fmt.Errorf("--p-log %q, --d-log %q: give both engines' startup logs", *f.pLog, *f.dLog)}
	}
	target, draft, err := f.mf.read(models())
	if err != nil {
		return p, d, nil, err
	}
	var in [2]check.Input
	var overlayErr error
	for i, side := range []struct{ flag, path string }{{"p", *f.pLog}, {"d", *f.dLog}} {
		data, err := readCapped(side.path, vlog.MaxLogBytes)
		if err != nil {
			return p, d, nil, fmt.Errorf("--%s-log: %w", side.flag, err)
		}
		l, err := vlog.Parse(string(data))
		if err != nil {
			return p, d, nil, fmt.Errorf("--%s-log %s: %w", side.flag, side.path, err)
		}
		in[i] = check.Input{Log: l, Version: f.ef.Version(), Model: target, Draft: draft, Catalog: catalog(), Given: f.ef.Given()}
		in[i].Adjust = func(e *plan.Engine) {
			if err := f.ef.Overlay(side.flag, e, checkRefuses()); err != nil && overlayErr == nil {
				overlayErr = err
			}
		}
	}
	pair, err = check.RunPair(in[0], in[1])
	if overlayErr != nil {
		return p, d, nil, &usageError{overlayErr}
	}
	var se *check.SideError
	switch {
	case errors.As(err, &se):
		flag, path := "p", *f.pLog
		if se.Side == "D" {
			flag, path = "d", *f.dLog
		}
		return p, d, nil, fmt.Errorf("--%s-log %s: %w", flag, path, se.Err)
	case err != nil:
		return p, d, nil, fmt.Errorf("--p-log %s, --d-log %s: %w", *f.pLog, *f.dLog, err)
	}
	p = sideLog{Side: "P", File: *f.pLog, Check: pair.P}
	d = sideLog{Side: "D", File: *f.dLog, Check: pair.D}
	return p, d, pair, nil
}

// writeSideLogs prints each side's log check in a line, before pd's text.
func writeSideLogs(w io.Writer, sides ...sideLog) {
	for _, s := range sides {
		r := s.Check
		version := r.VLLMVersion
		if version == "" {
			version = r.Profile + " (not in the log)"
		}
		line := fmt.Sprintf("%s log %s: vLLM %s, check %s", s.Side, s.File, version, r.Verdict)
		if len(r.Missing) > 0 {
			line += " (missing " + strings.Join(r.Missing, ", ") + ")"
		}
		fmt.Fprintf(w, "%s; planned as kvscope plan --model %s %s\n", line, r.Model, strings.Join(r.Flags, " "))
	}
	fmt.Fprintln(w)
}

// runPDLogs is kvscope pd with --p-log and --d-log.
func runPDLogs(f *pdFlags, asJSON bool, pairs int, stdout io.Writer) error {
	pl, dl, pair, err := f.fromLogs()
	if err != nil {
		return err
	}
	s, err := f.setup(pairs > 0)
	if err != nil {
		return err
	}
	s.Model, s.P, s.D = pair.Model, pair.Engines[0], pair.Engines[1]
	r, err := f.run(s, api.PDMemory)
	var refused *xfer.StartupError
	if errors.As(err, &refused) {
		pf := xfer.PreflightOfStartup(refused, s.P, s.D)
		if asJSON {
			return writeJSON(stdout, api.PDLogs{P: pl.Check, D: dl.Check, PD: &xfer.PD{Preflight: pf}, ModelSources: f.mf.src.api()})
		}
		fmt.Fprintf(stdout, "verdict: %s\n  %s\n\n", pf.Verdict, pf.Sentence)
		writeSideLogs(stdout, pl, dl)
		return nil
	}
	if err != nil {
		return err
	}
	trimPairs(r, pairs)
	if asJSON {
		return writeJSON(stdout, api.PDLogs{P: pl.Check, D: dl.Check, PD: r, ModelSources: f.mf.src.api()})
	}
	fmt.Fprintf(stdout, "verdict: %s\n  %s\n\n", r.Preflight.Verdict, r.Preflight.Sentence)
	writeSideLogs(stdout, pl, dl)
	writeFacets(stdout, r.Preflight.Facets)
	writePDText(stdout, s, r, pairs, f.mf.src)
	if f.explain {
		writePDExplain(stdout, r.Explain())
	}
	return nil
}

// writeFacets prints what each side brings to the handshake, side by side,
// and how vLLM treats a difference.
func writeFacets(w io.Writer, fs []xfer.Facet) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "handshake value\tP\tD\t\t")
	for _, f := range fs {
		mark := "same"
		if !f.Same {
			mark = "DIFFERS (" + f.Rule + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", f.Name, f.P, f.D, mark, f.Note)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
