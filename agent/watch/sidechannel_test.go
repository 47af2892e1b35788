package watch_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
)

// handshakeAnswer is a side channel's answer for one rank.
func handshakeAnswer(t testing.TB, agent string, rank int, extra map[string]any) []byte {
	b, err := watchtest.Answer(watchtest.Metadata(agent, rank, extra))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sideChannel answers for ranks below tp (silent: never), as vLLM does.
func sideChannel(t *testing.T, tp int, silent bool) (string, <-chan []any) {
	t.Helper()
	answer := func(rank int) []byte {
		if rank >= tp {
			t.Errorf("asked for rank %d of an engine at TP %d (vLLM's listener would die)", rank, tp)
			return nil
		}
		return handshakeAnswer(t, "agent-r"+strconv.Itoa(rank), rank, nil)
	}
	if silent {
		answer = nil
	}
	sc, err := watchtest.NewSideChannel(answer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sc.Close()
		select {
		case err := <-sc.Err:
			t.Error(err)
		default:
		}
	})
	return sc.Addr, sc.Requests
}

func TestQueryRank(t *testing.T) {
	addr, reqs := sideChannel(t, 2, false)
	for rank := 0; rank < 2; rank++ {
		md, err := watch.QueryRank(context.Background(), addr, rank, 5*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if md.Rank != rank || md.Agent != "agent-r"+strconv.Itoa(rank) || md.EngineID != "d7c3-engine" || md.CompatHash != "9f2e" {
			t.Errorf("rank %d: %+v", rank, md)
		}
		if md.BlockSize != 16 || md.NumBlocks != 8192 || md.Regions != 2 || len(md.BlockLens) != 2 || md.BlockLens[1] != 32768 || md.Layout != "HND" || md.Backend != "FLASH_ATTN" {
			t.Errorf("rank %d: %+v", rank, md)
		}
		req := <-reqs
		if len(req) != 2 {
			t.Fatalf("request %v", req)
		}
	}
}

func TestQueryRankSilent(t *testing.T) {
	addr, reqs := sideChannel(t, 1, true)
	start := time.Now()
	_, err := watch.QueryRank(context.Background(), addr, 0, 300*time.Millisecond, 0)
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("err %v: want a timeout naming %s", err, addr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("gave up after %s", d)
	}
	if req := <-reqs; len(req) != 2 {
		t.Errorf("request %v", req)
	}
}

func TestQueryRankNobodyListens(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = watch.QueryRank(context.Background(), addr, 0, 300*time.Millisecond, 0)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err %v: want an error naming %s", err, addr)
	}
}

