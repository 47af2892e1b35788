package event

import (
	"encoding/json"
	"fmt"
)

// traceEvent is one Chrome trace event (the JSON format Perfetto and
// chrome://tracing read).
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"` // microseconds
	Dur  float64        `json:"dur,omitempty"`
	PID  string         `json:"pid"`
	TID  string         `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace renders recorded events as a Chrome/Perfetto trace: a process per
// agent, a thread per rank pair for descriptor batches and one for whole
// transfers; synthesized timings are marked in their arguments and
// category.
func Trace(events []Event) ([]byte, error) {
	out := struct {
		TraceEvents     []traceEvent `json:"traceEvents"`
		DisplayTimeUnit string       `json:"displayTimeUnit"`
	}{DisplayTimeUnit: "ms"}
	starts := map[string]int64{} // request -> start timestamp
	for _, e := range events {
		us := float64(e.TS) / 1000
		switch e.Kind {
		case TransferStart:
			starts[e.Agent+"/"+e.Start.Request] = e.TS
		case DescBatch:
			b := e.Batch
			t0 := starts[e.Agent+"/"+b.Request]
			if t0 == 0 {
				t0 = e.TS
			}
			out.TraceEvents = append(out.TraceEvents, traceEvent{
				Name: fmt.Sprintf("%s g%d→g%d", b.Layer, b.PGroup, b.DGroup), Cat: "desc." + string(b.Timing), Ph: "X",
				TS: float64(t0+b.StartNS) / 1000, Dur: max(float64(b.EndNS-b.StartNS)/1000, 0.001),
				PID: e.Agent, TID: fmt.Sprintf("P%d→D%d", b.PRank, b.DRank),
				Args: map[string]any{"request": b.Request, "descs": b.Descs, "bytes": b.Bytes, "timing": b.Timing, "kind": b.Kind},
			})
		case TransferDone:
			d := e.Done
			out.TraceEvents = append(out.TraceEvents, traceEvent{
				Name: d.Request, Cat: "transfer." + string(d.Timing), Ph: "X",
				TS: us - d.TransferUS, Dur: max(d.TransferUS, 0.001), PID: e.Agent, TID: "transfers",
				Args: map[string]any{"bytes": d.Bytes, "descs": d.Descs, "descs_merged": d.Merged, "gbps": d.GBps, "verified": d.Verified, "timing": d.Timing},
			})
		case Error:
			out.TraceEvents = append(out.TraceEvents, traceEvent{Name: e.Error.Status, Cat: "error", Ph: "i", TS: us, PID: e.Agent, TID: "transfers",
				Args: map[string]any{"message": e.Error.Message, "request": e.Error.Request}})
		case Sample:
			out.TraceEvents = append(out.TraceEvents, traceEvent{Name: "GB/s", Ph: "C", TS: us, PID: e.Agent, TID: "samples",
				Args: map[string]any{"gbps": e.Sample.GBps, "p99_us": e.Sample.P99US}})
		}
	}
	return json.Marshal(out)
}
