package grafana

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// pairSel selects the drill-down's one engine pair.
const pairSel = `pair="$pair"`

// LiveViewURL is the drill-down's link into kvscope serve's live view
// (the live panel is on the Descriptor flow view). The app's URL cannot
// select an agent (its query keys are the deployment's settings), so the
// link opens the flow view and its tooltip says which agents to pick in
// the live panel's fleet table: the watcher's <pair>/... agents.
const LiveViewURL = "${kvscope_url}/?view=flow"

// EnginePair is one engine pair's drill-down: its rank pairs' p99 as a
// P rank × D rank matrix and over time, the transfer-time distribution,
// descriptors per request observed against kvscope's prediction, stuck
// transfers and the oldest request in flight, failures, plan mismatches
// (also as annotations, with stuck transfers), the watcher's health, and
// a link into kvscope's live view.
func EnginePair() (dashboard.Dashboard, error) {
	var n ids
	one := cog.ToPtr(1.0)
	url := dashboard.NewTextBoxVariableBuilder("kvscope_url").Label("kvscope serve").
		Description("kvscope serve's URL as the browser reaches it, for the live-view link (kubectl port-forward svc/kvscope 8080 gives the default).").
		DefaultValue(dashboard.StringOrMap{String: cog.ToPtr(DefaultKvscopeURL)}).
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(DefaultKvscopeURL)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(DefaultKvscopeURL)}})
	rankP99 := `histogram_quantile(0.99, sum by (p_rank, d_rank, le) (rate(kvscope_transfer_duration_seconds_bucket{` + pairSel + `}[$__rate_interval])))`
	b := dashboard.NewDashboardBuilder("kvscope · engine pair").Uid(PairUID).
		Description("One P/D engine pair as kvscope-agent watch --name reports it: rank pairs, descriptors against kvscope's plan, stuck transfers and mismatches.").
		Tags([]string{"kvscope", "nixl", "vllm"}).Refresh("30s").Time("now-3h", "now").Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).Editable().
		WithVariable(datasourceVariable()).
		WithVariable(pairVariable(false)).
		WithVariable(url).
		Link(dashboard.NewDashboardLinkBuilder("kvscope live view").Type(dashboard.DashboardLinkTypeLink).Url(LiveViewURL).Icon("external link").
			Tooltip("kvscope serve's Descriptor flow view: in its live panel's fleet table, pick ${pair}/deployment and ${pair}'s NIXL agents (the page's URL cannot select them)").
			TargetBlank(true)).
		Link(dashboard.NewDashboardLinkBuilder("kvscope dashboards").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"kvscope"}).AsDropdown(false).IncludeVars(true).KeepTime(true)).
		Annotation(annotation("Plan mismatch", "orange", `kvscope_plan_mismatch{`+pairSel+`} == 1`,
			"{{engine}} ({{side}}) runs {{field}}={{observed}}", "kvscope predicts {{field}}={{predicted}} for its flags", "side,field")).
		Annotation(annotation("Stuck transfers", "red", `kvscope_transfers_stuck{`+pairSel+`} > 0`,
			"requests in flight past --stuck-after", "the live view's Deployment panel names the rank and since when", "pair")).
		WithRow(row("The pair now")).
		WithPanel(n.stat("Transfers", "NIXL requests completed per second.", unitPerSecond, nil,
			query(`sum(rate(kvscope_transfer_duration_seconds_count{`+pairSel+`}[$__rate_interval]))`, ""))).
		WithPanel(n.stat("Bytes", "Bytes NIXL moved per second.", unitBytesRate, nil,
			query(`sum(rate(kvscope_transfer_size_bytes_sum{`+pairSel+`}[$__rate_interval]))`, ""))).
		WithPanel(n.stat("p99 transfer time", "Over all rank pairs, NIXL's own transfer time.", unitSeconds, cog.ToPtr(0.5),
			query(`histogram_quantile(0.99, sum by (le) (rate(kvscope_transfer_duration_seconds_bucket{`+pairSel+`}[$__rate_interval])))`, ""))).
		WithPanel(n.stat("Failures", "Failed transfers over the dashboard's time range.", unitCount, one,
			query(`sum(increase(kvscope_transfer_failures_total{`+pairSel+`}[$__range]))`, ""))).
		WithPanel(n.stat("Plan mismatches", "Plan fields that differ from kvscope's prediction now.", unitCount, one,
			query(`sum(kvscope_plan_mismatch{`+pairSel+`})`, ""))).
		WithPanel(n.stat("Stuck transfers", "Requests in flight past --stuck-after now.", unitCount, one,
			query(`sum(kvscope_transfers_stuck{`+pairSel+`})`, ""))).
		WithRow(row("Rank pairs")).
		WithPanel(n.table("p99 transfer time, P rank × D rank", "Rows are P ranks, columns D ranks, as vLLM's TP mapping pairs them (a range such as 2-3 where one request reads from several remote ranks).", 10, 9,
			[]string{"p99"}, instant(rankP99)).
			WithTransformation(dashboard.DataTransformerConfig{Id: "groupingToMatrix", Options: map[string]any{
				"rowField": "p_rank", "columnField": "d_rank", "valueField": "p99", "emptyValue": "empty"}}).
			Unit(unitSeconds).
			CellOptions(common.TableCellOptions{TableColoredBackgroundCellOptions: &common.TableColoredBackgroundCellOptions{
				Type: common.TableCellDisplayModeColorBackground, Mode: cog.ToPtr(common.TableCellBackgroundDisplayModeGradient)}}).
			Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
				{Color: "green"}, {Value: cog.ToPtr(0.1), Color: "yellow"}, {Value: cog.ToPtr(0.5), Color: "red"}}))).
		WithPanel(n.heatmap("p99 per rank pair over time", "One row per rank pair (the recording rule kvscope:transfer_duration_seconds:p99_5m): a row that darkens alone is one slow link.", unitSeconds, 14,
			"unknown", query(`kvscope:transfer_duration_seconds:p99_5m{`+pairSel+`}`, "P{{p_rank}} → D{{d_rank}}"))).
		WithPanel(n.heatmap("Transfer time distribution", "Requests per transfer-time bucket per interval, all rank pairs.", unitSeconds, 12,
			common.HeatmapCellLayoutLe, query(`sum by (le) (increase(kvscope_transfer_duration_seconds_bucket{`+pairSel+`}[$__rate_interval]))`, "{{le}}").
				Format(prometheus.PromQueryFormatHeatmap))).
		WithPanel(n.series("Achieved GB/s per rank pair", "Bytes over NIXL's transfer time, and each rank pair's best of the last day (dashed).", unitGBRate, 12,
			query(`kvscope:transfer_gbps:rate5m{`+pairSel+`}`, "P{{p_rank}} → D{{d_rank}}"),
			query(`kvscope:transfer_gbps:best_1d{`+pairSel+`}`, "P{{p_rank}} → D{{d_rank}} best (1d)")).
			OverrideByQuery("B", dashed())).
		WithPanel(n.series("Transfers per second by rank pair", "NIXL requests completed per second.", unitPerSecond, 12,
			query(`sum by (p_rank, d_rank) (rate(kvscope_transfer_duration_seconds_count{`+pairSel+`}[$__rate_interval]))`, "P{{p_rank}} → D{{d_rank}}"))).
		WithPanel(n.series("Bytes per request by rank pair", "Median bytes per NIXL request: the KV of one request's blocks on that rank pair.", unitBytes, 12,
			query(`histogram_quantile(0.5, sum by (p_rank, d_rank, le) (rate(kvscope_transfer_size_bytes_bucket{`+pairSel+`}[$__rate_interval])))`, "P{{p_rank}} → D{{d_rank}}"))).
		WithRow(row("Descriptors against kvscope's plan")).
		WithPanel(n.series("Descriptors per request: observed and predicted", "Observed: vllm:nixl_num_descriptors over the last scrape. Predicted (dashed): kvscope's merged descriptors for a request of the observed mean bytes. More than predicted means unmerged or smaller blocks.", unitCount, 16,
			query(`kvscope_descriptors_per_request{`+pairSel+`, source="observed"}`, "{{engine}} ({{side}}) observed"),
			query(`kvscope_descriptors_per_request{`+pairSel+`, source="predicted"}`, "{{engine}} ({{side}}) predicted")).
			OverrideByQuery("B", dashed())).
		WithPanel(n.series("Observed ÷ predicted", "1 when the engine's requests take the descriptors kvscope's plan says.", unitCount, 8,
			query(`sum without (source) (kvscope_descriptors_per_request{`+pairSel+`, source="observed"}) / sum without (source) (kvscope_descriptors_per_request{`+pairSel+`, source="predicted"})`, "{{engine}} ({{side}})"))).
		WithRow(row("Stuck transfers")).
		WithPanel(n.series("In flight and stuck", "Requests posted and not completed (telemetry version 1 rings write the post), and those past --stuck-after.", unitCount, 8,
			query(`kvscope_transfers_in_flight{`+pairSel+`}`, "in flight"),
			query(`kvscope_transfers_stuck{`+pairSel+`}`, "stuck"))).
		WithPanel(n.series("Oldest request in flight", "Its age; past --stuck-after it is reported stuck once, to the live view too.", unitSeconds, 8,
			query(`kvscope_transfer_oldest_in_flight_age_seconds{`+pairSel+`}`, "oldest"))).
		WithPanel(n.series("Stuck found, KV expired, notifications failed", "Per interval: requests found stuck, KV a prefill engine freed unread, failed NIXL notifications, per engine.", unitCount, 8,
			query(`sum(increase(kvscope_stuck_transfers_total{`+pairSel+`}[$__rate_interval]))`, "stuck found"),
			query(`sum by (engine) (increase(kvscope_vllm_kv_expired_requests_total{`+pairSel+`}[$__rate_interval]))`, "{{engine}} KV expired"),
			query(`sum by (engine) (increase(kvscope_vllm_failed_notifications_total{`+pairSel+`}[$__rate_interval]))`, "{{engine}} notifications failed"))).
		WithRow(row("Failures and plan mismatches")).
		WithPanel(n.series("Failures by status", "Failed transfers per second by NIXL status and where they were seen.", unitOps, 12,
			query(`sum by (status, source) (rate(kvscope_transfer_failures_total{`+pairSel+`}[$__rate_interval]))`, "{{status}} ({{source}})"))).
		WithPanel(n.table("Plan mismatches now", "The engine's plan field, what it reports and what kvscope predicts for its flags (also the dashboard's orange annotations).", 12, 8, nil,
			instant(`kvscope_plan_mismatch{`+pairSel+`} == 1`))).
		WithRow(row("Watcher")).
		WithPanel(n.series("Rings, targets and side-channel ranks", "1 up, 0 down: each telemetry ring, /metrics target or side channel, and each rank a side channel answers for.", unitCount, 16,
			query(`kvscope_watch_ring_up{`+pairSel+`}`, "ring {{ring}}"),
			query(`kvscope_watch_target_up{`+pairSel+`}`, "{{kind}} {{target}}"),
			query(`kvscope_side_channel_rank_up{`+pairSel+`}`, "{{engine}} rank {{rank}}"))).
		WithPanel(n.series("Events and updates dropped", "NIXL telemetry events lost per interval, and metric updates any kvscope registry refused (a kvscope bug: label names or types that disagree; not per pair).", unitCount, 8,
			query(`sum(increase(kvscope_telemetry_events_dropped_total{`+pairSel+`}[$__rate_interval]))`, "telemetry events"),
			query(`sum by (instance) (increase(kvscope_metrics_dropped_total[$__rate_interval]))`, "{{instance}} metric updates")))
	return inline(b.Build())
}

// annotation is a Prometheus annotation: an event while expr has a
// series, titled and tagged from its labels.
func annotation(name, color, expr, title, text, tags string) *dashboard.AnnotationQueryBuilder {
	return dashboard.NewAnnotationQueryBuilder().Name(name).Datasource(datasource()).Enable(true).IconColor(color).
		Expr(expr).TitleFormat(title).TextFormat(text).TagKeys(tags).Step("60s").UseValueForTime(false).
		Target(prometheus.NewDataqueryBuilder().Expr(expr).RefId("Anno").Range())
}

// dashed draws a series' line dashed (kvscope's predictions, the bests).
func dashed() []dashboard.DynamicConfigValue {
	return []dashboard.DynamicConfigValue{{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}}}
}
