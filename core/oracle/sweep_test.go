package oracle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
)

func testLoader(name string) (*model.Model, error) {
	data, err := os.ReadFile(filepath.Join(modeltest.Dir(), strings.Replace(name, "/", "__", 1)+".json"))
	if err != nil {
		return nil, err
	}
	m, err := model.Parse(data)
	if err != nil {
		return nil, err
	}
	m.Name = name
	return m, nil
}

// TestQuickSweep runs a few hundred cases; none may be wrong.
func TestQuickSweep(t *testing.T) {
	models, err := SweepModels(testLoader, true)
	if err != nil {
		t.Fatal(err)
	}
	cases := Cases(models)
	res := Sweep(models, cases, 0)
	t.Logf("%d cases: %d exact, %d rejected, %d wrong in %.1fs (%v)", res.Cases, res.Exact, res.Rejected, res.Wrong, res.Seconds, res.Rejections)
	if res.Wrong != 0 {
		t.Fatalf("%d wrong cases:\n%s", res.Wrong, strings.Join(res.Failures, "\n"))
	}
	// In the group-pair profile only MLA and pipeline-parallel push
	// producers need P's plan on D, and geometry that cannot move is
	// refused; nothing else.
	for rule := range res.Rejections {
		switch rule {
		case "mla-plan", "pp-push-plan", "tp-ratio", "window-missing", "layer-shapes", "compatibility-hash":
		default:
			t.Errorf("%d cases rejected by %s", res.Rejections[rule], rule)
		}
	}
	if res.Rejections["pp-push-plan"] == 0 {
		t.Error("the sweep has no pipeline-parallel push producer that another plan refuses")
	}
	if res.Cases < 200 || res.Exact < res.Cases/2 {
		t.Errorf("%d cases, %d exact: the quick sweep should run a few hundred, mostly exact", res.Cases, res.Exact)
	}
}

// TestSweepStops: a sweep whose context is done runs no more deployments
// and says it stopped.
func TestSweepStops(t *testing.T) {
	models, err := SweepModels(testLoader, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := SweepContext(ctx, models, Cases(models), 1)
	if !res.Stopped || res.Cases != 0 {
		t.Fatalf("a cancelled sweep ran %d cases (stopped %v)", res.Cases, res.Stopped)
	}
}
