package watch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/xfer"
)

// vLLM's NIXL handshake side channel, read-only: each engine's scheduler
// process answers on a ZMQ ROUTER (VLLM_NIXL_SIDE_CHANNEL_PORT + its data
// parallel index) with the handshake metadata of each TP rank. A request
// is msgpack of (b"get_meta_msg", tp_rank); the answer is msgpack of
// NixlHandshakePayload {compatibility_hash, agent_metadata_bytes}, and
// agent_metadata_bytes is msgpack of NixlAgentMetadata (engine_id,
// agent_metadata: NIXL's getLocalMD blob, kv_caches_base_addr, num_blocks,
// block_lens, kv_cache_layout, block_size, ...; vllm/distributed/
// kv_transfer/kv_connector/v1/nixl/metadata.py). vLLM's listener has no
// guard around decoding a request: a malformed one stops that engine's
// handshakes. So only well-formed requests are sent, one at a time, each
// with a deadline.

// RankMetadata is what an engine's side channel says of one TP rank.
type RankMetadata struct {
	Rank       int
	EngineID   string
	Agent      string // the NIXL agent, from the getLocalMD blob: its telemetry ring's file name
	CompatHash string
	BlockSize  int
	NumBlocks  int64
	BlockLens  []int64
	Regions    int // kv_caches_base_addr entries
	Layout     string
	Backend    string // attn_backend_name (newer vLLM)
	// SSMSizes are ssm_sizes: one state layer's conv and SSM bytes on
	// this rank (version 4 on; 0, 0 without state layers); nil when the
	// engine does not send them.
	SSMSizes []int64
	// Members are the layers using each region (region_members: vLLM's
	// version 12 sends layer names, kvscope's group-pair version 15 maps
	// with a "layer" key); nil when the engine does not send them.
	Members [][]string
	// GroupIDs is each region's KV cache group (region_group_ids, v11).
	GroupIDs []int
	// Version is the handshake version the answer implies: the lowest
	// NIXL_CONNECTOR_VERSION whose metadata has every member the engine
	// sent (0: an unwrapped NixlAgentMetadata, before version 1); a
	// version that adds no member (2, 5, 6, 10) cannot be told from the
	// one before it, so this is a lower bound. VersionFrom names the
	// member that decided, Releases the vLLM releases kvscope has read
	// whose handshake has that version, and Unknown the members no
	// version kvscope knows defines (a newer vLLM, or a fork).
	Version     int
	VersionFrom string
	Releases    []string
	Unknown     []string
}

// Advertised is what the P/D preflight reads of the rank's answer
// (xfer.PreflightObserved).
func (md *RankMetadata) Advertised() xfer.Advertised {
	return xfer.Advertised{Rank: md.Rank, EngineID: md.EngineID, CompatHash: md.CompatHash, Handshake: md.Version, HandshakeFrom: md.VersionFrom,
		Releases: md.Releases, BlockSize: md.BlockSize, NumBlocks: md.NumBlocks, Regions: md.Regions, BlockLens: md.BlockLens,
		Layout: md.Layout, Backend: md.Backend, SSMSizes: md.SSMSizes, Members: md.Members}
}

// AgentName reads the agent's name from NIXL's getLocalMD blob: it starts
// "nixlSerDes|", then the tag "Agent", a native size_t length and the
// name, then "|" (NIXL's serdes).
func AgentName(blob []byte) (string, error) {
	const head = "nixlSerDes|Agent"
	if !bytes.HasPrefix(blob, []byte(head)) || len(blob) < len(head)+8 {
		return "", errors.New("watch: the agent metadata is not a NIXL blob (no nixlSerDes|Agent)")
	}
	n := binary.NativeEndian.Uint64(blob[len(head):])
	rest := blob[len(head)+8:]
	if n == 0 || n > 4096 || uint64(len(rest)) < n+1 || rest[n] != '|' {
		return "", fmt.Errorf("watch: the NIXL blob's agent name of %d bytes does not fit", n)
	}
	return string(rest[:n]), nil
}

