package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kvscope/kvscope/core/plan/planflag"
	"github.com/kvscope/kvscope/core/vllm"
)

// helpRequest is a command line that asked for a command's help (-h):
// the command's flag set, for run to write its help from.
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return "help requested" }
func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

// writeHelp is a command's help: what it does, its own flags, then the
// engine flags from the engine-flag table, with their defaults in the
// newest release.
func writeHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "kvscope %s: %s\n\nusage: kvscope %s [flags]\n", c.name, c.summary, c.name)
	var own []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !planflag.IsEngineFlag(f.Name) || f.Name == "vllm-version" {
			own = append(own, f)
		}
	})
	sort.Slice(own, func(i, j int) bool { return own[i].Name < own[j].Name })
	if len(own) > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		for _, f := range own {
			arg, usage := flag.UnquoteUsage(f)
			spell := "--" + f.Name
			if arg != "" {
				spell += " " + strings.ToUpper(arg)
			}
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && !strings.Contains(usage, "(default") {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "  %s\n      %s%s\n", spell, usage, def)
		}
	}
	if fs.Lookup("block-size") == nil {
		return
	}
	var sides []string
	for _, s := range []string{"p", "d"} {
		if fs.Lookup(s+"-block-size") != nil {
			sides = append(sides, s)
		}
	}
	fmt.Fprintln(w)
	prof := vllm.For(vllm.Newest())
	planflag.Usage(w, &prof, sides...)
}

// runHelp is kvscope help [command | flags [--vllm-version V]]: the
// commands, one command's help, or the engine flags with a version's
// defaults.
func runHelp(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	if args[0] == "flags" {
		fs := flag.NewFlagSet("help flags", flag.ContinueOnError)
		version := fs.String("vllm-version", "", "show the defaults of this vLLM version (default the newest release)")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		prof, err := vllm.Lookup(*version)
		if err != nil {
			return &usageError{err}
		}
		planflag.Usage(stdout, &prof)
		return nil
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		var hr *helpRequest
		if err := c.run([]string{"-h"}, stdout); !errors.As(err, &hr) {
			return fmt.Errorf("kvscope %s -h: %v", c.name, err)
		}
		writeHelp(stdout, c, hr.fs)
		return nil
	}
	return &usageError{fmt.Errorf("no command %q (kvscope help lists them; kvscope help flags lists the engine flags)", args[0])}
}
