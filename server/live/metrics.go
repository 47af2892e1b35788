package live

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/core/event"
)

// What the hub drops, each counted on /metrics: frames a browser read too
// slowly for (and the events they carried, which the browser sees as a
// sequence gap), events the recording could not keep up with, and what a
// resuming browser's catch-up had to leave out. The agents' own drops
// come in their samples (kvscope_agent_dropped_events).
const (
	metricSubscriberDroppedFrames = "kvscope_hub_subscriber_dropped_frames_total"
	helpSubscriberDroppedFrames   = "Frames dropped because a browser read too slowly."
	metricSubscriberDroppedEvents = "kvscope_hub_subscriber_dropped_events_total"
	helpSubscriberDroppedEvents   = "Events in the frames dropped because a browser read too slowly: the browser sees them as a gap."
	metricRecordDropped           = "kvscope_hub_record_dropped_total"
	helpRecordDropped             = "Events the recording (--record) dropped because its file took them more slowly than they came."
	metricRecordErrors            = "kvscope_hub_record_errors_total"
	helpRecordErrors              = "Events the recording could not take."
	metricCatchUpSkipped          = "kvscope_hub_catchup_skipped_total"
	helpCatchUpSkipped            = "Stream messages that were no frame of their agent's events, and events too large for a frame, that a resuming browser's catch-up left out."
)

// liveSecondsBuckets are kvscope_live_transfer_duration_seconds's: 50 µs
// to about 13 s.
var liveSecondsBuckets = prometheus.ExponentialBuckets(50e-6, 2, 19)

// initMetrics makes the drop counters at 0, so that /metrics shows them
// before the first drop.
func initMetrics(reg *metrics.Registry) {
	for _, m := range []struct{ name, help string }{
		{metricSubscriberDroppedFrames, helpSubscriberDroppedFrames},
		{metricSubscriberDroppedEvents, helpSubscriberDroppedEvents},
		{metricRecordDropped, helpRecordDropped},
		{metricRecordErrors, helpRecordErrors},
		{metricCatchUpSkipped, helpCatchUpSkipped},
	} {
		reg.Add(m.name, m.help, 0)
	}
}

// count updates the server's metrics from an event.
func (h *Hub) count(e event.Event) {
	h.metrics.Add("kvscope_hub_events_total", "Events received from agents, by kind.", 1, "kind", string(e.Kind))
	switch e.Kind {
	case event.TransferDone:
		h.metrics.Add("agent_tx_bytes_total", "Bytes the agents' transfers moved.", float64(e.Done.Bytes), "agent", e.Agent)
		h.metrics.Observe("agent_xfer_time_us", "Transfer time per request, microseconds.", e.Done.TransferUS)
		h.metrics.ObserveHistogram("kvscope_live_transfer_duration_seconds", "Transfer time per request the agents reported (transfer_done), by clock (host, nixl).", liveSecondsBuckets, e.Done.TransferUS/1e6, nil, "source", e.Done.Source)
		h.metrics.Add("kvscope_agent_transfers_total", "Transfers completed, by agent and oracle verdict.", 1, "agent", e.Agent, "verified", e.Done.Verified)
		h.metrics.Add("kvscope_agent_descriptors_total", "Descriptors submitted, by agent.", float64(e.Done.Descs), "agent", e.Agent)
		h.metrics.Add("kvscope_agent_descriptors_merged_total", "Descriptors posted after merging, by agent and clock (nixl: NIXL's telemetry).", float64(e.Done.Merged), "agent", e.Agent, "source", e.Done.Source)
	case event.Error:
		h.metrics.Add("agent_errors_total", "Agent errors, by status.", 1, "status", e.Error.Status)
	case event.StuckTransfer:
		if !e.Stuck.Cleared {
			h.metrics.Add("kvscope_live_stuck_transfers_total", "stuck_transfer events received (not the cleared ones), by source: ring, agent, vllm, side_channel.", 1, "source", e.Stuck.Source)
		}
	case event.PlanMismatch:
		h.metrics.Add("kvscope_live_plan_mismatches_total", "plan_mismatch events received, by side and field.", 1, "side", e.Mismatch.Side, "field", e.Mismatch.Field)
	case event.Sample:
		h.metrics.Set("kvscope_agent_dropped_events", "Events an agent's queue dropped so far.", float64(e.Sample.DroppedEvents), "agent", e.Agent)
	}
}
