package event

import (
	"bytes"
	"encoding/json"
)

// FleetSummary is the message a server sends every browser once a second
// besides the event frames: every agent's line and the slowest transfers
// of the last minute, fleet-wide. A browser that draws only some agents
// (/ws/live?agents=…) still sees the whole fleet here.
type FleetSummary struct {
	Fleet   []FleetLine     `json:"fleet"`
	Slowest []FleetTransfer `json:"slowest"`
}

// FleetLine is one agent in the summary.
type FleetLine struct {
	Agent     string  `json:"agent"`
	Host      string  `json:"host"`
	Role      string  `json:"role"`
	Backend   string  `json:"backend"`
	GPUs      int     `json:"gpus"`
	Engine    string  `json:"engine,omitempty"`
	LastSeenS float64 `json:"last_seen_s"` // seconds ago
	EventsPS  uint64  `json:"events_per_s"`
	GBps      float64 `json:"gbps"` // over the last second
	P99US     float64 `json:"p99_us"`
	Errors    uint64  `json:"errors"`
	Events    uint64  `json:"events"`
}

// FleetTransfer is one of the slowest transfers.
type FleetTransfer struct {
	Agent      string  `json:"agent"`
	Request    string  `json:"request"`
	Bytes      int64   `json:"bytes"`
	TransferUS float64 `json:"transfer_us"`
	Timing     Timing  `json:"timing"`
}

// ParseFleet reads a FleetSummary message; ok is false for anything else.
func ParseFleet(msg []byte) (FleetSummary, bool) {
	var f struct {
		Fleet   *[]FleetLine    `json:"fleet"`
		Slowest []FleetTransfer `json:"slowest"`
	}
	msg = bytes.TrimSpace(msg)
	if len(msg) == 0 || msg[0] != '{' || !bytes.HasPrefix(msg, []byte(`{"fleet"`)) || json.Unmarshal(msg, &f) != nil || f.Fleet == nil {
		return FleetSummary{}, false
	}
	return FleetSummary{Fleet: *f.Fleet, Slowest: f.Slowest}, true
}
