package app

import (
	"encoding/json"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
)

// chartOption is the part of a chart's option the tests read.
type chartOption struct {
	XAxis []struct {
		Type    string `json:"type"`
		LogBase int    `json:"logBase"`
	} `json:"xAxis"`
	Series []struct {
		Name     string      `json:"name"`
		Data     [][2]*int64 `json:"data"`
		MarkLine *struct {
			Data []struct {
				XAxis int `json:"xAxis"`
			} `json:"data"`
		} `json:"markLine"`
		LineStyle *struct {
			Type string `json:"type"`
		} `json:"lineStyle"`
	} `json:"series"`
}

// The charts' options carry core's numbers: the first point of the
// KV-token chart is P's plan at block size 16, on a log2 axis of block
// sizes with each side's current block size (the default view's 592 and
// 304, its plans' aligned block sizes) marked and among the points; the
// groups chart has both sides; the descriptor chart draws "after merging"
// apart, or says it is the same line.
func TestChartOptionsCarryCoreNumbers(t *testing.T) {
	s := DefaultSettings()
	r := Compute(s, testCatalog(), nil)
	set := computeCharts(r, testCatalog())
	var opt chartOption
	if err := json.Unmarshal([]byte(set.Tokens), &opt); err != nil {
		t.Fatal(err)
	}
	if len(opt.XAxis) == 0 || opt.XAxis[0].Type != "log" || opt.XAxis[0].LogBase != 2 {
		t.Fatalf("x axis %+v, want log2", opt.XAxis)
	}
	e, _ := s.Engines()
	e.BlockSize = 16
	p, err := plan.New(r.Model, e)
	if err != nil {
		t.Fatal(err)
	}
	if len(opt.Series) != 2 || opt.Series[0].Name != "P" || *opt.Series[0].Data[0][0] != 16 || *opt.Series[0].Data[0][1] != p.KVCacheTokens {
		t.Fatalf("series %+v, want P's first point (16, %d)", opt.Series, p.KVCacheTokens)
	}
	for i, want := range []int64{592, 304} {
		ser := opt.Series[i]
		found := false
		for _, pt := range ser.Data {
			found = found || *pt[0] == want
		}
		if ser.MarkLine == nil || ser.MarkLine.Data[0].XAxis != int(want) || !found {
			t.Errorf("%s: the current block size %d is not marked and plotted: %+v", ser.Name, want, ser)
		}
	}
	var groups chartOption
	if err := json.Unmarshal([]byte(set.Groups), &groups); err != nil {
		t.Fatal(err)
	}
	if len(groups.Series) != 4 || groups.Series[0].Name != "P groups" || groups.Series[2].Name != "D groups" || groups.Series[1].LineStyle == nil {
		t.Errorf("groups chart series %+v, want P and D, padding dashed", groups.Series)
	}
	var descs chartOption
	if err := json.Unmarshal([]byte(set.Descs), &descs); err != nil {
		t.Fatal(err)
	}
	if n := len(descs.Series); n == 1 && descs.Series[0].Name != "submitted = after merging" || n == 2 && descs.Series[1].LineStyle == nil || n == 0 || n > 2 {
		t.Errorf("descriptor chart series %+v", descs.Series)
	}
}
