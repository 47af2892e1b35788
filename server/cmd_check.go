package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/plan/planflag"
	"github.com/kvscope/kvscope/core/vlog"
)

// differsError ends kvscope check with exit status 3 when a log and the
// plan disagree; the report itself is already printed.
type differsError struct{}

func (differsError) Error() string { return "the log and kvscope's plan differ" }

// partialError ends kvscope check with exit status 4 when every line the
// log has matches but it lacks lines a full judgement needs (the check's
// missing); the report itself is already printed.
type partialError struct{}

func (partialError) Error() string {
	return "the log's lines match kvscope's plan, but it lacks lines a full judgement needs"
}

// readCapped reads a file (or standard input for "-") of at most limit
// bytes, naming the file and the cap when it is larger.
func readCapped(name string, limit int64) ([]byte, error) {
	var r io.Reader
	if name == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, &tooLargeError{name, limit}
	}
	return data, nil
}

// tooLargeError is a file over readCapped's limit.
type tooLargeError struct {
	name  string
	limit int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%s: larger than the %d-byte limit", e.name, e.limit)
}

func runCheck(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	mf := newModelFlags(fs)
	ef := planflag.Add(fs)
	asJSON := fs.Bool("json", false, "print the check as JSON")
	pos, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{fmt.Errorf("want one log file (or - for standard input), got %d arguments", len(pos))}
	}
	data, err := readCapped(pos[0], vlog.MaxLogBytes)
	if err != nil {
		return err
	}
	l, err := vlog.Parse(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	target, draft, err := mf.read(models())
	if err != nil {
		return err
	}
	res, err := checkLog(l, ef, "", target, draft)
	if err != nil {
		return wrapLogErr(pos[0], err)
	}
	if *asJSON {
		var v any = res
		if mf.src.resolved() {
			v = struct {
				*check.Result
				*modelSources
			}{res, mf.src}
		}
		if err := writeJSON(stdout, v); err != nil {
			return err
		}
	} else {
		mf.src.writeText(stdout)
		writeCheckText(stdout, pos[0], res)
	}
	switch res.Verdict {
	case check.Match:
		return nil
	case check.Partial:
		return partialError{}
	}
	return differsError{}
}

// checkLog checks a parsed log with the command line's engine flags over
// what the log leaves out (the plain ones, then side's: "" for one
// engine, "p" or "d"); target and draft are --model's and --draft's (nil:
// the log's own). A flag check refuses is a usage error.
func checkLog(l *vlog.Log, ef *planflag.Set, side string, target, draft *model.Model) (*check.Result, error) {
	in := check.Input{Log: l, Version: ef.Version(), Model: target, Draft: draft, Catalog: catalog(), Given: ef.Given()}
	var overlayErr error
	in.Adjust = func(e *plan.Engine) { overlayErr = ef.Overlay(side, e, checkRefuses()) }
	res, err := check.Run(in)
	if overlayErr != nil {
		return nil, &usageError{overlayErr}
	}
	return res, err
}

// wrapLogErr names the log an error is about, but for usage errors,
// which name their flag already.
func wrapLogErr(name string, err error) error {
	var u *usageError
	if errors.As(err, &u) {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

func writeCheckText(w io.Writer, name string, r *check.Result) {
	version := r.VLLMVersion
	if version == "" {
		version = "(version not in the log)"
	}
	fmt.Fprintf(w, "log %s: vLLM %s, model %s\n", name, version, r.Model)
	fmt.Fprintf(w, "profile %s (%s)\n", r.Profile, r.ProfileLabel)
	fmt.Fprintf(w, "kvscope plan --model %s %s\n\n", r.Model, strings.Join(r.Flags, " "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "line\tfigure\tlogged\tpredicted\t")
	for _, c := range r.Lines {
		mark := "ok"
		if !c.Match {
			mark = "DIFFERS"
		}
		at := "-"
		if c.Line > 0 {
			at = fmt.Sprint(c.Line)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", at, c.Name, c.Logged, c.Predicted, mark)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nverdict: %s\n", r.Verdict)
	for _, e := range r.Explain {
		fmt.Fprintf(w, "explain: %s\n", e)
	}
	for _, m := range r.Missing {
		fmt.Fprintf(w, "missing: %s\n", m)
	}
	for _, a := range r.Assumed {
		fmt.Fprintf(w, "assumed: %s %s: %s\n", a.Flag, a.Value, a.Why)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// checkRefuses are the engine flags kvscope check does not take, and why.
func checkRefuses() map[string]string {
	return map[string]string{"kv-cache-memory-bytes": `kvscope check takes the memory from the log's "Available KV cache memory" (or "reserved X GiB memory for KV Cache") line`}
}
