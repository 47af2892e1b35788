package grafana

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The dashboards' uids: links between them and into them use these.
const (
	FleetUID = "kvscope-fleet"
	PairUID  = "kvscope-engine-pair"
)

// DefaultKvscopeURL is the kvscope_url variable's default: kvscope
// serve's own default --addr, which is also where `kubectl port-forward
// svc/kvscope 8080` puts the Service of agent/deploy/kubernetes.
const DefaultKvscopeURL = "http://127.0.0.1:8080"

// Grafana's units (its unit picker's ids).
const (
	unitSeconds   = "s"
	unitBytes     = "bytes"
	unitBytesRate = "Bps"
	unitGBRate    = "GBs" // 10^9 bytes a second
	unitPerSecond = "reqps"
	unitOps       = "ops"
	unitRatio     = "percentunit"
	unitCount     = "short"
)

// datasource is every query's data source: the dashboard's datasource
// variable.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}
}

// query is a PromQL target: its refId is given by the panel (A, B, ...).
func query(expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().Expr(expr).Datasource(datasource()).Range()
	if legend != "" {
		q = q.LegendFormat(legend)
	}
	return q
}

// instant is a table's target: one instant query, as a table.
func instant(expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Expr(expr).Datasource(datasource()).Instant().Format(prometheus.PromQueryFormatTable)
}

// targets names the queries A, B, ... in order.
func targets(qs ...*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, q := range qs {
		out[i] = q.RefId(string(rune('A' + i)))
	}
	return out
}

// ids numbers a dashboard's panels from 1, in the order they are made.
type ids struct{ next uint32 }

func (n *ids) id() uint32 { n.next++; return n.next }

// series is a time series panel w columns (of 24) wide.
func (n *ids) series(title, desc, unit string, w uint32, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Id(n.id()).Title(title).Description(desc).Unit(unit).Span(w).Height(8).
		Datasource(datasource()).Targets(targets(qs...)).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true))
}

// stat is a single figure, red from bad on (nil: never red).
func (n *ids) stat(title, desc, unit string, bad *float64, q *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	steps := []dashboard.Threshold{{Color: "green"}}
	if bad != nil {
		steps = append(steps, dashboard.Threshold{Value: bad, Color: "red"})
	}
	return stat.NewPanelBuilder().Id(n.id()).Title(title).Description(desc).Unit(unit).Span(4).Height(4).
		Datasource(datasource()).Targets(targets(q)).
		ColorMode(common.BigValueColorModeValue).GraphMode(common.BigValueGraphModeArea).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps))
}

// table is a table of instant queries, merged on their labels, each
// query's value column renamed as columns names it.
func (n *ids) table(title, desc string, w, h uint32, columns []string, qs ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	rename := map[string]string{}
	exclude := map[string]bool{"Time": true}
	for i, c := range columns {
		rename[fmt.Sprintf("Value #%c", 'A'+i)] = c
	}
	if len(qs) == 1 && len(columns) == 1 {
		rename = map[string]string{"Value": columns[0]}
	}
	if len(columns) == 0 {
		exclude["Value"], exclude["__name__"] = true, true
	}
	p := table.NewPanelBuilder().Id(n.id()).Title(title).Description(desc).Span(w).Height(h).
		Datasource(datasource()).Targets(targets(qs...)).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{}))
	if len(qs) > 1 {
		p = p.WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}})
	}
	return p.WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{"excludeByName": exclude, "renameByName": rename}})
}

// heatmap is a heatmap panel of precomputed cells (Grafana calculates
// nothing): buckets when layout is le, else one row per series.
func (n *ids) heatmap(title, desc, unit string, w uint32, layout common.HeatmapCellLayout, q *prometheus.DataqueryBuilder) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().Id(n.id()).Title(title).Description(desc).Span(w).Height(9).
		Datasource(datasource()).Targets(targets(q)).
		Calculate(false).
		RowsFrame(heatmap.NewRowsHeatmapOptionsBuilder().Layout(layout)).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit(unit)).
		CellValues(heatmap.NewCellValuesBuilder().Unit(unit)).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").
			Scale(heatmap.HeatmapColorScaleExponential).Exponent(0.5).Steps(64).Fill("dark-orange")).
		ShowValue(common.VisibilityModeAuto).
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(layout == common.HeatmapCellLayoutLe)).
		ShowLegend()
}

// row is a full-width row title; the panels after it belong to it.
func row(title string) *dashboard.RowBuilder { return dashboard.NewRowBuilder(title) }

// datasourceVariable picks the Prometheus that scrapes kvscope.
func datasourceVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus").
		Description("The Prometheus that scrapes kvscope-agent watch (and kvscope serve), with agent/deploy/prometheus/rules.yml loaded.")
}

// pairVariable is the engine pair, from the watchers' own gauge (every
// watcher exports kvscope_transfers_in_flight from its start).
func pairVariable(multi bool) *dashboard.QueryVariableBuilder {
	const q = "label_values(kvscope_transfers_in_flight, pair)"
	v := dashboard.NewQueryVariableBuilder("pair").Label("Engine pair").
		Description("A watcher's --name: the engine pair it watches (its live-view agents are <pair>/...).").
		Query(dashboard.StringOrMap{String: cog.ToPtr(q)}).Definition(q).
		Datasource(datasource()).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc)
	if multi {
		v = v.Multi(true).IncludeAll(true).AllValue(".*")
	}
	return v
}

// inline shows a dashboard's links and annotation toggles in its
// controls bar, as Grafana does where no placement is given (the SDK's
// builders default to its controls menu).
func inline(d dashboard.Dashboard, err error) (dashboard.Dashboard, error) {
	for i := range d.Links {
		d.Links[i].Placement = nil
	}
	for i := range d.Annotations.List {
		d.Annotations.List[i].Placement = nil
	}
	return d, err
}

// Encode is a dashboard's JSON as make dashboards writes it: indented,
// ending in a newline.
func Encode(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		uid := ""
		if d.Uid != nil {
			uid = *d.Uid
		}
		return nil, fmt.Errorf("grafana: encode dashboard %q: %w", uid, err)
	}
	return append(b, '\n'), nil
}

// File is one generated dashboard and the file name it is written as.
type File struct {
	Name string // fleet-overview.json, engine-pair.json
	JSON []byte
}

// Files builds both dashboards and encodes them.
func Files() ([]File, error) {
	var out []File
	for _, f := range []struct {
		name  string
		build func() (dashboard.Dashboard, error)
	}{{"fleet-overview.json", FleetOverview}, {"engine-pair.json", EnginePair}} {
		d, err := f.build()
		if err != nil {
			return nil, fmt.Errorf("grafana: build %s: %w", f.name, err)
		}
		b, err := Encode(d)
		if err != nil {
			return nil, err
		}
		out = append(out, File{f.name, b})
	}
	return out, nil
}
