package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvscope/kvscope/agent/watch/watchtest"
)

// qwenMeta is one rank's NixlAgentMetadata of a Qwen3-0.6B engine (28
// layers, 8 KV heads of 128, bfloat16) at TP tp with blocks of 16 tokens
// and 1 GiB of KV cache memory, as vLLM release sends it. The values are
// derived by hand from vLLM's register_kv_caches (nixl-connector.md §1.3):
// FlashAttention registers a K and a V region per layer (56), a block of
// a region is 16 tokens x 8/tp heads x 128 x 2 bytes, num_blocks is 1 GiB
// over 28 layers' K+V pages (585 at TP 1, 1,170 at TP 2). The members
// are each release's (nixl/metadata.py's history): 0.31.0 sends version
// 12's region_members, 0.20.0 version 3's
// physical_blocks_per_logical_kv_block without ssm_sizes, 0.10.0 the bare
// metadata with one block_len.
func qwenMeta(engine string, rank, tp int, release string) map[string]any {
	blockLen := 16 * (8 / tp) * 128 * 2
	addrs, lens, members := make([]uint64, 56), make([]int, 56), make([]any, 56)
	for i := range addrs {
		addrs[i] = 0x7f0000000000 + uint64(rank)<<36 + uint64(i)<<28
		lens[i] = blockLen
		members[i] = []any{fmt.Sprintf("model.layers.%d.self_attn.attn", i/2)}
	}
	meta := watchtest.Metadata(fmt.Sprintf("%s-r%d", engine, rank), rank, map[string]any{
		"engine_id": engine, "kv_caches_base_addr": addrs, "block_lens": lens, "num_blocks": (1 << 30) / (28 * 2 * blockLen)})
	switch release {
	case "0.31.0":
		meta["dcp_size"], meta["pcp_size"], meta["block_strides"] = 1, 1, lens
		meta["region_members"] = members
	case "0.20.0":
		delete(meta, "ssm_sizes")
	case "0.10.0":
		delete(meta, "ssm_sizes")
		delete(meta, "physical_blocks_per_logical_kv_block")
		delete(meta, "block_lens")
		meta["block_len"] = blockLen
	}
	return meta
}

