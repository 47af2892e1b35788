package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// OracleLimit is the largest transfer (bytes moved) the app proves on bytes
// in the browser; larger ones say how to run the oracle on the command line.
const OracleLimit = 128 << 20

// Result is everything the views draw, computed by core from the settings.
type Result struct {
	Settings Settings
	Model    *model.Model
	PD       *xfer.PD
	Oracle   *oracle.Result
	// OracleNote says why the oracle did not run, when it did not.
	OracleNote string
	Errors     FieldErrors
	// Err is an error that belongs to no single field.
	Err    string
	Millis float64 // how long the computation took

	// Alone holds P's and D's plans, each planned on its own, when the
	// pair cannot be computed (one side's bad value): the views keep the
	// side that plans.
	Alone [2]*plan.Plan

	request      xfer.Request
	transferDone bool
}

// OK reports whether there is something to draw.
func (r *Result) OK() bool { return r.PD != nil }

// Plans returns the P and D plans the transfer uses.
func (r *Result) Plans() (*plan.Plan, *plan.Plan) { return r.PD.UsedPlans() }

// Models finds a model's config.json by name: model.Catalog (the bundled
// configs) is one; in the browser, the catalog with the Hub ids the page
// fetched.
type Models interface {
	Lookup(ref string) (name string, data []byte, err error)
}

// Compute runs core on the settings: both plans, the TP-invariant plan and
// the block-size advice; EnsureTransfer adds the transfer when a view needs
// it. Errors are reported per field, never as a panic.
func Compute(s Settings, cat Models, clock func() time.Time) *Result {
	if clock == nil {
		clock = time.Now
	}
	start := clock()
	r := &Result{Settings: s, Errors: FieldErrors{}}
	defer func() { r.Millis = float64(clock().Sub(start).Microseconds()) / 1000 }()

	m, field, err := modelOf(s, cat)
	if err != nil {
		r.Errors[field] = err.Error()
		return r
	}
	r.Model = m
	pe, de := s.Engines()
	for side, e := range map[string]plan.Engine{"p-": pe, "d-": de} {
		if err := e.CheckFlags(); err != nil {
			key := side + flagOf(err)
			if key == side+"vllm-version" {
				key = "vllm-version"
			}
			r.Errors[key] = err.Error()
		}
	}
	if len(r.Errors) > 0 {
		r.planAlone(m, pe, de)
		return r
	}
	conn, err := xfer.ParseConnector(s.Connector)
	if err != nil {
		r.Errors["connector"] = err.Error()
		return r
	}
	layout := xfer.SplitKV
	if s.Layout == "blocks-first" {
		layout = xfer.BlocksFirst
	}
	setup := xfer.Setup{Model: m, P: pe, D: de, Connector: conn, Plans: xfer.PlanChoice(s.Plans), Layout: layout, KeepPairs: true,
		Request: xfer.Request{PromptTokens: s.Prompt, PrefixHitTokens: s.Hit}}
	pd, err := xfer.Prepare(setup)
	if err != nil {
		// Name the side and flag: plan each engine alone to see which fails.
		for side, e := range map[string]plan.Engine{"p-": pe, "d-": de} {
			if _, err := plan.New(m, e); err != nil {
				key := side + flagOf(err)
				if key == side+"vllm-version" {
					key = "vllm-version"
				}
				r.Errors[key] = err.Error()
			}
		}
		if len(r.Errors) == 0 {
			r.Err = err.Error()
			if strings.Contains(err.Error(), "--plans") {
				r.Errors["plans"] = err.Error()
			}
		}
		r.planAlone(m, pe, de)
		return r
	}
	pp, dp := pd.UsedPlans()
	if err := setup.Request.Check(pp, dp); err != nil {
		field := "prompt-tokens"
		if strings.Contains(err.Error(), "prefix-hit") {
			field = "prefix-hit-tokens"
		}
		r.Errors[field] = err.Error()
		return r
	}
	r.PD = pd
	r.request = setup.Request
	if _, ok := conn.Transport(); !ok {
		r.OracleNote = pd.Note
		r.transferDone = true
	}
	return r
}

// EnsureTransfer computes the transfer the descriptor and P/D views draw;
// the plan views do not need it, so a recompute there skips it. Its time
// adds to Millis.
func (r *Result) EnsureTransfer(clock func() time.Time) {
	if r.PD == nil || r.transferDone {
		return
	}
	if clock == nil {
		clock = time.Now
	}
	start := clock()
	r.transferDone = true
	t, err := r.PD.Compute(r.request, true)
	if err != nil {
		r.Err = err.Error()
		return
	}
	r.PD.Transfer = t
	if t.Rejection != nil {
		r.Oracle = &oracle.Result{Verdict: oracle.Rejected, Reason: t.Rejection.Error()}
	}
	r.Millis += float64(clock().Sub(start).Microseconds()) / 1000
}

