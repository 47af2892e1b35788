package app

import (
	"encoding/json"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
)

// The charts' options carry core's numbers: the first point of the KV-token
// chart is P's plan at block size 16.
func TestChartOptionsCarryCoreNumbers(t *testing.T) {
	s := DefaultSettings()
	r := Compute(s, testCatalog(), nil)
	set := computeCharts(r, testCatalog())
	var opt struct {
		XAxis []struct {
			Type string   `json:"type"`
			Data []string `json:"data"`
		} `json:"xAxis"`
		Series []struct {
			Name string `json:"name"`
			Data []struct {
				Value int64 `json:"value"`
			} `json:"data"`
		} `json:"series"`
	}
	if err := json.Unmarshal([]byte(set.Tokens), &opt); err != nil {
		t.Fatal(err)
	}
	if len(opt.XAxis) == 0 || opt.XAxis[0].Type != "category" || len(opt.XAxis[0].Data) != len(blockSizes) || opt.XAxis[0].Data[0] != "16" {
		t.Fatalf("x axis %+v", opt.XAxis)
	}
	e, _ := s.Engines()
	e.BlockSize = 16
	p, err := plan.New(r.Model, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(opt.Series) != 2 || opt.Series[0].Name != "P" || opt.Series[0].Data[0].Value != p.KVCacheTokens {
		t.Errorf("series %+v, want P's first point %d", opt.Series, p.KVCacheTokens)
	}
}
