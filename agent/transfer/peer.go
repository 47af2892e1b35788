package transfer

import (
	"github.com/kvscope/kvscope/agent/transfer/peer"
	"github.com/kvscope/kvscope/core/oracle"
	"github.com/kvscope/kvscope/core/xfer"
)

// Two agents, P and D, on two hosts, connected by the protocol of package
// peer. With the host backend P serves its registered regions over TCP
// (PeerServer, peer_server.go) and D reads them (Remote, peer_remote.go),
// as NIXL's D pulls from P. With the nixl backend that connection is only
// the control channel: the handshake carries each side's NIXL metadata,
// and the bytes move by NIXL over UCX (NIXLRemote, nixl_peer.go). D's end
// of the control channel, common to both, is peer_client.go.

// PrefillRequest asks P to plan a request and fill its blocks: the
// protocol's prefill message, which a Prefiller sends.
type PrefillRequest = peer.Prefill

// NIXLHello is one side's NIXL identity in the handshake (the protocol's
// peer.NIXLHello): its agent's name and its getLocalMD blob.
type NIXLHello = peer.NIXLHello

// NIXLPeer is a NIXL backend holding one side of a two-agent deployment.
type NIXLPeer interface {
	// NIXLHello is this side's agent name and metadata blob.
	NIXLHello() (NIXLHello, error)
	// LoadPeer loads the other side's blob, after checking that it is the
	// agent the hello names and not this one, and keeps the regions the
	// peer advertised (md: its version-15 metadata, real base addresses)
	// to check every remote descriptor against. A peer loaded before (an
	// agent that restarted) is dropped first.
	LoadPeer(h NIXLHello, side xfer.Side, md []xfer.Metadata) error
}

// NIXLSide is a NIXL backend holding one side of a two-agent deployment
// (NewNIXLSide): a Backend, the memory a P agent serves from, and the
// NIXL half of the handshake.
type NIXLSide interface {
	Backend
	PeerMemory
	NIXLPeer
}

// PeerMemory is what a P agent serves from: the registered memory a
// prefill writes, and its version-15 metadata.
type PeerMemory interface {
	oracle.Memory
	// SideMetadata is the version-15 metadata of one side's ranks.
	SideMetadata(side xfer.Side) []xfer.Metadata
}

// PeerPusher is a D backend whose P agent can push into it (connector
// nixl-push between two agents: NIXLRemote).
type PeerPusher interface {
	PeerPushes() bool
}

// Prefiller is a backend whose P lives in another agent: it asks that
// agent to fill P's blocks for a request.
type Prefiller interface {
	Prefill(PrefillRequest) error
}
