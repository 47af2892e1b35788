package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/kvscope/kvscope/core/check"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vlog"
	"github.com/kvscope/kvscope/server/api"
)

// sideLog is one engine's startup log planned as kvscope check plans it:
// the engine it was asked for and how its own logged figures compare.
type sideLog struct {
	Side  string        `json:"side"` // P or D
	File  string        `json:"file"`
	Check *check.Result `json:"check"`
	// KVTokens is the engine's capacity as its log plans it (no
	// connector), ConnectorKVTokens with the connector pd plans for
	// (before 0.23 a --kv-transfer-config turns the hybrid manager off).
	KVTokens          int64 `json:"kv_cache_tokens"`
	ConnectorKVTokens int64 `json:"connector_kv_cache_tokens"`
}

// pdLogs is kvscope pd --p-log/--d-log's answer in --json: each side's
// check and the transfer between the engines the logs describe.
type pdLogs struct {
	P  sideLog `json:"p_log"`
	D  sideLog `json:"d_log"`
	PD any     `json:"pd"`
}

// fromLogs plans each side from its own startup log (version, non-default
// arguments, TP, memory, draft), with the side's kvscope flags over what
// the log says, and checks it against the log's figures. Both logs must
// serve one model.
func (f *pdFlags) fromLogs() (p, d sideLog, eng [2]plan.Engine, m *model.Model, err error) {
	if *f.pLog == "" || *f.dLog == "" {
		return p, d, eng, nil, &usageError{fmt.Errorf("--p-log %q, --d-log %q: give both engines' startup logs", *f.pLog, *f.dLog)}
	}
	target, draft, err := f.mf.read(models())
	if err != nil {
		return p, d, eng, nil, err
	}
	var models [2]*model.Model
	for i, side := range []struct {
		name, flag string
		path       *string
		out        *sideLog
	}{{"P", "p", f.pLog, &p}, {"D", "d", f.dLog, &d}} {
		data, err := readCapped(*side.path, vlog.MaxLogBytes)
		if err != nil {
			return p, d, eng, nil, fmt.Errorf("--%s-log: %w", side.flag, err)
		}
		l, err := vlog.Parse(string(data))
		if err != nil {
			return p, d, eng, nil, fmt.Errorf("--%s-log %s: %w", side.flag, *side.path, err)
		}
		res, err := checkLog(l, f.ef, side.flag, target, draft)
		if err != nil {
			return p, d, eng, nil, wrapLogErr(fmt.Sprintf("--%s-log %s", side.flag, *side.path), err)
		}
		if res.Plan == nil {
			return p, d, eng, nil, fmt.Errorf("--%s-log %s: %s's engine did not start (the log shows vLLM's start-up refusal): nothing to transfer", side.flag, *side.path, side.name)
		}
		*side.out = sideLog{Side: side.name, File: *side.path, Check: res}
		eng[i], models[i] = res.Plan.Engine, res.ModelRef
	}
	if models[0].Name != models[1].Name {
		return p, d, eng, nil, fmt.Errorf("--p-log serves %s, --d-log %s: P and D must serve one model", models[0].Name, models[1].Name)
	}
	return p, d, eng, models[0], nil
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
		if s.ConnectorKVTokens != s.KVTokens && s.KVTokens > 0 {
			fmt.Fprintf(w, "  %s with the connector: %s KV cache tokens against %s without it (the log's engine; %+.1f%%)\n", s.Side,
				plan.Commas(s.ConnectorKVTokens), plan.Commas(s.KVTokens), 100*float64(s.ConnectorKVTokens-s.KVTokens)/float64(s.KVTokens))
		}
	}
	fmt.Fprintln(w)
}

// runPDLogs is kvscope pd with --p-log and --d-log.
func runPDLogs(f *pdFlags, asJSON bool, pairs int, stdout io.Writer) error {
	pl, dl, eng, m, err := f.fromLogs()
	if err != nil {
		return err
	}
	s, err := f.setup(pairs > 0)
	if err != nil {
		return err
	}
	s.Model, s.P, s.D = m, eng[0], eng[1]
	r, err := f.run(s, api.PDMemory)
	if err != nil {
		return err
	}
	trimPairs(r, pairs)
	pl.KVTokens, dl.KVTokens = pl.Check.Plan.KVCacheTokens, dl.Check.Plan.KVCacheTokens
	pl.ConnectorKVTokens, dl.ConnectorKVTokens = r.Invariant.PIndependent.KVCacheTokens, r.Invariant.DIndependent.KVCacheTokens
	if asJSON {
		return writeJSON(stdout, pdLogs{P: pl, D: dl, PD: r})
	}
	writeSideLogs(stdout, pl, dl)
	writePDText(stdout, s, r, pairs, f.mf.src)
	return nil
}
