package watchtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// NIXLBlob is the start of a getLocalMD blob as NIXL's serdes writes it
// (src/utils/serdes/serdes.cpp: "nixlSerDes|", then per field its tag, a
// size_t length, the bytes and "|").
func NIXLBlob(agent string) []byte {
	b := []byte("nixlSerDes|Agent")
	b = binary.NativeEndian.AppendUint64(b, uint64(len(agent)))
	b = append(b, agent...)
	return append(b, "|Conns|..."...)
}

// Metadata is one rank's NixlAgentMetadata as vLLM fills it
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py): a
// FlashAttention engine's two regions of 8,192 blocks of 32 KiB unless
// extra replaces fields.
func Metadata(agent string, rank int, extra map[string]any) map[string]any {
	meta := map[string]any{
		"engine_id":                            "d7c3-engine",
		"agent_metadata":                       NIXLBlob(agent),
		"kv_caches_base_addr":                  []uint64{0x7f0000000000 + uint64(rank)<<32, 0x7f0080000000 + uint64(rank)<<32},
		"device_id":                            rank,
		"num_blocks":                           8192,
		"block_lens":                           []int{32768, 32768},
		"kv_cache_layout":                      "HND",
		"block_size":                           16,
		"ssm_sizes":                            []int{0, 0},
		"attn_backend_name":                    "FLASH_ATTN",
		"physical_blocks_per_logical_kv_block": 1,
	}
	for k, v := range extra {
		meta[k] = v
	}
	return meta
}

// Answer is what a vLLM engine's side channel sends for one rank: msgpack
// of NixlHandshakePayload{compatibility_hash, agent_metadata_bytes}, whose
// bytes are msgpack of the metadata (maps keyed by field name, as msgspec
// encodes vLLM's dataclasses).
func Answer(meta map[string]any) ([]byte, error) { return AnswerHash("9f2e", meta) }

// AnswerHash is Answer with the given compatibility hash.
func AnswerHash(hash string, meta map[string]any) ([]byte, error) {
	inner, err := msgpack.Marshal(meta)
	if err != nil {
		return nil, err
	}
	return msgpack.Marshal(map[string]any{"compatibility_hash": hash, "agent_metadata_bytes": inner})
}

// SideChannel is a ZMQ ROUTER that reads requests as a vLLM engine's
// handshake listener does (nixl/scheduler.py) and answers each with
// answer(rank); a nil answer (or a nil func) never answers. Requests is
// every request it read, decoded; Err is the first request vLLM could not
// have handled (garbage, or a rank answer refused).
type SideChannel struct {
	Addr     string
	Requests chan []any
	Err      chan error
	stop     func()
}

// NewSideChannel listens on a loopback port.
func NewSideChannel(answer func(rank int) []byte) (*SideChannel, error) {
	ctx, cancel := context.WithCancel(context.Background())
	sock := zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("vllm-sc")))
	if err := sock.Listen("tcp://127.0.0.1:0"); err != nil {
		cancel()
		return nil, err
	}
	s := &SideChannel{Addr: sock.Addr().(*net.TCPAddr).String(), Requests: make(chan []any, 256), Err: make(chan error, 1),
		stop: func() { cancel(); sock.Close() }}
	go func() {
		for {
			m, err := sock.Recv()
			if err != nil {
				return
			}
			var req []any
			err = msgpack.Unmarshal(m.Frames[len(m.Frames)-1], &req)
			rank := -1
			if err == nil && len(req) == 2 {
				if tag, ok := req[0].([]byte); ok && string(tag) == "get_meta_msg" {
					rank = toInt(req[1])
				}
			}
			if rank < 0 {
				select {
				case s.Err <- fmt.Errorf("a request vLLM's listener cannot handle (it would stop): %x", m.Frames[len(m.Frames)-1]):
				default:
				}
				return
			}
			select {
			case s.Requests <- req:
			default:
			}
			if answer == nil {
				continue
			}
			out := answer(rank)
			if out == nil {
				continue
			}
			if err := sock.Send(zmq4.NewMsgFrom(m.Frames[0], nil, out)); err != nil {
				return
			}
		}
	}()
	return s, nil
}

// Close stops the listener.
func (s *SideChannel) Close() { s.stop() }

func toInt(v any) int {
	switch x := v.(type) {
	case int8:
		return int(x)
	case int16:
		return int(x)
	case int32:
		return int(x)
	case int64:
		return int(x)
	case uint8:
		return int(x)
	case uint16:
		return int(x)
	case uint32:
		return int(x)
	case uint64:
		return int(x)
	}
	return -1
}
