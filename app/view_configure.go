package app

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"

	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

func sortedKeys(m FieldErrors) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fieldError draws the error of one field next to it.
func (c *Root) fieldError(key string) app.UI {
	if c.result == nil {
		return nil
	}
	msg, ok := c.result.Errors[key]
	if !ok {
		return nil
	}
	return app.Div().Class("field-error").DataSet("field", key).Text(userWords(msg))
}

// selectOf is a select whose choice edits the settings.
func (c *Root) selectOf(id, value string, choices []string, set func(s *Settings, v string)) app.UI {
	return app.Select().ID(id).Body(app.Range(choices).Slice(func(i int) app.UI {
		label := choices[i]
		if label == "" {
			label = "(none)"
		}
		return app.Option().Value(choices[i]).Text(label).Selected(choices[i] == value)
	})).OnChange(func(ctx app.Context, e app.Event) {
		v := ctx.JSSrc().Get("value").String()
		c.change(ctx, func(s *Settings) { set(s, v) })
	})
}

func (c *Root) renderConfigure() app.UI {
	s := c.settings
	models := append(c.Catalog.Names(), "custom")
	hubValue := ""
	if _, ok := c.hubRef(s.Model); ok {
		models, hubValue = append(models, s.Model), s.Model
	}
	flags, prof := plan.Flags(), profileOf(s.Version)
	drafts := append(append([]string{"", "mtp"}, c.Catalog.Names()...), "custom")
	return app.Div().Class("configure").Body(
		app.Section().Class("card").Body(
			app.H2().Text("Model"),
			app.Label().Body(app.Text("model "), c.selectOf("model", s.Model, models, func(s *Settings, v string) { s.Model = v })),
			app.Label().Body(app.Text(" or a Hub id "), app.Input().ID("model-id").Type("text").Placeholder("org/name[@revision]").Value(hubValue).
				OnChange(func(ctx app.Context, e app.Event) {
					if v := strings.TrimSpace(ctx.JSSrc().Get("value").String()); v != "" {
						c.change(ctx, func(s *Settings) { s.Model = v })
					}
				})),
			c.fieldError("model"),
			c.modelSource(),
			app.If(s.Model == "custom", func() app.UI {
				return c.configBox("config", "paste or drop a Hugging Face config.json", s.Config, func(s *Settings, v string) { s.Config = v })
			}),
			app.Label().Body(app.Text("draft "), c.selectOf("draft", s.Draft, drafts, func(s *Settings, v string) { s.Draft = v })),
			c.fieldError("draft"),
			app.If(s.Draft == "custom", func() app.UI {
				return c.configBox("draft-config", "paste or drop the draft model's config.json", s.DraftJSON, func(s *Settings, v string) { s.DraftJSON = v })
			}),
		),
		app.Section().Class("card engines").Body(
			app.H2().Text("Engines (vLLM flags)"),
			app.Label().Body(app.Text("vLLM version "), c.versionSelect(),
				app.Span().Class("muted").Text(" the profile whose planner and connector rules apply (kvscope versions lists the table)")),
			c.fieldError("vllm-version"),
			app.Table().Class("engine-form").Body(
				app.THead().Body(app.Tr().Body(app.Th().Text("flag"), app.Th().Text("P (prefill)"), app.Th().Text("D (decode)"), app.Th().Text("default"))),
				app.TBody().Body(app.Range(flags).Slice(func(i int) app.UI {
					f := &flags[i]
					return app.Tr().DataSet("flag", f.Name).Body(
						app.Td().Body(app.Code().Text("--"+f.Name), app.Div().Class("muted").Text(f.Help+originNote(f))),
						app.Td().Body(c.engineInput("p-", f), c.fieldError("p-"+f.Name)),
						app.Td().Body(c.engineInput("d-", f), c.fieldError("d-"+f.Name)),
						app.Td().Class("muted flag-default").Text(f.Default(&prof)),
					)
				})),
			),
			c.fieldError("p-engine"), c.fieldError("d-engine"),
		),
		app.Section().Class("card").Body(
			app.H2().Text("Connector and request"),
			app.Label().Body(app.Text("connector "), c.selectOf("connector", s.Connector,
				[]string{"nixl", "nixl-push", "offloading", "simple-cpu-offload", "multi:nixl+offloading", "multi:nixl-push+offloading"},
				func(s *Settings, v string) { s.Connector = v })),
			c.fieldError("connector"),
			app.Label().Body(app.Text("plans "), c.selectOf("plans", s.Plans, []string{"auto", "independent", "invariant"}, func(s *Settings, v string) { s.Plans = v })),
			c.fieldError("plans"),
			app.Label().Body(app.Text("layout "), c.selectOf("layout", s.Layout, []string{"split", "blocks-first"}, func(s *Settings, v string) { s.Layout = v })),
			app.Label().Body(app.Text("prompt tokens "), c.numberInput("prompt-tokens", s.Prompt, func(s *Settings, n int) { s.Prompt = n })),
			c.fieldError("prompt-tokens"),
			app.Label().Body(app.Text("D prefix-hit tokens "), c.numberInput("prefix-hit-tokens", s.Hit, func(s *Settings, n int) { s.Hit = n })),
			c.fieldError("prefix-hit-tokens"),
		),
	)
}

