package grafana_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/kvscope/kvscope/agent/deploy/grafana"
)

var update = flag.Bool("update", false, "rewrite dashboards/*.json from the generator (as make dashboards does)")

// TestDashboardsAreGenerated: the committed dashboards/*.json are what
// the generator writes now, byte for byte, and generating twice gives the
// same bytes, which decode strictly into the SDK's dashboard schema
// (an unknown or mistyped field is an error); -update (or make dashboards) rewrites them. On a mismatch
// the generated file lands beside the committed one as NAME.got, ready
// for diff.
func TestDashboardsAreGenerated(t *testing.T) {
	plugins.RegisterDefaultPlugins() // the panel and query types the strict decoding knows
	files, err := grafana.Files()
	if err != nil {
		t.Fatal(err)
	}
	again, err := grafana.Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("the generator gives %d dashboards, want 2 (the fleet overview and the engine pair)", len(files))
	}
	for i, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			if !bytes.Equal(f.JSON, again[i].JSON) {
				t.Fatal("two runs of the generator differ")
			}
			path := filepath.Join("dashboards", f.Name)
			if *update {
				if err := os.WriteFile(path, f.JSON, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run make dashboards, or go test ./agent/deploy/grafana -run TestDashboardsAreGenerated -update)", err)
			}
			var d dashboard.Dashboard
			if err := sdkErr(d.UnmarshalJSONStrict(want)); err != nil {
				t.Errorf("%s does not decode strictly into the SDK's dashboard schema: %v", path, err)
			} else if err := sdkErr(d.Validate()); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			if !bytes.Equal(f.JSON, want) {
				got := path + ".got"
				os.WriteFile(got, f.JSON, 0o644)
				t.Errorf("%s is not what the generator writes now (diff %s %s); run make dashboards, read the diff and commit it", path, path, got)
			}
		})
	}
}

// sdkErr is nil for the SDK's empty error list, which it returns as a
// non-nil error when nothing is wrong.
func sdkErr(err error) error {
	if errs, ok := err.(cog.BuildErrors); ok && len(errs) == 0 {
		return nil
	}
	return err
}