// engineChannel is a side channel on loopback answering as a Qwen3-0.6B
// engine of release at TP tp (change edits each rank's metadata; garbage
// answers bytes that are no handshake; silent never answers). It fails
// the test on any request vLLM's listener could not handle, or a rank
// the engine does not have.
func engineChannel(t *testing.T, engine string, tp int, release, hash string, change func(map[string]any), garbage, silent bool) *watchtest.SideChannel {
	t.Helper()
	answer := func(rank int) []byte {
		if rank >= tp {
			t.Errorf("%s asked for rank %d at TP %d (vLLM's listener would stop)", engine, rank, tp)
			return nil
		}
		if garbage {
			return []byte("HTTP/1.1 400 Bad Request\r\n")
		}
		meta := qwenMeta(engine, rank, tp, release)
		if change != nil {
			change(meta)
		}
		var b []byte
		var err error
		if release == "0.10.0" {
			b, err = msgpack.Marshal(meta)
		} else {
			b, err = watchtest.AnswerHash(hash, meta)
		}
		if err != nil {
			t.Error(err)
		}
		return b
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
	return sc
}

// metricsServer serves vllm:cache_config_info with the given labels.
func metricsServer(t *testing.T, labels string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{%s,engine=\"0\",model_name=\"Qwen/Qwen3-0.6B\"} 1\n", labels)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// qwenPD is kvscope pd for Qwen3-0.6B at P TP 1, D TP 2 with 1 GiB of KV
// cache memory, planned as release.
func qwenPD(release string, extra ...string) []string {
	return append([]string{"pd", "--model", "Qwen/Qwen3-0.6B", "--vllm-version", release, "--p-tensor-parallel-size", "1", "--d-tensor-parallel-size", "2",
		"--kv-cache-memory-bytes", "1073741824", "--max-model-len", "4096", "--prompt-tokens", "1000", "--side-channel-timeout", "2s"}, extra...)
}

// TestPDFromSideChannels: kvscope pd --p-side-channel --d-side-channel
// asks each engine (the Go ZMQ fixture on loopback, answering as vLLM
// does) for every rank of its TP, one well-formed request each, and
// judges what the engines of two releases advertise, alone and against
// kvscope's plans; engines of different releases or models are refused
// naming the side and what differs.
func TestPDFromSideChannels(t *testing.T) {
	type engine struct {
		release, hash string
		change        func(map[string]any)
	}
	tests := []struct {
		name    string
		plan    string // the --vllm-version kvscope plans with
		p, d    engine
		metrics [2]string // vllm:cache_config_info labels of P and D ("" none)
		verdict string
		want    []string
	}{
		{"two engines of 0.31.0 as planned", "0.31.0", engine{"0.31.0", "h31", nil}, engine{"0.31.0", "h31", nil}, [2]string{}, "ok",
			[]string{"advertise what kvscope plans for them", "rank 0 answered, engine_id prefill", "2 ranks answered, engine_id decode",
				"12 or later (as vLLM 0.31.0", "both engines advertise what kvscope plans", "kvscope's plan: ok", "P0 -> D0", "P0 -> D1"}},
		{"two engines of 0.20.0 as planned", "0.20.0", engine{"0.20.0", "h20", nil}, engine{"0.20.0", "h20", nil}, [2]string{}, "ok",
			[]string{"3 or later (as vLLM", "kvscope's preflight holds"}},
		{"cache_config_info beside the side channels", "0.31.0", engine{"0.31.0", "h31", nil}, engine{"0.31.0", "h31", nil},
			[2]string{`block_size="16",num_gpu_blocks="585",cache_dtype="auto"`, `block_size="16",num_gpu_blocks="1000",cache_dtype="auto"`}, "ok",
			[]string{"vllm:cache_config_info from http://", "D num_gpu_blocks", "observed 1000", "plan 1170", "free: capacity"}},
		{"a 0.20.0 P and a 0.31.0 D", "0.31.0", engine{"0.20.0", "h20", nil}, engine{"0.31.0", "h31", nil}, [2]string{}, "rejected",
			[]string{"(rule compatibility-hash, P/D)", "handshake versions their members imply (v3 and v12)", "P nixl_connector_version", "observed v3 or later (from physical_blocks_per_logical_kv_block)"}},
		{"a bare 0.10.0 P and a 0.31.0 D", "0.31.0", engine{"0.10.0", "", nil}, engine{"0.31.0", "h31", nil}, [2]string{}, "rejected",
			[]string{"(rule handshake-payload, P/D)", "P sends the bare metadata"}},
		{"a D of another model", "0.31.0", engine{"0.31.0", "h31", nil}, engine{"0.31.0", "h-other", func(m map[string]any) {
			m["kv_caches_base_addr"], m["block_lens"] = make([]uint64, 72), make([]int, 72) // Qwen3-8B: 36 layers
			for i := range 72 {
				m["block_lens"].([]int)[i] = 16384
			}
			delete(m, "region_members")
		}}, [2]string{}, "rejected", []string{"(rule compatibility-hash, P/D)", "D regions", "observed 72", "plan 56"}},
		{"D's blocks twice P's", "0.31.0", engine{"0.31.0", "h31", nil}, engine{"0.31.0", "h31", func(m map[string]any) { m["block_size"] = 32 }}, [2]string{}, "unverified",
			[]string{"differ from kvscope's plans in D block_size", "D block_size", "observed 32", "plan 16"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := engineChannel(t, "prefill", 1, tt.p.release, tt.p.hash, tt.p.change, false, false)
			d := engineChannel(t, "decode", 2, tt.d.release, tt.d.hash, tt.d.change, false, false)
			args := qwenPD(tt.plan, "--p-side-channel", p.Addr, "--d-side-channel", d.Addr)
			if tt.metrics[0] != "" {
				args = append(args, "--p-metrics", metricsServer(t, tt.metrics[0]), "--d-metrics", metricsServer(t, tt.metrics[1]))
			}
			code, out, errs := runCLI(t, args...)
			if code != 0 || !strings.HasPrefix(out, "observed verdict: "+tt.verdict+"\n") {
				t.Fatalf("exit %d %s: want the observed verdict %s first\n%s", code, errs, tt.verdict, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q\n%s", w, out)
				}
			}
			if len(p.Requests) != 1 || len(d.Requests) != 2 {
				t.Errorf("P was asked %d times, D %d: want once per rank", len(p.Requests), len(d.Requests))
			}
		})
	}
}

// TestPDFromSideChannelsJSON: --json carries the observed preflight, each
// engine's ranks as read and kvscope's pd beside them.
func TestPDFromSideChannelsJSON(t *testing.T) {
	p := engineChannel(t, "prefill", 1, "0.31.0", "h", nil, false, false)
	d := engineChannel(t, "decode", 2, "0.31.0", "h", func(m map[string]any) { m["num_blocks"] = 1000 }, false, false)
	code, out, errs := runCLI(t, qwenPD("0.31.0", "--p-side-channel", p.Addr, "--d-side-channel", d.Addr, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		Observed struct {
			Verdict     string `json:"verdict"`
			AsPlanned   bool   `json:"as_planned"`
			Differences []struct {
				Side, Field, Observed, Expected, Source, Rule string
			} `json:"differences"`
			P struct {
				Observed  bool `json:"observed"`
				Handshake int  `json:"nixl_connector_version"`
			} `json:"p"`
		} `json:"observed"`
		PEngine struct {
			Ranks []struct {
				BlockLens []int64 `json:"block_lens"`
			} `json:"ranks"`
		} `json:"p_engine"`
		DEngine struct {
			Ranks []json.RawMessage `json:"ranks"`
		} `json:"d_engine"`
		PD struct {
			Preflight struct{ Verdict string } `json:"preflight"`
		} `json:"pd"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	o := got.Observed
	if o.Verdict != "ok" || !o.AsPlanned || !o.P.Observed || o.P.Handshake != 12 || got.PD.Preflight.Verdict != "ok" {
		t.Errorf("observed %+v, pd verdict %q", o, got.PD.Preflight.Verdict)
	}
	if len(o.Differences) != 1 || o.Differences[0].Field != "num_blocks" || o.Differences[0].Observed != "1000" || o.Differences[0].Expected != "1170" ||
		o.Differences[0].Rule != "free" || o.Differences[0].Source != "side channel "+d.Addr+" ranks 0, 1" {
		t.Errorf("differences %+v", o.Differences)
	}
	if len(got.PEngine.Ranks) != 1 || len(got.PEngine.Ranks[0].BlockLens) != 56 || got.PEngine.Ranks[0].BlockLens[0] != 32768 || len(got.DEngine.Ranks) != 2 {
		t.Errorf("engines as read: %+v, %d D ranks", got.PEngine, len(got.DEngine.Ranks))
	}
}

// TestPDFromSideChannelsRefused: an engine that never answers, one that
// answers garbage, two flags at one engine, a missing side and a log of
// another engine than its side channel are errors naming the flag, the
// side, the address and the rank; nothing waits past its timeout.
func TestPDFromSideChannelsRefused(t *testing.T) {
	logs := func(name string) string { return filepath.Join("..", "testdata", "vllm-logs", name) }
	v024 := logs("club3090-612-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log")
	good := func(engine string, tp int) *watchtest.SideChannel {
		return engineChannel(t, engine, tp, "0.31.0", "h", nil, false, false)
	}
	tests := []struct {
		name string
		args func() []string
		want []string
	}{
		{"D never answers", func() []string {
			return qwenPD("0.31.0", "--p-side-channel", good("prefill", 1).Addr, "--d-side-channel", engineChannel(t, "decode", 2, "0.31.0", "h", nil, false, true).Addr, "--side-channel-timeout", "300ms")
		}, []string{"--d-side-channel 127.0.0.1:", "(D) rank 0 of TP 2: no answer within 300ms", "(ranks 1 to 1 not asked)"}},
		{"P answers garbage", func() []string {
			return qwenPD("0.31.0", "--p-side-channel", engineChannel(t, "prefill", 1, "0.31.0", "h", nil, true, false).Addr, "--d-side-channel", good("decode", 2).Addr)
		}, []string{"--p-side-channel 127.0.0.1:", "(P) rank 0 of TP 1: the answer is not a msgpack map"}},
		{"both flags at one engine", func() []string {
			sc := good("decode", 2)
			return qwenPD("0.31.0", "--p-side-channel", sc.Addr, "--d-side-channel", sc.Addr, "--p-tensor-parallel-size", "2")
		}, []string{"answer as one engine (engine_id decode)"}},
		{"only P's side channel", func() []string { return qwenPD("0.31.0", "--p-side-channel", "127.0.0.1:5600") },
			[]string{`--d-side-channel ""`, "give both engines' side channels"}},
		{"an address without a port", func() []string {
			return qwenPD("0.31.0", "--p-side-channel", "localhost", "--d-side-channel", "127.0.0.1:5600")
		}, []string{`--p-side-channel "localhost": want HOST:PORT`}},
		{"logs of other engines than the side channels", func() []string {
			return []string{"pd", "--p-log", v024, "--d-log", v024, "--prompt-tokens", "1000", "--side-channel-timeout", "2s",
				"--p-side-channel", engineChannel(t, "prefill", 1, "0.10.0", "", nil, false, false).Addr,
				"--d-side-channel", engineChannel(t, "decode", 1, "0.10.0", "", nil, false, false).Addr}
		}, []string{"--p-log " + v024 + " and --p-side-channel 127.0.0.1:", "are not one engine: the log's vLLM 0.24.0 sends handshake v", "rank 0 answers with v0's (from no versioned member)", "--d-log"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			code, out, errs := runCLI(t, tt.args()...)
			if code == 0 {
				t.Fatalf("exit 0, want an error\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("error lacks %q: %s", w, errs)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}
