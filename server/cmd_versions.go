package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kvscope/kvscope/core/vllm"
)

// runVersions prints the versions kvscope has profiles for and the table
// of behaviour changes behind them.
func runVersions(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("versions", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the versions and the table as JSON")
	profile := fs.String("profile", "", "print one version's resolved profile instead")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *profile != "" {
		p, err := vllm.Lookup(*profile)
		if err != nil {
			return &usageError{err}
		}
		return writeJSON(stdout, p)
	}
	o := vllm.Describe()
	if *asJSON {
		return writeJSON(stdout, o)
	}
	fmt.Fprintf(stdout, "profiles (default %s):\n", o.Default)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "version\treleased\thandshake\tevidence")
	for _, r := range o.Profiles {
		date := r.Released
		if date == "" {
			date = "not shown"
		} else if r.DateEvidence == vllm.DateRecalled {
			date += " (recalled)"
		}
		fmt.Fprintf(tw, "%s\t%s\tv%d\t%s\n", r.Name, date, r.NixlVersion, r.Evidence)
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "from\tbehaviour\trule\tsource\tevidence")
	for _, c := range o.Changes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.From, c.What(), c.Rule, c.Source, c.Evidence)
	}
	return tw.Flush()
}