// profileOf is the profile of a settings' version, the newest release's
// when the version is unknown (its field shows the error).
func profileOf(version string) vllm.Profile {
	if p, err := vllm.Lookup(version); err == nil {
		return p
	}
	return vllm.For(vllm.Newest())
}

// originNote says when a flag is not one of released vLLM's.
func originNote(f *plan.Flag) string {
	switch f.Origin {
	case plan.BranchFlag:
		return " (vLLM PR #58207 only)"
	case plan.ModelFlag:
		return " (kvscope's model of vLLM; inferred)"
	case plan.SpeculativeFlag:
		return " (in vLLM's --speculative-config)"
	}
	return ""
}

// defaultChoice is the value of a select's option that leaves a flag at
// its default; no flag has a choice of that name.
const defaultChoice = "(default)"

// engineInput is one side's field of an engine flag, by the flag's kind:
// a text field for numbers and sizes (empty at the default, whose
// effective value is the placeholder), a select of the choices or of on
// and off (first the default), a checkbox for a switch. What the user
// enters goes through the flag table, as on the command line.
func (c *Root) engineInput(side string, f *plan.Flag) app.UI {
	e := &c.settings.P
	if side == "d-" {
		e = &c.settings.D
	}
	id := side + f.Name
	value, _ := f.Get(e)
	set := func(ctx app.Context, text string) {
		var probe plan.Engine
		if err := f.Set(&probe, text); err != nil {
			c.result.Errors[id] = fmt.Sprintf("%q: %v", text, err)
			ctx.Update()
			return
		}
		c.change(ctx, func(s *Settings) {
			t := &s.P
			if side == "d-" {
				t = &s.D
			}
			f.Set(t, text)
		})
	}
	switch f.Kind {
	case plan.BoolFlag:
		return app.Input().ID(id).Type("checkbox").Checked(value == "true").OnChange(func(ctx app.Context, ev app.Event) {
			set(ctx, strconv.FormatBool(ctx.JSSrc().Get("checked").Bool()))
		})
	case plan.ChoiceFlag, plan.ToggleFlag:
		choices := f.Choices
		if f.Kind == plan.ToggleFlag {
			choices = []string{"on", "off"}
		}
		if value != "" && !slices.Contains(choices, value) {
			choices = append(choices, value) // a link's value the planner refuses: shown with its error
		}
		// The first option is the version's default: its value is
		// defaultChoice, not "", which a browser would read as the label.
		all := append([]string{defaultChoice}, choices...)
		return app.Select().ID(id).Body(app.Range(all).Slice(func(i int) app.UI {
			label := all[i]
			if label == defaultChoice {
				label = "default: " + c.effective(side, f.Name)
			}
			return app.Option().Value(all[i]).Text(label).Selected(all[i] == value || all[i] == defaultChoice && value == "")
		})).OnChange(func(ctx app.Context, ev app.Event) {
			v := ctx.JSSrc().Get("value").String()
			if v == defaultChoice {
				v = ""
			}
			set(ctx, v)
		})
	}
	in := app.Input().ID(id).Type("text").Value(value).Placeholder(c.effective(side, f.Name))
	if f.Kind == plan.IntFlag {
		in = in.Attr("inputmode", "numeric")
	}
	return in.OnChange(func(ctx app.Context, ev app.Event) {
		set(ctx, strings.TrimSpace(ctx.JSSrc().Get("value").String()))
	})
}

// numberInput is a non-negative integer field; text that is not one shows
// an error next to the field and changes nothing.
func (c *Root) numberInput(id string, v int, set func(s *Settings, n int)) app.UI {
	return app.Input().ID(id).Type("text").Attr("inputmode", "numeric").Value(strconv.Itoa(v)).OnChange(func(ctx app.Context, e app.Event) {
		raw := strings.TrimSpace(ctx.JSSrc().Get("value").String())
		n, err := strconv.Atoi(raw)
		if err != nil || n < 0 {
			c.result.Errors[id] = strconv.Quote(raw) + " is not a non-negative integer"
			ctx.Update()
			return
		}
		c.change(ctx, func(s *Settings) { set(s, n) })
	})
}

// modelSource says where the settings' model came from when the page
// fetched it from the Hub.
func (c *Root) modelSource() app.UI {
	if len(c.hub) == 0 {
		return nil
	}
	id, ok := c.hubRef(c.settings.Model)
	if !ok {
		return nil
	}
	hc := c.hub[id.String()]
	if hc == nil || hc.Pending || hc.Err != "" {
		return nil
	}
	return app.P().ID("model-source").Class("muted").DataSet("url", hc.URL).Text(hc.Source())
}

// configBox is a textarea that takes a pasted or dropped config.json.
func (c *Root) configBox(id, placeholder, value string, set func(s *Settings, text string)) app.UI {
	return app.Div().Body(
		textDrop(id, placeholder, value, func(ctx app.Context, text string) {
			c.change(ctx, func(s *Settings) { set(s, text) })
		}),
		c.fieldError(id),
	)
}

