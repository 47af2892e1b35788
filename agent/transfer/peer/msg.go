package peer

import (
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/xfer"
)

// Hello is D's first message on each of its connections (MsgHello).
type Hello struct {
	Token   string          `json:"token"`
	Session string          `json:"session"` // one D agent's connections share it
	Conn    int             `json:"conn"`    // 0 is D's control connection
	D       []xfer.Metadata `json:"d"`
	NIXL    *NIXLHello      `json:"nixl,omitempty"`
}

// NIXLHello is one side's NIXL identity in the handshake: its agent's name
// and its getLocalMD blob (which holds raw addresses: a peer loads it only
// after the token check). D sends it in its Hello, P answers with its own
// (MsgNIXL).
type NIXLHello struct {
	Agent string `json:"agent"`
	MD    []byte `json:"md"`
}

// Prefill asks P to plan a request and fill its blocks (MsgPrefill).
type Prefill struct {
	ID              string `json:"id"`
	PromptTokens    int    `json:"prompt_tokens"`
	PrefixHitTokens int    `json:"prefix_hit_tokens"`
}

// Ready is P's answer to a prefill whose blocks are written (MsgReady).
type Ready struct {
	ID string `json:"id"`
}

// Push asks P to push the last prefilled request (MsgPush).
type Push struct {
	Notif string `json:"notif"`
}

// Report is P's report of a push (MsgPushed): NIXL's numbers, measured on
// P. Its fields are transfer.Stats's, in the same order, so that the two
// convert into each other and a statistic added to one must be added to
// the other.
type Report struct {
	Bytes      int64             `json:"bytes"`
	Descs      int               `json:"descs"`
	Merged     int               `json:"descs_merged"`
	PrepUS     float64           `json:"prep_us"`
	PostUS     float64           `json:"post_us"`
	TransferUS float64           `json:"transfer_us"`
	Timing     event.Timing      `json:"timing"`
	Source     string            `json:"source"`
	Batches    []event.BatchData `json:"batches"`
}
