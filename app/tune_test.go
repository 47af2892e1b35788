package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/tune"
)

// TestTuneChart: the Pareto chart's option is valid JSON whose three
// series hold the accepted candidates (those whose pages divide, those
// whose do not) and the front. Every drawn point is a candidate's exact
// point of its series, named; every candidate is drawn, or lies within
// one cell (a 160th of each axis's range) of a drawn point of its series
// that counts it; the counts add up to the candidates; and overlapping
// candidates are drawn once (fewer points than candidates).
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
	type pt struct {
		descs, kv int64
		divide    bool
	}
	points := map[pt]bool{}
	minX, maxX, minY, maxY := int64(1<<62), int64(0), int64(1<<62), int64(0)
	for _, x := range res.All {
		points[pt{int64(x.Descs), x.DKVTokens, x.PagesDivide}] = true
		minX, maxX = min(minX, int64(x.Descs)), max(maxX, int64(x.Descs))
		minY, maxY = min(minY, x.DKVTokens), max(maxY, x.DKVTokens)
	}
	stepX, stepY := max(float64(maxX-minX)/160, 1), max(float64(maxY-minY)/160, 1)
	var drawn []pt
	counted := 0
	for i, s := range opt.Series[:2] {
		for _, d := range s.Data {
			if d.Name == "" || len(d.Value) != 2 {
				t.Fatalf("%s: point %+v", s.Name, d)
			}
			p := pt{d.Value[0], d.Value[1], i == 0}
			if !points[p] {
				t.Errorf("%s: %+v is no candidate's point", s.Name, d)
			}
			n := 1
			if strings.Contains(d.Name, "candidates at or next to") {
				fmt.Sscanf(d.Name, "%d", &n)
			}
			counted += n
			drawn = append(drawn, p)
		}
	}
	if counted != len(res.All) {
		t.Errorf("the points count %d candidates of %d", counted, len(res.All))
	}
	if len(drawn) >= len(points) {
		t.Errorf("%d points drawn for %d distinct points: nothing merged", len(drawn), len(points))
	}
	for p := range points {
		near := false
		for _, d := range drawn {
			if d.divide == p.divide && math.Abs(float64(d.descs-p.descs)) <= stepX && math.Abs(float64(d.kv-p.kv)) <= stepY {
				near = true
				break
			}
		}
		if !near {
			t.Errorf("candidate point %+v is drawn nowhere near", p)
		}
	}
}
