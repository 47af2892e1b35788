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
			Default    string                 `json:"default"`
			Versions   []string               `json:"versions"`
			Profiles   []profileRow           `json:"profiles"`
			Handshakes []vllm.MetadataVersion `json:"handshake_versions"`
			Changes    []vllm.Change          `json:"changes"`
		}{vllm.Newest().Name(), vllm.Versions(), profileRows(), vllm.MetadataVersions(), vllm.Changes()})
	}
	fmt.Fprintf(stdout, "profiles (default %s):\n", vllm.Newest().Name())
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "version\treleased\thandshake\tevidence")
	for _, r := range profileRows() {
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
	for _, c := range vllm.Changes() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.From, c.What(), c.Rule, c.Source, c.Evidence)
	}
	return tw.Flush()
}

// profileRow is one profile of kvscope versions: a release with its date
// and evidence, or main or the branch, and the handshake version it
// speaks.
type profileRow struct {
	vllm.Release
	Kind        string `json:"kind"` // release, main or branch
	NixlVersion int    `json:"nixl_connector_version"`
}

func profileRows() []profileRow {
	var rows []profileRow
	for _, r := range vllm.Releases() {
		p, _ := vllm.Lookup(r.Name)
		rows = append(rows, profileRow{Release: r, Kind: "release", NixlVersion: p.NixlVersion})
	}
	for _, name := range []string{vllm.Main, vllm.Branch} {
		p, _ := vllm.Lookup(name)
		row := profileRow{Release: vllm.Release{Name: name, Evidence: p.Label}, Kind: name, NixlVersion: p.NixlVersion}
		if name == vllm.Branch {
			row.Kind = "branch"
		}
		rows = append(rows, row)
	}
	return rows
}
