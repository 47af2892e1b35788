package app

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/tune"
)

// TestTuneChart: the Pareto chart's option is valid JSON whose three
// series hold every accepted candidate once per distinct point (those
// whose pages divide, those whose do not) and the front, with a name to
// hover on every point.
func TestTuneChart(t *testing.T) {
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	e := plan.Engine{VLLMVersion: "pr58207"}
	res, err := tune.Run(context.Background(), tune.Space{Model: m, P: e, D: e, Ranges: tune.Ranges{TPPairs: "1:2,2:4", BlockSizes: "0,16:256:16", MaxBatched: "2048,8192"}})
	if err != nil {
		t.Fatal(err)
	}
	var opt struct {
		Series []struct {
			Name string `json:"name"`
			Data []struct {
				Name  string  `json:"name"`
				Value []int64 `json:"value"`
			} `json:"data"`
		} `json:"series"`
	}
	if err := json.Unmarshal([]byte(tuneChart(res)), &opt); err != nil {
		t.Fatal(err)
	}
	if len(opt.Series) != 3 || opt.Series[2].Name != "Pareto front" || len(opt.Series[2].Data) != len(res.Front) {
		t.Fatalf("series %+v", opt.Series)
	}
	points := map[[2]int64]bool{}
	for _, x := range res.All {
		points[[2]int64{int64(x.Descs), x.DKVTokens}] = true
	}
	drawn := 0
	for _, s := range opt.Series[:2] {
		for _, d := range s.Data {
			if d.Name == "" || len(d.Value) != 2 || !points[[2]int64{d.Value[0], d.Value[1]}] {
				t.Errorf("%s: point %+v", s.Name, d)
			}
			drawn++
		}
	}
	if drawn != len(points) || drawn >= len(res.All) {
		t.Errorf("%d points drawn for %d distinct of %d candidates", drawn, len(points), len(res.All))
	}
}
