package app

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// computed is a Root that has computed s, as after OnNav.
func computed(t *testing.T, s Settings) *Root {
	t.Helper()
	root := &Root{Catalog: testCatalog()}
	root.settings = s
	root.recompute(app.Context{})
	if root.result == nil || !root.result.OK() || root.result.PD == nil {
		t.Fatalf("no result: %+v", root.result)
	}
	return root
}

// configMaxLen is max_position_embeddings as the bundled config.json
// writes it (in text_config for a multimodal checkpoint).
func configMaxLen(t *testing.T, file string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(modeltest.Dir(), file+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Max  int `json:"max_position_embeddings"`
		Text struct {
			Max int `json:"max_position_embeddings"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if c.Text.Max > 0 {
		return c.Text.Max
	}
	return c.Max
}

// inputTag is the rendered <input> whose id is id, "" when there is none.
func inputTag(html, id string) string {
	return regexp.MustCompile(`<input[^>]*\bid="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindString(html)
}

// attrOf is attribute name of a rendered tag, and whether it is there.
func attrOf(tag, name string) (string, bool) {
	m := regexp.MustCompile(`\b` + name + `="([^"]*)"`).FindStringSubmatch(tag)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// TestConfigurePlaceholdersShowEffectiveValues: an engine field left at its
// default shows, as its placeholder, the value the planner used: TP and PP
// "1", max-model-len from the model's config.json, a block size raised for
// a hybrid model's Mamba/GDN pages ("16 → N raised", per side), the plain
// 16 for a full-attention model; the field itself stays empty, never "0".
func TestConfigurePlaceholdersShowEffectiveValues(t *testing.T) {
	qwen36 := blankSettings()
	qwen36.Model = "Qwen/Qwen3.6-35B-A3B"
	qwen36Asked32 := qwen36
	qwen36Asked32.P.BlockSize = 32
	dense := blankSettings()
	dense.Model = "Qwen/Qwen3-8B"
	raised := func(asked int) func(p *plan.Plan) string {
		return func(p *plan.Plan) string { return fmt.Sprintf("%d → %d raised", asked, p.BlockSize) }
	}
	tests := []struct {
		name   string
		s      Settings
		config string // the bundled config.json of s.Model
		want   map[string]func(p *plan.Plan) string
		dense  bool // the block size is not raised
	}{
		{"the seed deployment: P TP 2, D TP 4", DefaultSettings(), "Qwen__Qwen3.6-35B-A3B", map[string]func(*plan.Plan) string{"block-size": raised(16)}, false},
		{"a hybrid model at vLLM's defaults", qwen36, "Qwen__Qwen3.6-35B-A3B", map[string]func(*plan.Plan) string{"block-size": raised(16)}, false},
		{"a dense model at vLLM's defaults", dense, "Qwen__Qwen3-8B", map[string]func(*plan.Plan) string{"block-size": func(*plan.Plan) string { return "16" }}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := computed(t, tt.s)
			html := app.HTMLString(root.renderConfigure())
			plans := map[string]*plan.Plan{"p-": root.result.PD.Invariant.PIndependent, "d-": root.result.PD.Invariant.DIndependent}
			wantLen := plan.Commas(int64(configMaxLen(t, tt.config))) + " from the config"
			for side, p := range plans {
				asked := tt.s.P
				if side == "d-" {
					asked = tt.s.D
				}
				want := map[string]string{"max-model-len": wantLen}
				if asked.TensorParallelSize == 0 {
					want["tensor-parallel-size"] = "1"
				}
				if asked.PipelineParallelSize == 0 {
					want["pipeline-parallel-size"] = "1"
				}
				for k, f := range tt.want {
					want[k] = f(p)
				}
				if tt.dense == (p.BlockSize != 16) {
					t.Errorf("%splan block size %d", side, p.BlockSize)
				}
				for key, w := range want {
					if got := root.effective(side, key); got != w {
						t.Errorf("effective(%s%s) = %q, want %q", side, key, got, w)
					}
					tag := inputTag(html, side+key)
					if tag == "" {
						t.Errorf("no input #%s%s rendered", side, key)
						continue
					}
					if ph, _ := attrOf(tag, "placeholder"); ph != w {
						t.Errorf("#%s%s placeholder %q, want %q", side, key, ph, w)
					}
					if key == "max-model-len" && asked.MaxModelLen != 0 {
						continue // the seed deployment asks 262144: its field shows it
					}
					if v, ok := attrOf(tag, "value"); ok && v != "" {
						t.Errorf("#%s%s shows value %q for a flag left at its default", side, key, v)
					}
				}
			}
		})
	}

	t.Run("a block size asked below the hybrid page is raised from it", func(t *testing.T) {
		root := computed(t, qwen36Asked32)
		p := root.result.PD.Invariant.PIndependent
		if p.BlockSize <= 32 {
			t.Fatalf("plan block size %d: not raised", p.BlockSize)
		}
		if got, want := root.effective("p-", "block-size"), raised(32)(p); got != want {
			t.Errorf("effective(p-block-size) = %q, want %q", got, want)
		}
		tag := inputTag(app.HTMLString(root.renderConfigure()), "p-block-size")
		if v, _ := attrOf(tag, "value"); v != "32" {
			t.Errorf("the asked block size shows %q, want 32", v)
		}
	})

	t.Run("P and D placeholders follow their own plans", func(t *testing.T) {
		root := computed(t, DefaultSettings())
		p, d := root.effective("p-", "block-size"), root.effective("d-", "block-size")
		if p == d {
			t.Errorf("P at TP 2 and D at TP 4 show the same raised block size %q", p)
		}
	})

	for _, s := range []Settings{qwen36, dense} {
		t.Run("no unset engine field of "+s.Model+" shows 0 or a bare default", func(t *testing.T) { noZeroPlaceholders(t, s) })
	}
}

// noZeroPlaceholders fails on an unset integer engine field of s whose
// value or placeholder reads 0 or a bare "default".
func noZeroPlaceholders(t *testing.T, s Settings) {
	{
		root := computed(t, s)
		html := app.HTMLString(root.renderConfigure())
		for _, f := range plan.Flags() {
			if f.Kind != plan.IntFlag && f.Kind != plan.BytesFlag && f.Kind != plan.FloatFlag {
				continue
			}
			for _, side := range []string{"p-", "d-"} {
				tag := inputTag(html, side+f.Name)
				ph, _ := attrOf(tag, "placeholder")
				if v, _ := attrOf(tag, "value"); v == "0" {
					t.Errorf("#%s%s shows 0", side, f.Name)
				}
				if f.Name == "num-speculative-tokens" {
					continue // no drafter: 0 speculative tokens is the effective value
				}
				if ph == "" || ph == "0" || ph == "default" || strings.HasPrefix(ph, "0 ") {
					t.Errorf("#%s%s placeholder %q is not an effective value", side, f.Name, ph)
				}
			}
		}
	}
}

// steppingClock is a clock that moves step forward at every reading.
func steppingClock(step time.Duration) func() time.Time {
	now := time.Unix(1700000000, 0)
	return func() time.Time {
		now = now.Add(step)
		return now
	}
}

// TestComputeTimesItself: the footer's "computed in X ms" is the time the
// computation took on the clock it is given, never a constant 0: with a
// clock that moves 1.5 ms a reading it is a positive multiple of 1.5 ms,
// with the real clock it is positive, and the footer prints that figure in
// its text and its data-ms attribute.
func TestComputeTimesItself(t *testing.T) {
	cat := testCatalog()
	r := Compute(DefaultSettings(), cat, steppingClock(1500*time.Microsecond))
	if !r.OK() {
		t.Fatalf("errors: %v", r.Errors)
	}
	if steps := r.Millis / 1.5; r.Millis <= 0 || steps != float64(int(steps)) {
		t.Errorf("Millis %v on a clock of 1.5 ms steps, want a positive multiple of 1.5", r.Millis)
	}
	if real := Compute(DefaultSettings(), cat, time.Now); real.Millis <= 0 {
		t.Errorf("Millis %v with the real clock, want > 0", real.Millis)
	}

	root := &Root{Catalog: cat, settings: DefaultSettings()}
	root.result = Compute(root.settings, cat, steppingClock(1500*time.Microsecond))
	html := app.HTMLString(root.renderFooter())
	m := regexp.MustCompile(`data-ms="([^"]*)"`).FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("the footer has no data-ms: %s", html)
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil || ms <= 0 || ms != root.result.Millis {
		t.Errorf("footer data-ms %q, want %v > 0", m[1], root.result.Millis)
	}
	if !strings.Contains(html, "computed in "+m[1]+" ms") {
		t.Errorf("the footer text does not say computed in %s ms: %s", m[1], html)
	}
}

// TestFormTakesEveryEngineFlag walks the engine-flag table: every flag is
// a URL key under its vLLM name, plain and with p- or d-, that round-trips
// through the link; the form has a field for it on each side, named by
// the same key, showing the value; its default column says what
// plan.Flag.Default says for the settings' version (the text kvscope help
// and /api/flags show); and the equivalent command line names it.
func TestFormTakesEveryEngineFlag(t *testing.T) {
	for _, version := range []string{"", "0.19.0", "pr58207"} {
		prof := profileOf(version)
		for _, f := range plan.Flags() {
			t.Run(version+"/"+f.Name, func(t *testing.T) {
				q := url.Values{"model": {"Qwen/Qwen3-0.6B"}, "d-" + f.Name: {f.Example}}
				if version != "" {
					q.Set("vllm-version", version)
				}
				s, errs := ParseQuery(q)
				if len(errs) > 0 || len(s.Unknown) > 0 {
					t.Fatalf("d-%s=%s: errors %v, unknown %v", f.Name, f.Example, errs, s.Unknown)
				}
				if got, _ := f.Get(&s.D); got != f.Example {
					t.Errorf("d-%s=%s reads as %q", f.Name, f.Example, got)
				}
				if got, set := f.Get(&s.P); set {
					t.Errorf("d-%s set P's value to %q", f.Name, got)
				}
				if v := s.Query().Get("d-" + f.Name); v != f.Example {
					t.Errorf("the link writes d-%s=%q, want %q", f.Name, v, f.Example)
				}
				both, errs := ParseQuery(url.Values{"model": {"Qwen/Qwen3-0.6B"}, f.Name: {f.Example}})
				if gp, _ := f.Get(&both.P); len(errs) > 0 || gp != f.Example {
					t.Errorf("plain %s=%s: P reads %q, errors %v", f.Name, f.Example, gp, errs)
				}
				if cli := s.CLI("pd"); !strings.Contains(cli, "--d-"+f.Name) && !strings.Contains(cli, "--d-no-"+f.Name) {
					t.Errorf("the command line %q does not name --d-%s", cli, f.Name)
				}
				root := &Root{Catalog: testCatalog()}
				root.settings = s
				root.recompute(app.Context{})
				html := app.HTMLString(root.renderConfigure())
				for _, side := range []string{"p-", "d-"} {
					if !regexp.MustCompile(`<(input|select)[^>]*\bid="` + regexp.QuoteMeta(side+f.Name) + `"`).MatchString(html) {
						t.Errorf("the form has no field #%s%s", side, f.Name)
					}
				}
				row := regexp.MustCompile(`(?s)<tr[^>]*data-flag="` + regexp.QuoteMeta(f.Name) + `".*?</tr>`).FindString(html)
				def := regexp.MustCompile(`(?s)class="muted flag-default"[^>]*>([^<]*)<`).FindStringSubmatch(row)
				if def == nil || html2text(def[1]) != f.Default(&prof) {
					t.Errorf("the form's default for --%s on %q is %v, want %q", f.Name, version, def, f.Default(&prof))
				}
				shown := regexp.MustCompile(`(?s)id="d-` + regexp.QuoteMeta(f.Name) + `".*?(>|</select>)`).FindString(html)
				switch f.Kind {
				case plan.BoolFlag:
					if !strings.Contains(inputTag(html, "d-"+f.Name), "checked") {
						t.Errorf("#d-%s is not checked", f.Name)
					}
				case plan.ChoiceFlag, plan.ToggleFlag:
					sel := regexp.MustCompile(`(?s)<select[^>]*id="d-` + regexp.QuoteMeta(f.Name) + `".*?</select>`).FindString(html)
					if !regexp.MustCompile(`<option (selected value="` + regexp.QuoteMeta(f.Example) + `"|value="` + regexp.QuoteMeta(f.Example) + `" selected)[ >]`).MatchString(sel) {
						t.Errorf("#d-%s does not select %s: %s", f.Name, f.Example, sel)
					}
				default:
					if v, _ := attrOf(inputTag(html, "d-"+f.Name), "value"); v != f.Example {
						t.Errorf("#d-%s shows %q, want %q (%s)", f.Name, v, f.Example, shown)
					}
				}
			})
		}
	}
}

// html2text undoes the HTML escaping of a rendered text.
func html2text(s string) string {
	return strings.NewReplacer("&#39;", "'", "&amp;", "&", "&lt;", "<", "&gt;", ">", "&#34;", `"`, "&quot;", `"`).Replace(s)
}
