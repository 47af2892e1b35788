package deploytest

import (
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/metrics"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/live"
)

// Served is the registry of kvscope serve's /metrics after its hub took
// one of each event a watcher and an agent send (a transfer, an error, a
// stuck transfer, a plan mismatch, a sample) from Pair's deployment
// agent: the kvscope_hub_*, kvscope_live_* and kvscope_agent_* families,
// as the server counts them (server/live/metrics.go).
func Served(t testing.TB) *metrics.Registry {
	t.Helper()
	reg := metrics.New()
	h := live.New(live.Options{Metrics: reg, Logf: func(string, ...any) {}})
	defer h.Close()
	agent := Pair + "/deployment"
	now := time.Now().UnixNano()
	events := []event.Event{
		{Kind: event.TransferDone, Done: &event.DoneData{Request: "req-1", Bytes: 1 << 20, Descs: 96, Merged: 12, TransferUS: 90, GBps: 11.6,
			Timing: event.Measured, Source: "nixl", Verified: "skipped"}},
		{Kind: event.Error, Error: &event.ErrorData{Request: "req-2", Status: "ERR_BACKEND", Message: "UCX failed"}},
		{Kind: event.StuckTransfer, Stuck: &event.StuckData{Request: "req-3", Engine: "D rank 1", Source: "ring", SinceNS: now, AgeS: 130, Reason: "posted, not completed"}},
		{Kind: event.PlanMismatch, Mismatch: &event.MismatchData{Engine: "d", Side: "D", Field: "block_size", Observed: "544", Predicted: "16", Source: "vllm:cache_config_info"}},
		{Kind: event.Sample, Sample: &event.SampleData{GBps: 1.5, P50US: 80, P99US: 400}},
	}
	for i := range events {
		events[i].V, events[i].Agent, events[i].Seq, events[i].TS = event.Version, agent, uint64(i+1), now
	}
	if last := h.Publish(events); last != uint64(len(events)) {
		t.Fatalf("the hub stored %d of %d events", last, len(events))
	}
	return reg
}
