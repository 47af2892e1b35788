package grafana

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// fleetSel selects the engine pairs of the fleet's pair variable (a
// multi-value variable: a regular expression).
const fleetSel = `pair=~"$pair"`

// FleetOverview is the fleet's dashboard: every engine pair's
// transfers, bytes, p99, failures, plan mismatches and stuck
// transfers, the watchers' health, and what kvscope serve receives.
// Each pair in its table links to the EnginePair drill-down.
func FleetOverview() (dashboard.Dashboard, error) {
	var n ids
	one := cog.ToPtr(1.0)
	drill := "/d/" + PairUID + "/kvscope-engine-pair?var-pair=${__value.raw}&${datasource:queryparam}&${__url_time_range}"
	b := dashboard.NewDashboardBuilder("kvscope · fleet overview").Uid(FleetUID).
		Description("NIXL KV-cache transfers of every P/D engine pair kvscope-agent watch reports, against kvscope's plan.").
		Tags([]string{"kvscope", "nixl", "vllm"}).Refresh("30s").Time("now-3h", "now").Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).Editable().
		WithVariable(datasourceVariable()).
		WithVariable(pairVariable(true)).
		Link(dashboard.NewDashboardLinkBuilder("kvscope dashboards").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"kvscope"}).AsDropdown(false).IncludeVars(true).KeepTime(true)).
		WithRow(row("Engine pairs")).
		WithPanel(n.stat("Engine pairs", "Engine pairs whose watcher Prometheus scrapes.", unitCount, nil,
			query(`count(count by (pair) (kvscope_transfers_in_flight{`+fleetSel+`}))`, ""))).
		WithPanel(n.stat("Transfers", "NIXL requests completed per second, all pairs.", unitPerSecond, nil,
			query(`sum(rate(kvscope_transfer_duration_seconds_count{`+fleetSel+`}[$__rate_interval]))`, ""))).
		WithPanel(n.stat("Bytes", "Bytes NIXL moved per second, all pairs.", unitBytesRate, nil,
			query(`sum(rate(kvscope_transfer_size_bytes_sum{`+fleetSel+`}[$__rate_interval]))`, ""))).
		WithPanel(n.stat("Failures", "Failed transfers over the dashboard's time range, every status and source.", unitCount, one,
			query(`sum(increase(kvscope_transfer_failures_total{`+fleetSel+`}[$__range]))`, ""))).
		WithPanel(n.stat("Plan mismatches", "Engine plan fields that differ from kvscope's prediction now.", unitCount, one,
			query(`sum(kvscope_plan_mismatch{`+fleetSel+`})`, ""))).
		WithPanel(n.stat("Stuck transfers", "Requests in flight for longer than --stuck-after now.", unitCount, one,
			query(`sum(kvscope_transfers_stuck{`+fleetSel+`})`, ""))).
		WithPanel(n.table("Engine pairs now", "One row per engine pair; click a pair for its drill-down.", 24, 8,
			[]string{"transfers/s", "bytes/s", "p99 (s)", "failure ratio", "plan mismatches", "stuck", "in flight"},
			instant(`sum by (pair) (rate(kvscope_transfer_duration_seconds_count{`+fleetSel+`}[$__rate_interval]))`),
			instant(`sum by (pair) (rate(kvscope_transfer_size_bytes_sum{`+fleetSel+`}[$__rate_interval]))`),
			instant(`histogram_quantile(0.99, sum by (pair, le) (rate(kvscope_transfer_duration_seconds_bucket{`+fleetSel+`}[$__rate_interval])))`),
			instant(`kvscope:transfer_failure_ratio:rate5m{`+fleetSel+`}`),
			instant(`sum by (pair) (kvscope_plan_mismatch{`+fleetSel+`})`),
			instant(`sum by (pair) (kvscope_transfers_stuck{`+fleetSel+`})`),
			instant(`sum by (pair) (kvscope_transfers_in_flight{`+fleetSel+`})`)).
			OverrideByName("pair", []dashboard.DynamicConfigValue{{Id: "links", Value: []map[string]any{{
				"title": "Drill down into ${__value.raw}", "url": drill}}}}).
			OverrideByName("bytes/s", []dashboard.DynamicConfigValue{{Id: "unit", Value: unitBytesRate}}).
			OverrideByName("p99 (s)", []dashboard.DynamicConfigValue{{Id: "unit", Value: unitSeconds}}).
			OverrideByName("failure ratio", []dashboard.DynamicConfigValue{{Id: "unit", Value: unitRatio}})).
		WithRow(row("Rates and latency")).
		WithPanel(n.series("Transfers per second", "NIXL requests completed per second, per engine pair.", unitPerSecond, 12,
			query(`sum by (pair) (rate(kvscope_transfer_duration_seconds_count{`+fleetSel+`}[$__rate_interval]))`, "{{pair}}"))).
		WithPanel(n.series("Bytes per second", "Bytes NIXL moved per second, per engine pair.", unitBytesRate, 12,
			query(`sum by (pair) (rate(kvscope_transfer_size_bytes_sum{`+fleetSel+`}[$__rate_interval]))`, "{{pair}}"))).
		WithPanel(n.series("p99 transfer time", "NIXL's own transfer time (agent_xfer_time): the pair's p99 over all its rank pairs, and its slowest rank pair's (the recording rule).", unitSeconds, 12,
			query(`histogram_quantile(0.99, sum by (pair, le) (rate(kvscope_transfer_duration_seconds_bucket{`+fleetSel+`}[$__rate_interval])))`, "{{pair}}"),
			query(`max by (pair) (kvscope:transfer_duration_seconds:p99_5m{`+fleetSel+`})`, "{{pair}} slowest rank pair"))).
		WithPanel(n.series("Achieved GB/s against the best", "Each pair's slowest rank pair's GB/s as a share of that rank pair's best of the last day: a drop means a slower transport or link.", unitRatio, 12,
			query(`min by (pair) (kvscope:transfer_gbps:ratio_to_best{`+fleetSel+`})`, "{{pair}}"))).
		WithRow(row("Failures and plan mismatches")).
		WithPanel(n.series("Failures by status", "Failed transfers per second by NIXL status and where they were seen (ring, vllm, agent).", unitOps, 12,
			query(`sum by (pair, status, source) (rate(kvscope_transfer_failures_total{`+fleetSel+`}[$__rate_interval]))`, "{{pair}} {{status}} ({{source}})"))).
		WithPanel(n.series("Failure ratio", "Failed transfers over all transfers, 5 minutes (the recording rule).", unitRatio, 12,
			query(`kvscope:transfer_failure_ratio:rate5m{`+fleetSel+`}`, "{{pair}}"))).
		WithPanel(n.table("Plan mismatches now", "Engines whose plan differs from what kvscope predicts for their flags: the field, what the engine reports and what kvscope predicts.", 24, 7, nil,
			instant(`kvscope_plan_mismatch{`+fleetSel+`} == 1`))).
		WithRow(row("Stuck transfers")).
		WithPanel(n.series("Stuck and in flight", "Requests posted and not completed, and those past --stuck-after.", unitCount, 12,
			query(`sum by (pair) (kvscope_transfers_stuck{`+fleetSel+`})`, "{{pair}} stuck"),
			query(`sum by (pair) (kvscope_transfers_in_flight{`+fleetSel+`})`, "{{pair}} in flight"))).
		WithPanel(n.series("Oldest request in flight", "Age of each pair's oldest request posted and not completed.", unitSeconds, 12,
			query(`max by (pair) (kvscope_transfer_oldest_in_flight_age_seconds{`+fleetSel+`})`, "{{pair}}"))).
		WithPanel(n.series("Stuck found, KV expired, notifications failed", "Requests found stuck, KV a prefill engine freed unread (vllm:nixl_num_kv_expired_reqs), and failed NIXL notifications, per interval.", unitCount, 12,
			query(`sum by (pair) (increase(kvscope_stuck_transfers_total{`+fleetSel+`}[$__rate_interval]))`, "{{pair}} stuck found"),
			query(`sum by (pair) (increase(kvscope_vllm_kv_expired_requests_total{`+fleetSel+`}[$__rate_interval]))`, "{{pair}} KV expired"),
			query(`sum by (pair) (increase(kvscope_vllm_failed_notifications_total{`+fleetSel+`}[$__rate_interval]))`, "{{pair}} notifications failed"))).
		WithPanel(n.series("Descriptors per request against kvscope's prediction", "Observed descriptors per request over predicted, per engine: above 1, requests take more descriptors than kvscope's merged plan.", unitCount, 12,
			query(`sum without (source) (kvscope_descriptors_per_request{`+fleetSel+`, source="observed"}) / sum without (source) (kvscope_descriptors_per_request{`+fleetSel+`, source="predicted"})`, "{{pair}} {{engine}} ({{side}})"))).
		WithRow(row("Watchers")).
		WithPanel(n.series("Rings, targets and side-channel ranks up", "The worst of each pair's telemetry rings, scrape targets and side-channel ranks: 1 up, 0 down.", unitCount, 12,
			query(`min by (pair) (kvscope_watch_ring_up{`+fleetSel+`})`, "{{pair}} rings"),
			query(`min by (pair) (kvscope_watch_target_up{`+fleetSel+`})`, "{{pair}} targets"),
			query(`min by (pair) (kvscope_side_channel_rank_up{`+fleetSel+`})`, "{{pair}} side-channel ranks"))).
		WithPanel(n.series("Events and updates dropped", "NIXL telemetry events lost per interval (the transfer figures under-count while this is above 0), and metric updates any kvscope registry refused (a kvscope bug; not per pair).", unitCount, 12,
			query(`sum by (pair) (increase(kvscope_telemetry_events_dropped_total{`+fleetSel+`}[$__rate_interval]))`, "{{pair}} telemetry events"),
			query(`sum by (instance) (increase(kvscope_metrics_dropped_total[$__rate_interval]))`, "{{instance}} metric updates"))).
		WithRow(row("kvscope serve")).
		WithPanel(n.series("Events received", "Events kvscope serve's hub took from agents and watchers, by kind (its /metrics; not per pair).", unitOps, 8,
			query(`sum by (kind) (rate(kvscope_hub_events_total[$__rate_interval]))`, "{{kind}}"))).
		WithPanel(n.series("Stuck transfers and mismatches reported", "stuck_transfer and plan_mismatch events the live view got, per interval.", unitCount, 8,
			query(`sum by (source) (increase(kvscope_live_stuck_transfers_total[$__rate_interval]))`, "stuck ({{source}})"),
			query(`sum by (side, field) (increase(kvscope_live_plan_mismatches_total[$__rate_interval]))`, "mismatch {{side}} {{field}}"))).
		WithPanel(n.series("Events dropped on the way to browsers", "Events browsers missed because they read too slowly, and events agents' own queues dropped.", unitCount, 8,
			query(`sum(increase(kvscope_hub_subscriber_dropped_events_total[$__rate_interval]))`, "to browsers"),
			query(`sum by (agent) (kvscope_agent_dropped_events)`, "{{agent}} queue")))
	return inline(b.Build())
}
