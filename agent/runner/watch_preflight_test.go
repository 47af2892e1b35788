package runner

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch/watchtest"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// qwenChannel is a side channel on loopback answering as a Qwen3-0.6B
// engine at TP tp with the given compatibility hash: 28 layers of 8 KV
// heads of 128 in bf16, so under FlashAttention's split layout 56 regions
// whose blocks of 16 tokens are 16 × 8/tp × 128 × 2 bytes, 2,048 blocks
// per rank, and version 4's members (watchtest.Metadata's: ssm_sizes,
// physical_blocks_per_logical_kv_block), as vLLM 0.22 to 0.25 send them.
func qwenChannel(t *testing.T, engine string, tp int, hash string) *watchtest.SideChannel {
	t.Helper()
	lens, addrs := make([]int, 56), make([]uint64, 56)
	for i := range lens {
		lens[i] = 16 * (8 / tp) * 128 * 2
	}
	sc, err := watchtest.NewSideChannel(func(rank int) []byte {
		if rank >= tp {
			t.Errorf("%s asked for rank %d at TP %d", engine, rank, tp)
			return nil
		}
		b, err := watchtest.AnswerHash(hash, watchtest.Metadata(fmt.Sprintf("%s-r%d", engine, rank), rank, map[string]any{
			"engine_id": engine, "num_blocks": 2048, "block_lens": lens, "kv_caches_base_addr": addrs}))
		if err != nil {
			t.Error(err)
		}
		return b
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sc.Close)
	return sc
}

// TestWatchPreflight: a watcher of one P and one D side channel judges
// the pair as kvscope pd --p-side-channel --d-side-channel does and sends
// the verdict and its sentence to the Deployment panel (a handshake event
// of the deployment agent): engines that run the scenario's plans get
// the plans' verdict; engines whose hashes differ are refused for it.
func TestWatchPreflight(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	m := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	mem := func(tp int) int64 { return 2048 * 16 * 28 * int64(8/tp) * 128 * 2 * 2 } // 2,048 blocks a rank
	tests := []struct {
		name, dHash, verdict, rejection, sentence string
	}{
		{"engines that run the plans", "9f2e", "ok", "", "advertise what kvscope plans for them, so kvscope's preflight holds"},
		{"engines whose hashes differ", "77aa", "rejected", "compatibility-hash", "P's compatibility hash 9f2e differs from D's 77aa"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, d := qwenChannel(t, "prefill", 1, "9f2e"), qwenChannel(t, "decode", 2, tt.dHash)
			got := &events{got: map[string][]event.Event{}}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				errc <- Watch(ctx, WatchConfig{Name: "gpu7", Dir: t.TempDir(), Interval: 5 * time.Millisecond, Model: m,
					SideChannels: []SideChannel{{Addr: p.Addr, Side: "p"}, {Addr: d.Addr, Side: "d"}},
					P:            plan.Engine{VLLMVersion: "0.24.0", TensorParallelSize: 1, KVCacheMemoryBytes: mem(1), MaxModelLen: 4096},
					D:            plan.Engine{VLLMVersion: "0.24.0", TensorParallelSize: 2, KVCacheMemoryBytes: mem(2), MaxModelLen: 4096},
					sink:         func(agent string) Sink { return agentSink{got, agent} }})
			}()
			var h *event.HandshakeData
			for deadline := time.Now().Add(10 * time.Second); h == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				got.mu.Lock()
				for _, e := range got.got["gpu7/deployment"] {
					if e.Kind == event.Handshake && e.Handshake.Verdict != "" {
						h = e.Handshake
					}
				}
				got.mu.Unlock()
			}
			cancel()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if h == nil {
				t.Fatalf("no preflight from the deployment agent: %+v", got.got["gpu7/deployment"])
			}
			if h.Verdict != tt.verdict || h.Rejection != tt.rejection || !strings.Contains(h.Sentence, tt.sentence) || h.PTP != 1 || h.DTP != 2 ||
				!strings.Contains(h.Summary, "preflight from the side channels P "+p.Addr+", D "+d.Addr) {
				t.Errorf("preflight %+v\nwant %s, %q, with %q", h, tt.verdict, tt.rejection, tt.sentence)
			}
		})
	}
}
