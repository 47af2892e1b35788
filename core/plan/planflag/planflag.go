// Package planflag puts the engine-flag table (plan.Flags) on a
// flag.FlagSet, for the kvscope and kvscope-agent commands: every engine
// flag once by its vLLM name and, for each side of a prefill/decode pair,
// once more with a "p-" or "d-" prefix that overrides the plain value on
// that side. Values are parsed when an engine is built, so that an error
// names the flag as the user spelled it.
package planflag

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// Set is the engine flags registered on one flag set.
type Set struct {
	fs      *flag.FlagSet
	sides   []string
	version *string
	texts   map[string]*string // flag as registered ("p-block-size") -> its text
	bools   map[string]*bool   // switches and toggles, "no-" spellings included
}

// Add registers --vllm-version and every engine flag on fs, plainly and
// with each side's prefix ("p", "d").
func Add(fs *flag.FlagSet, sides ...string) *Set {
	s := &Set{fs: fs, sides: sides, texts: map[string]*string{}, bools: map[string]*bool{}}
	newest := vllm.Newest().Name()
	s.version = fs.String("vllm-version", "", "the vLLM version whose planner and connector rules apply: a release (0.11.0 ... "+newest+"), main, or "+vllm.Branch+" (see kvscope versions; default the newest release, "+newest+")")
	prof := vllm.For(vllm.Newest())
	for _, side := range append([]string{""}, sides...) {
		for _, f := range plan.Flags() {
			name, help := prefixed(side, f.Name), Help(&f, &prof)
			if side != "" {
				help += " (" + strings.ToUpper(side) + " only)"
			}
			switch f.Kind {
			case plan.BoolFlag:
				s.bools[name] = fs.Bool(name, false, help)
			case plan.ToggleFlag:
				s.bools[name] = fs.Bool(name, false, help)
				s.bools[prefixed(side, "no-"+f.Name)] = fs.Bool(prefixed(side, "no-"+f.Name), false, "the opposite of --"+name)
			default:
				s.texts[name] = fs.String(name, "", help)
			}
		}
	}
	return s
}

// Help is a flag's help line: what it does, its choices, and its default
// in a version.
func Help(f *plan.Flag, prof *vllm.Profile) string {
	h := f.Help
	if len(f.Choices) > 0 {
		h += ": " + strings.Join(f.Choices, "|")
	}
	return h + " (default " + f.Default(prof) + ")"
}

func prefixed(side, name string) string {
	if side == "" {
		return name
	}
	return side + "-" + name
}

// Version is --vllm-version as given.
func (s *Set) Version() string { return *s.version }

