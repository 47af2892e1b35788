package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kvscope/kvscope/core/model"
)

// runModels lists the bundled models, each with its model type and its
// family's status, then the family table: which families kvscope models,
// which it refuses (naming the layer kind) and what an unknown model type
// gets. --json prints the same as GET /api/families.
func runModels(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("models", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the models and the family table as JSON (as GET /api/families)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	l := catalog().Listing()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(l)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, e := range l.Models {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.Name, orDash(e.ModelType), e.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nmodel families:")
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "status\tfamily\tmodel types\tlayer kinds")
	for _, f := range l.Families {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Status, f.Name, strings.Join(f.ModelTypes, ", "), f.LayerKinds)
	}
	fmt.Fprintf(tw, "%s\tany other model type\t\t%s\n", model.Unknown, l.Unknown)
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