// QueryError is a side channel query that failed: the engine's address,
// the rank asked for, and why (no answer in time, an answer that is not a
// handshake, a refused connection).
type QueryError struct {
	Addr string
	Rank int
	Err  error
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("watch: --side-channel %s rank %d: %v", e.Addr, e.Rank, e.Err)
}

func (e *QueryError) Unwrap() error { return e.Err }

// QueryRank asks an engine's side channel at addr (host:port) for one
// rank's handshake metadata, waiting at most timeout. maxAnswerBytes
// bounds the answer, all its frames together (0: DefaultMaxAnswerBytes);
// a frame over it is refused from its header, before it is read. Its
// errors are *QueryError.
func QueryRank(ctx context.Context, addr string, rank int, timeout time.Duration, maxAnswerBytes int64) (*RankMetadata, error) {
	if maxAnswerBytes <= 0 {
		maxAnswerBytes = DefaultMaxAnswerBytes
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(err error) (*RankMetadata, error) {
		// The connection's deadline is ctx's, and a cancelled ctx closes it.
		closed := errors.Is(err, net.ErrClosed) && ctx.Err() != nil
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || closed && errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("no answer within %s: %w", timeout, err)
		case closed:
			err = fmt.Errorf("stopped waiting (%v): %w", ctx.Err(), err)
		}
		return nil, &QueryError{Addr: addr, Rank: rank, Err: err}
	}
	z, conn, err := dialZMTP(ctx, addr, maxAnswerBytes)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // a cancelled watcher ends the wait
	defer stop()
	req, err := msgpack.Marshal([]any{[]byte("get_meta_msg"), rank})
	if err != nil {
		return fail(err)
	}
	if err := z.send(req); err != nil {
		return fail(err)
	}
	frames, err := z.recv()
	if err != nil {
		return fail(err)
	}
	md, err := DecodeHandshake(frames[len(frames)-1])
	if err != nil {
		return fail(err)
	}
	md.Rank = rank
	return md, nil
}