// given is which flags the command line names.
func (s *Set) given() map[string]bool {
	set := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// Given lists the flags the command line names, as registered (without
// dashes, a side's with its prefix), sorted.
func (s *Set) Given() []string {
	var out []string
	s.fs.Visit(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}

// Engine builds one side's engine ("" for a single engine): the plain
// flags, then the side's, each over the one before; the version from
// --vllm-version. Errors name the flag as the user spelled it.
func (s *Set) Engine(side string) (plan.Engine, error) {
	e := plan.Engine{VLLMVersion: *s.version}
	if _, err := vllm.ParseVersion(e.VLLMVersion); err != nil {
		return e, err
	}
	if err := s.apply(&e, side, s.given()); err != nil {
		return e, err
	}
	return e, e.CheckFlags()
}

// Overlay applies to base the engine flags the command line names, and
// only those (plain ones, then the side's): kvscope check's way to supply
// what a log leaves out, and the agent's to change a scenario's engines.
// refused names flags the caller does not take, with its reason.
func (s *Set) Overlay(side string, base *plan.Engine, refused map[string]string) error {
	given := s.given()
	for name, why := range refused {
		for _, n := range []string{name, prefixed(side, name)} {
			if given[n] {
				return fmt.Errorf("--%s: %s", n, why)
			}
		}
	}
	if given["vllm-version"] {
		if _, err := vllm.ParseVersion(*s.version); err != nil {
			return err
		}
		base.VLLMVersion = *s.version
	}
	if err := s.apply(base, side, given); err != nil {
		return err
	}
	return base.CheckFlags()
}

// apply sets on e the flags given, plain then the side's.
func (s *Set) apply(e *plan.Engine, side string, given map[string]bool) error {
	levels := []string{""}
	if side != "" {
		levels = append(levels, side)
	}
	for _, f := range plan.Flags() {
		for _, lv := range levels {
			name := prefixed(lv, f.Name)
			text, ok, err := s.text(&f, name, given)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := f.Set(e, text); err != nil {
				return fmt.Errorf("--%s %q: %v", name, text, err)
			}
		}
	}
	return nil
}

// text is the value a flag as registered (name) was given, if it was.
func (s *Set) text(f *plan.Flag, name string, given map[string]bool) (string, bool, error) {
	switch f.Kind {
	case plan.BoolFlag:
		if !given[name] {
			return "", false, nil
		}
		if *s.bools[name] {
			return "true", true, nil
		}
		return "", true, nil
	case plan.ToggleFlag:
		no := noName(name)
		on, off := given[name] && *s.bools[name], given[no] && *s.bools[no]
		switch {
		case on && off:
			return "", false, fmt.Errorf("--%s and --%s contradict each other", name, no)
		case on:
			return "on", true, nil
		case off:
			return "off", true, nil
		}
		return "", false, nil
	}
	if !given[name] {
		return "", false, nil
	}
	return *s.texts[name], true, nil
}

// noName is a toggle's "no-" spelling: p-async-scheduling -> p-no-async-scheduling.
func noName(name string) string {
	for _, side := range []string{"p-", "d-"} {
		if rest, ok := strings.CutPrefix(name, side); ok {
			if _, isFlag := plan.LookupFlag(rest); isFlag {
				return side + "no-" + rest
			}
		}
	}
	return "no-" + name
}

// IsEngineFlag reports whether a registered flag's name is an engine flag
// of the table (plain, "no-" or side-prefixed) or --vllm-version.
func IsEngineFlag(name string) bool {
	if name == "vllm-version" {
		return true
	}
	for _, side := range []string{"", "p-", "d-"} {
		rest, ok := strings.CutPrefix(name, side)
		if !ok {
			continue
		}
		rest = strings.TrimPrefix(rest, "no-")
		if _, isFlag := plan.LookupFlag(rest); isFlag {
			return true
		}
	}
	return false
}

// Usage writes the engine flags of the table with their help and
// defaults in prof, as kvscope help shows them; sides names the prefixes
// the command also takes.
func Usage(w io.Writer, prof *vllm.Profile, sides ...string) {
	fmt.Fprintf(w, "Engine flags (vLLM's names; defaults as in vLLM %s, see --vllm-version):\n", prof.Name)
	if len(sides) > 0 {
		var pre []string
		for _, s := range sides {
			pre = append(pre, "--"+s+"-NAME")
		}
		fmt.Fprintf(w, "  each also as %s for one side only\n", strings.Join(pre, " or "))
	}
	for _, f := range plan.Flags() {
		spell := "--" + f.Name
		switch f.Kind {
		case plan.ToggleFlag:
			spell += " | --no-" + f.Name
		case plan.BoolFlag:
		default:
			spell += " " + kindWord(f.Kind)
		}
		origin := ""
		switch f.Origin {
		case plan.BranchFlag:
			origin = " [vLLM PR #58207 only]"
		case plan.ModelFlag:
			origin = " [kvscope's model; inferred]"
		case plan.SpeculativeFlag:
			origin = " [in vLLM's --speculative-config]"
		}
		fmt.Fprintf(w, "  %s\n      %s%s\n", spell, Help(&f, prof), origin)
	}
}

func kindWord(k plan.FlagKind) string {
	switch k {
	case plan.IntFlag:
		return "N"
	case plan.BytesFlag:
		return "BYTES"
	case plan.FloatFlag:
		return "X"
	}
	return "VALUE"
}
