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
	if *asJSON {
		return writeJSON(stdout, struct {
			Default  string        `json:"default"`
			Versions []string      `json:"versions"`
			Changes  []vllm.Change `json:"changes"`
		}{vllm.Newest().Name(), vllm.Versions(), vllm.Changes()})
	}
	fmt.Fprintf(stdout, "profiles: %v (default %s)\n\n", vllm.Versions(), vllm.Newest().Name())
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "from\tbehaviour\trule\tsource\tevidence")
	for _, c := range vllm.Changes() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.From, c.What(), c.Rule, c.Source, c.Evidence)
	}
	return tw.Flush()
}