// textDrop is a textarea whose text, typed, pasted or dropped as a file,
// goes to set.
func textDrop(id, placeholder, value string, set func(ctx app.Context, text string)) app.UI {
	return app.Textarea().ID(id).Class("config").Placeholder(placeholder).Text(value).
		OnChange(func(ctx app.Context, e app.Event) {
			set(ctx, ctx.JSSrc().Get("value").String())
		}).
		On("dragover", func(ctx app.Context, e app.Event) { e.PreventDefault() }).
		On("drop", func(ctx app.Context, e app.Event) {
			e.PreventDefault()
			readText(ctx, e.Get("dataTransfer").Get("files"), set)
		})
}

// readText reads the first of files (a FileList, dropped or picked) with
// the browser's File API and hands its text to set.
func readText(ctx app.Context, files app.Value, set func(ctx app.Context, text string)) {
	if !files.Truthy() || files.Length() == 0 {
		return
	}
	var done app.Func
	done = app.FuncOf(func(this app.Value, args []app.Value) any {
		text := args[0].String()
		ctx.Dispatch(func(ctx app.Context) { set(ctx, text) })
		done.Release()
		return nil
	})
	files.Index(0).Call("text").Call("then", done)
}

// versionSelect picks the vLLM version profile: the newest release by
// default, every profiled release, main and the group-pair branch.
func (c *Root) versionSelect() app.UI {
	choices := append([]string{""}, vllm.Versions()...)
	label := func(v string) string {
		switch v {
		case "":
			return "newest release (" + vllm.Newest().Name() + ")"
		case vllm.Main:
			return "main"
		case vllm.Branch:
			return "pr58207 (group-pair transfers)"
		}
		if r, ok := vllm.ReleaseOf(v); ok && r.Released != "" {
			return v + " (" + r.Released + ")"
		}
		return v
	}
	return app.Select().ID("vllm-version").Body(app.Range(choices).Slice(func(i int) app.UI {
		return app.Option().Value(choices[i]).Text(label(choices[i])).Selected(choices[i] == c.settings.Version)
	})).OnChange(func(ctx app.Context, e app.Event) {
		v := ctx.JSSrc().Get("value").String()
		c.change(ctx, func(s *Settings) { s.Version = v })
	})
}

// effective is what the planner used for an engine flag left at its
// default, for the field's placeholder: "1", "16 → 592 raised", "32,768
// from the config".
func (c *Root) effective(side, key string) string {
	r := c.result
	if r == nil || r.PD == nil {
		return "default"
	}
	p := r.PD.Invariant.PIndependent
	asked := c.settings.P
	if side == "d-" {
		p, asked = r.PD.Invariant.DIndependent, c.settings.D
	}
	e := p.Engine
	n := func(v int) string { return plan.Commas(int64(v)) }
	switch key {
	case "tensor-parallel-size":
		return n(e.TensorParallelSize)
	case "pipeline-parallel-size":
		return n(e.PipelineParallelSize)
	case "block-size":
		base := 16
		if asked.BlockSize > 0 {
			base = asked.BlockSize
		}
		if p.BlockSize != base {
			return fmt.Sprintf("%d → %d raised", base, p.BlockSize)
		}
		return n(p.BlockSize)
	case "max-model-len":
		return n(e.MaxModelLen) + " from the config"
	case "max-num-batched-tokens":
		return n(e.MaxNumBatchedTokens)
	case "num-speculative-tokens":
		return n(e.NumSpeculativeTokens)
	case "kv-cache-dtype":
		if r.Model != nil {
			return "auto (" + r.Model.DType + ")"
		}
		return "auto"
	case "selector":
		if p.Selector == "" {
			return "none needed (" + p.Dispatch + ")"
		}
		return string(p.Selector)
	case "min-kv-cache-group-layers":
		return n(e.MinGroupLayers)
	case "kv-cache-group-size":
		if p.GroupSize == 0 {
			return "none needed (" + p.Dispatch + ")"
		}
		return n(p.GroupSize) + " chosen"
	case "kv-cache-memory-bytes":
		return plan.FormatBytes(e.KVCacheMemoryBytes)
	case "enable-prefix-caching":
		return e.PrefixCaching
	case "async-scheduling":
		if e.NoAsyncScheduling {
			return "off"
		}
		return "on"
	case "mamba-cache-mode":
		return e.MambaCacheMode
	case "mamba-ssm-cache-dtype":
		return "auto"
	case "attention-backend":
		return p.Backend
	case "num-gpu-blocks-override":
		return "none: " + plan.Commas(p.NumBlocks) + " blocks"
	case "kv-cache-bucket-merge":
		if p.Merge == "" {
			return "none needed (" + p.Dispatch + ")"
		}
		return string(p.Merge)
	case "balanced-lambda":
		return strconv.FormatFloat(e.BalancedLambda, 'g', -1, 64)
	}
	return "default"
}