// planAlone plans each side that has no error of its own on its own, so
// that a bad value on one side keeps the other side's plan in the views.
func (r *Result) planAlone(m *model.Model, pe, de plan.Engine) {
	for i, side := range []struct {
		prefix string
		e      plan.Engine
	}{{"p-", pe}, {"d-", de}} {
		bad := false
		for k := range r.Errors {
			bad = bad || strings.HasPrefix(k, side.prefix) || k == "vllm-version"
		}
		if bad {
			continue
		}
		if p, err := plan.New(m, side.e); err == nil {
			r.Alone[i] = p
		}
	}
}

// flagOf names the query key of a planner error's flag ("tensor-parallel-size").
func flagOf(err error) string {
	var fe *plan.FlagError
	var oe *kvspec.OptionError
	var re *plan.RefusalError
	switch {
	case errors.As(err, &re):
		return "max-model-len"
	case errors.As(err, &fe):
		return strings.TrimPrefix(fe.Flag, "--")
	case errors.As(err, &oe):
		return strings.TrimPrefix(oe.Option, "--")
	}
	return "engine"
}

// modelOf loads the settings' model with its draft; a failure names the
// field at fault.
func modelOf(s Settings, cat Models) (*model.Model, string, error) {
	m, err := loadModel(cat, s.Model, s.Config)
	if err != nil {
		if s.Model == "custom" {
			return nil, "config", err
		}
		return nil, "model", err
	}
	switch s.Draft {
	case "":
	case "mtp":
		if m, err = m.WithMTP(); err != nil {
			return nil, "draft", err
		}
	default:
		d, err := loadModel(cat, s.Draft, s.DraftJSON)
		if err == nil {
			m, err = m.WithDraft(d)
		}
		if err != nil {
			if s.Draft == "custom" {
				return nil, "draft-config", err
			}
			return nil, "draft", err
		}
	}
	return m, "", nil
}

func loadModel(cat Models, name, custom string) (*model.Model, error) {
	if name == "custom" {
		if strings.TrimSpace(custom) == "" {
			return nil, fmt.Errorf("paste or drop a config.json")
		}
		m, err := model.Parse([]byte(custom))
		if err != nil {
			return nil, err
		}
		if m.Name == "" {
			m.Name = "custom"
		}
		return m, nil
	}
	full, data, err := cat.Lookup(name)
	if err != nil {
		return nil, err
	}
	m, err := model.Parse(data)
	if err != nil {
		return nil, err
	}
	m.Name = full
	return m, nil
}

// Engines are P's and D's planner engines on the settings' version.
func (s Settings) Engines() (plan.Engine, plan.Engine) {
	p, d := s.P, s.D
	p.VLLMVersion, d.VLLMVersion = s.Version, s.Version
	return p, d
}

// CLI is the kvscope command line that computes the same thing.
func (s Settings) CLI(command string) string {
	parts := []string{"kvscope", command, "--model", s.Model}
	if s.Version != "" {
		parts = append(parts, "--vllm-version", s.Version)
	}
	if s.Model == "custom" {
		parts[3] = "config.json"
	}
	if s.Draft != "" {
		d := s.Draft
		if d == "custom" {
			d = "draft.json"
		}
		parts = append(parts, "--draft", d)
	}
	for _, side := range []struct {
		prefix string
		e      plan.Engine
	}{{"--p-", s.P}, {"--d-", s.D}} {
		for _, a := range plan.FlagArgs(side.e, nil, false) {
			if name, ok := strings.CutPrefix(a, "--"); ok {
				a = side.prefix + name
			}
			parts = append(parts, a)
		}
	}
	// Every request setting that differs from the CLI's own default (not
	// the app's: the views use 1,024 prompt tokens, kvscope pd 4,096), so
	// that the command prints the numbers on the screen.
	for _, f := range []struct{ flag, value, cliDefault string }{
		{"--connector", s.Connector, "nixl"}, {"--plans", s.Plans, "auto"}, {"--layout", s.Layout, "split"},
		{"--prompt-tokens", strconv.Itoa(s.Prompt), "4096"}, {"--prefix-hit-tokens", strconv.Itoa(s.Hit), "0"},
	} {
		if f.value != "" && f.value != f.cliDefault {
			parts = append(parts, f.flag, f.value)
		}
	}
	return strings.Join(parts, " ")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
