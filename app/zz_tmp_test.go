package app

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestZZChartSize(t *testing.T) {
	s := DefaultSettings()
	s.View = "tune"
	s.Tune.TPPairs, s.Tune.BlockSizes, s.Tune.MinLayers, s.Tune.Selectors, s.Tune.MNBT, s.Tune.KVDTypes = "2:2,2:4,2:8,4:4,4:8", "16:2048:16", "2,3", "default,padding-bytes", "4096,8192", "auto,fp8"
	root := computed(t, s)
	search, err := NewTuneSearch(root.settings.Query().Encode(), testCatalog(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := RunTune(context.Background(), search, time.Second, time.Now, nil, nil)
	t.Logf("chart %d bytes, points %d, top %d front %d", len(out.Chart), strings.Count(out.Chart, `"value"`), len(out.Result.Top), len(out.Result.Front))
}
