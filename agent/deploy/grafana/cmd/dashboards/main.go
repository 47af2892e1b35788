// Command dashboards writes kvscope's Grafana dashboards
// (fleet-overview.json, engine-pair.json) into a directory, by default
// agent/deploy/grafana/dashboards from the repository root (make
// dashboards).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kvscope/kvscope/agent/deploy/grafana"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
}

// run writes the dashboards where -out says and names each file on stdout.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dashboards", flag.ContinueOnError)
	out := fs.String("out", filepath.Join("agent", "deploy", "grafana", "dashboards"), "directory to write the dashboards' JSON into")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	files, err := grafana.Files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(*out, f.Name)
		if err := os.WriteFile(path, f.JSON, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "wrote", path)
	}
	return nil
}