// DecodeHandshake reads a side channel's answer as every vLLM release
// kvscope has read sends it: msgpack maps keyed by field name (msgspec's
// encoding of vLLM's dataclasses). From NIXL_CONNECTOR_VERSION 1 on the
// answer is NixlHandshakePayload {compatibility_hash,
// agent_metadata_bytes} around the metadata; before it, the metadata
// itself. Members vLLM's versions add or drop are optional, and the
// members sent name the version (RankMetadata.Version).
func DecodeHandshake(b []byte) (*RankMetadata, error) {
	if err := checkMsgpack(b); err != nil {
		return nil, fmt.Errorf("the answer is not a msgpack map: %w", err)
	}
	var payload map[string]any
	if err := msgpack.Unmarshal(b, &payload); err != nil {
		return nil, fmt.Errorf("the answer is not a msgpack map: %w", err)
	}
	md := &RankMetadata{}
	meta := payload
	wrapped := false
	if raw, ok := payload["agent_metadata_bytes"]; ok {
		inner, ok := raw.([]byte)
		if !ok {
			return nil, fmt.Errorf("agent_metadata_bytes is a %T, not bytes", raw)
		}
		if err := checkMsgpack(inner); err != nil {
			return nil, fmt.Errorf("agent_metadata_bytes is not a msgpack map: %w", err)
		}
		meta = nil
		if err := msgpack.Unmarshal(inner, &meta); err != nil {
			return nil, fmt.Errorf("agent_metadata_bytes is not a msgpack map: %w", err)
		}
		wrapped = true
		md.CompatHash, _ = payload["compatibility_hash"].(string)
	} else if _, ok := payload["engine_id"]; !ok {
		return nil, errors.New("the answer has neither agent_metadata_bytes (NIXL_CONNECTOR_VERSION 1 and later) nor engine_id (before it)")
	}
	members := make([]string, 0, len(meta))
	for k := range meta {
		members = append(members, k)
	}
	md.Version, md.VersionFrom = vllm.VersionOfMembers(members, wrapped)
	md.Releases = vllm.ReleasesSpeaking(md.Version)
	md.Unknown = vllm.UnknownMembers(members)
	md.EngineID, _ = meta["engine_id"].(string)
	md.Layout, _ = meta["kv_cache_layout"].(string)
	md.Backend, _ = meta["attn_backend_name"].(string)
	blob, ok := meta["agent_metadata"].([]byte)
	if !ok {
		return nil, errors.New("the metadata has no agent_metadata blob")
	}
	var err error
	if md.Agent, err = AgentName(blob); err != nil {
		return nil, err
	}
	if bs, ok := asInt(meta["block_size"]); ok {
		if bs < 0 || bs > 1<<30 {
			return nil, fmt.Errorf("block_size %d is out of range", bs)
		}
		md.BlockSize = int(bs)
	}
	if nb, ok := asInt(meta["num_blocks"]); ok {
		if nb < 0 {
			return nil, fmt.Errorf("num_blocks %d is negative", nb)
		}
		md.NumBlocks = nb
	}
	if l, ok := meta["block_len"]; ok { // 0.10.x: one length for every region
		n, ok := asInt(l)
		if !ok || n < 0 {
			return nil, fmt.Errorf("block_len = %v is not a byte count", l)
		}
		if addrs, ok := meta["kv_caches_base_addr"].([]any); ok && len(addrs) <= 1<<20 {
			for range addrs {
				md.BlockLens = append(md.BlockLens, n)
			}
		}
	}
	if lens, ok := meta["block_lens"].([]any); ok {
		for i, l := range lens {
			n, ok := asInt(l)
			if !ok || n < 0 {
				return nil, fmt.Errorf("block_lens[%d] = %v is not a byte count", i, l)
			}
			md.BlockLens = append(md.BlockLens, n)
		}
	}
	if addrs, ok := meta["kv_caches_base_addr"].([]any); ok {
		md.Regions = len(addrs)
	}
	if raw, ok := meta["ssm_sizes"]; ok {
		sizes, _ := raw.([]any)
		if len(sizes) != 2 {
			return nil, fmt.Errorf("ssm_sizes = %v is not (conv bytes, SSM bytes)", raw)
		}
		for i, v := range sizes {
			n, ok := asInt(v)
			if !ok || n < 0 {
				return nil, fmt.Errorf("ssm_sizes[%d] = %v is not a byte count", i, v)
			}
			md.SSMSizes = append(md.SSMSizes, n)
		}
	}
	if ids, ok := meta["region_group_ids"].([]any); ok {
		for i, g := range ids {
			n, ok := asInt(g)
			if !ok || n < 0 || n > 1<<20 {
				return nil, fmt.Errorf("region_group_ids[%d] = %v is not a group", i, g)
			}
			md.GroupIDs = append(md.GroupIDs, int(n))
		}
	}
	if regions, ok := meta["region_members"].([]any); ok {
		if len(regions) != md.Regions {
			return nil, fmt.Errorf("region_members lists %d regions, kv_caches_base_addr %d", len(regions), md.Regions)
		}
		md.Members = make([][]string, len(regions))
		for i, r := range regions {
			list, _ := r.([]any)
			for _, m := range list {
				switch x := m.(type) {
				case string:
					md.Members[i] = append(md.Members[i], x)
				case map[string]any:
					if name, ok := x["layer"].(string); ok {
						md.Members[i] = append(md.Members[i], name)
					}
				}
			}
		}
	}
	return md, nil
}

// asInt reads a msgpack integer of any width.
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x > 1<<62 {
			return 0, false
		}
		return int64(x), true
	}
	return 0, false
}