func TestDecodeHandshake(t *testing.T) {
	members := []any{[]any{"model.layers.0.self_attn.attn", "model.layers.2.self_attn.attn"}, []any{"model.layers.1.linear_attn"}}
	md, err := watch.DecodeHandshake(handshakeAnswer(t, "nixl-7", 0, map[string]any{"region_members": members, "region_group_ids": []int{0, 1}}))
	if err != nil {
		t.Fatal(err)
	}
	if md.Agent != "nixl-7" || len(md.Members) != 2 || len(md.Members[0]) != 2 || md.Members[1][0] != "model.layers.1.linear_attn" {
		t.Errorf("%+v", md)
	}
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"not msgpack", []byte{0xc1}, "not a msgpack map"},
		{"no metadata", mustPack(t, map[string]any{"compatibility_hash": "x"}), "neither agent_metadata_bytes"},
		{"metadata not bytes", mustPack(t, map[string]any{"agent_metadata_bytes": "text"}), "agent_metadata_bytes is a string"},
		{"inner garbage", mustPack(t, map[string]any{"agent_metadata_bytes": []byte{0x91}}), "agent_metadata_bytes is not a msgpack map"},
		{"no blob", mustPack(t, map[string]any{"agent_metadata_bytes": mustPack(t, map[string]any{"engine_id": "e"})}), "no agent_metadata blob"},
		{"ssm_sizes not a pair", answerOf(t, watchtest.Metadata("a", 0, map[string]any{"ssm_sizes": []int{1}})), "ssm_sizes"},
		{"ssm_sizes negative", answerOf(t, watchtest.Metadata("a", 0, map[string]any{"ssm_sizes": []int{-1, 2}})), "ssm_sizes[0]"},
		{"not NIXL", mustPack(t, map[string]any{"agent_metadata_bytes": mustPack(t, map[string]any{"agent_metadata": []byte("json{}")})}), "not a NIXL blob"},
	} {
		if _, err := watch.DecodeHandshake(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

// TestDecodeEachRelease: the decoder reads the payload of every release:
// the bare NixlAgentMetadata of 0.10.x (one block_len for all regions, no
// hash), the wrapped one of version 3 (0.16 to 0.20, inferred), and
// version 12's region_members (0.31.0); it names the version the members
// imply and the releases that speak it, and lists members it does not
// know. The member sets are vLLM's (nixl/metadata.py's history).
func TestDecodeEachRelease(t *testing.T) {
	v010 := map[string]any{"engine_id": "e", "agent_metadata": watchtest.NIXLBlob("a0"), "kv_caches_base_addr": []uint64{1, 2, 3},
		"num_blocks": 100, "block_len": 4096, "attn_backend_name": "FLASH_ATTN"}
	v3 := watchtest.Metadata("a3", 0, nil)
	delete(v3, "ssm_sizes")
	v12 := watchtest.Metadata("a12", 0, map[string]any{"block_strides": []int{32768, 32768}, "dcp_size": 1, "pcp_size": 1,
		"region_group_ids": []int{0, 1}, "region_num_blocks": []int{8192, 8192}, "region_members": []any{[]any{"l0"}, []any{"l1"}}})
	future := watchtest.Metadata("a13", 0, map[string]any{"model_revision": "abc"})
	// A hybrid's state layer on one rank: conv and SSM bytes as msgspec
	// sends the tuple (an array), the SSM bytes past 2^16.
	mamba := watchtest.Metadata("a4", 0, map[string]any{"ssm_sizes": []any{uint16(24576), uint32(262144)}})
	tests := []struct {
		name    string
		answer  []byte
		version int
		from    string
		release string
		hash    string
		lens    []int64
		unknown []string
		ssm     []int64
	}{
		{"0.10", mustPack(t, v010), 0, "", "0.10.0", "", []int64{4096, 4096, 4096}, nil, nil},
		{"version 3", answerOf(t, v3), 3, "physical_blocks_per_logical_kv_block", "0.20.0", "9f2e", []int64{32768, 32768}, nil, nil},
		{"version 12", answerOf(t, v12), 12, "region_members", "0.31.0", "9f2e", []int64{32768, 32768}, nil, []int64{0, 0}},
		{"a member no release has", answerOf(t, future), 4, "ssm_sizes", "0.22.0", "9f2e", []int64{32768, 32768}, []string{"model_revision"}, []int64{0, 0}},
		{"a state layer's sizes", answerOf(t, mamba), 4, "ssm_sizes", "0.22.0", "9f2e", []int64{32768, 32768}, nil, []int64{24576, 262144}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md, err := watch.DecodeHandshake(tt.answer)
			if err != nil {
				t.Fatal(err)
			}
			if md.Version != tt.version || md.VersionFrom != tt.from || md.CompatHash != tt.hash || !slices.Contains(md.Releases, tt.release) {
				t.Errorf("version %d from %q, hash %q, releases %q; want %d from %q, %q, with %s", md.Version, md.VersionFrom, md.CompatHash, md.Releases, tt.version, tt.from, tt.hash, tt.release)
			}
			if !slices.Equal(md.BlockLens, tt.lens) || !slices.Equal(md.Unknown, tt.unknown) || !slices.Equal(md.SSMSizes, tt.ssm) || (md.SSMSizes == nil) != (tt.ssm == nil) {
				t.Errorf("block lens %v, unknown %q, ssm_sizes %v; want %v, %q, %v", md.BlockLens, md.Unknown, md.SSMSizes, tt.lens, tt.unknown, tt.ssm)
			}
		})
	}
}

func answerOf(t *testing.T, meta map[string]any) []byte {
	t.Helper()
	b, err := watchtest.Answer(meta)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAgentName(t *testing.T) {
	long := watchtest.NIXLBlob("x")
	binary.NativeEndian.PutUint64(long[16:], 1<<40)
	for _, c := range []struct {
		blob []byte
		want string
	}{
		{watchtest.NIXLBlob("4f1c2a"), "4f1c2a"},
		{[]byte("nixlSerDes|Agent"), ""},
		{long, ""},
		{append(watchtest.NIXLBlob("ab")[:16+8+2], 'x'), ""},
	} {
		got, err := watch.AgentName(c.blob)
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("%q: %q, %v", c.blob, got, err)
		}
	}
}

func mustPack(t testing.TB, v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzDecodeHandshake(f *testing.F) {
	f.Add(handshakeAnswer(f, "a", 0, nil))
	f.Add(handshakeAnswer(f, "b", 1, map[string]any{"region_members": []any{[]any{"l0"}}}))
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		md, err := watch.DecodeHandshake(b)
		if err == nil && (md.Agent == "" || md.BlockSize < 0 || md.NumBlocks < 0 || len(md.Members) > md.Regions && md.Regions > 0) {
			t.Fatalf("accepted %+v", md)
		}
	})
}

// TestDecodeHandshakeBoundsWork: a side channel answer that declares more
// than it carries, or nests without end, is refused before it is decoded
// (a msgpack decoder allocates a declared array whole: five bytes could ask
// for four billion elements); well-formed answers with every msgpack type
// in their fields still decode.
func TestDecodeHandshakeBoundsWork(t *testing.T) {
	good := handshakeAnswer(t, "a", 0, map[string]any{
		"extra": []any{int8(-3), int16(-300), int32(-70000), int64(-1 << 40), uint8(200), uint16(60000),
			uint32(1 << 31), uint64(1 << 63), float32(1.5), 2.5, true, nil, "s", strings.Repeat("x", 300),
			[]byte{1, 2}, bytes.Repeat([]byte{7}, 70000), map[string]any{"k": []any{}}},
	})
	if md, err := watch.DecodeHandshake(good); err != nil || md.Agent != "a" {
		t.Fatalf("a well-formed answer: %+v, %v", md, err)
	}
	deep := append(bytes.Repeat([]byte{0x91}, 1<<20), 0xc0)
	wrap := func(inner []byte) []byte {
		return mustPack(t, map[string]any{"compatibility_hash": "h", "agent_metadata_bytes": inner})
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"array32 of 4G elements", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, "declares"},
		{"map32 of 4G pairs", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "declares"},
		{"bin32 of 4 GB", []byte{0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff}, "declares"},
		{"a million nested arrays", deep, "nests deeper"},
		{"truncated", good[:len(good)-1], "not a msgpack map"},
		{"unused type byte", []byte{0xc1}, "not a type"},
		{"inner array32 of 4G", wrap([]byte{0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff}), "agent_metadata_bytes is not a msgpack map"},
		{"inner deep", wrap(deep), "nests deeper"},
	} {
		md, err := watch.DecodeHandshake(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v, %v; want an error with %q", c.name, md, err, c.want)
		}
	}
}
