package runner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
)

// events collects what the watcher publishes, per agent.
type events struct {
	mu  sync.Mutex
	got map[string][]event.Event
}

type agentSink struct {
	e     *events
	agent string
}

func (s agentSink) Publish(ev event.Event) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	ev.Agent = s.agent
	s.e.got[s.agent] = append(s.e.got[s.agent], ev)
}

func (s agentSink) Dropped() uint64 { return 0 }

// TestWatchTurnsRingsIntoEvents: two engines' rings (two NIXL agents)
// become two agents of the live view: a hello each, the registration, a
// transfer_done per NIXL request with NIXL's own times (measured by NIXL,
// not verified by kvscope), errors with NIXL's status names, and samples.
func TestWatchTurnsRingsIntoEvents(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	dir := t.TempDir()
	d, err := watchtest.NewWriter(dir, "0b6f-decode-rank0", 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	p, err := watchtest.NewWriter(dir, "9c1e-prefill-rank0", 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	d.Push(append([]watch.Raw{{Type: "agent_memory_registered", Value: 1 << 30}}, append(watchtest.Transfer("rx", 2<<20, 15, 400),
		watchtest.Transfer("rx", 4<<20, 20, 800)...)...)...)
	p.Push(watch.Raw{Type: "agent_memory_registered", Value: 2 << 30}, watch.Raw{Type: "agent_err_backend", Value: 1})
	got := &events{got: map[string][]event.Event{}}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Name: "gpu7", Dir: dir, Interval: 5 * time.Millisecond,
			sink: func(agent string) Sink { return agentSink{got, agent} }})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got.mu.Lock()
		n := len(got.got["gpu7/0b6f-decode-rank0"])
		samples := 0
		for _, e := range got.got["gpu7/0b6f-decode-rank0"] {
			if e.Kind == event.Sample {
				samples++
			}
		}
		got.mu.Unlock()
		if n >= 4 && samples > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	dec := got.got["gpu7/0b6f-decode-rank0"]
	if len(dec) < 4 || dec[0].Kind != event.Hello || dec[0].Hello.Role != "watch" || dec[1].Kind != event.Registration || dec[1].Registration.Bytes != 1<<30 {
		t.Fatalf("the decode agent's events: %+v", dec)
	}
	var done []*event.DoneData
	for _, e := range dec {
		if e.Kind == event.TransferDone {
			done = append(done, e.Done)
		}
		if e.Kind == event.Sample && e.Sample.Requests != 2 {
			t.Errorf("a sample says %d requests, want 2", e.Sample.Requests)
		}
	}
	if len(done) != 2 || done[0].Bytes != 2<<20 || done[0].TransferUS != 400 || done[0].PostUS != 15 || done[0].Timing != event.Measured ||
		done[0].Source != "nixl" || done[0].Verified != "unverified" || done[1].Bytes != 4<<20 {
		t.Errorf("transfers: %+v", done)
	}
	pre := got.got["gpu7/9c1e-prefill-rank0"]
	var status string
	for _, e := range pre {
		if e.Kind == event.Error {
			status = e.Error.Status
		}
	}
	if status != "ERR_BACKEND" {
		t.Errorf("the prefill agent's error: %q, want ERR_BACKEND", status)
	}
}

// TestWatchScrapesVLLM: an engine's /metrics (vLLM's names) gives a hello
// naming the observed plan, then samples from what its histograms gained
// between scrapes, and an error when its failure counter grows.
func TestWatchScrapesVLLM(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		// Each scrape: 10 more transfers of 1 MB in (0.01, 0.025] s, and a
		// failed transfer from the third scrape on.
		failed := 0
		if k >= 3 {
			failed = 1
		}
		fmt.Fprintf(w, `# TYPE vllm:nixl_xfer_time_seconds histogram
vllm:nixl_xfer_time_seconds_bucket{engine="0",le="0.01",model_name="m"} 0
vllm:nixl_xfer_time_seconds_bucket{engine="0",le="0.025",model_name="m"} %d
vllm:nixl_xfer_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} %d
vllm:nixl_xfer_time_seconds_count{engine="0",model_name="m"} %d
vllm:nixl_xfer_time_seconds_sum{engine="0",model_name="m"} %g
# TYPE vllm:nixl_bytes_transferred histogram
vllm:nixl_bytes_transferred_bucket{engine="0",le="+Inf",model_name="m"} %d
vllm:nixl_bytes_transferred_count{engine="0",model_name="m"} %d
vllm:nixl_bytes_transferred_sum{engine="0",model_name="m"} %d
# TYPE vllm:nixl_num_failed_transfers_total counter
vllm:nixl_num_failed_transfers_total{engine="0",model_name="m"} %d
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="544",engine="0",model_name="m",num_gpu_blocks="2048"} 1
`, 10*k, 10*k, 10*k, 0.02*float64(10*k), 10*k, 10*k, 10*k*1_000_000, failed)
	}))
	defer srv.Close()
	got := &events{got: map[string][]event.Event{}}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Name: "gpu7", VLLMMetrics: []string{srv.URL + "/metrics"}, ScrapeEvery: 50 * time.Millisecond,
			Sides: map[string]string{srv.URL + "/metrics": "d"}, Model: modeltest.Load(t, "Qwen__Qwen3-0.6B"),
			D:    plan.Engine{KVCacheMemoryBytes: 2048 * 16 * 28 * 8 * 128 * 2 * 2, MaxModelLen: 4096},
			sink: func(agent string) Sink { return agentSink{got, agent} }})
	}()
	name := "gpu7/vllm-" + strings.ReplaceAll(strings.TrimPrefix(srv.URL, "http://"), ":", "-") + "-e0"
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got.mu.Lock()
		k := len(got.got[name])
		got.mu.Unlock()
		if k >= 5 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-errc
	got.mu.Lock()
	defer got.mu.Unlock()
	evs := got.got[name]
	if len(evs) < 4 || evs[0].Kind != event.Hello || !strings.Contains(evs[0].Hello.Scenario, "block_size=544, num_gpu_blocks=2048") {
		t.Fatalf("events of %s: %+v", name, evs)
	}
	var errs int
	var mismatched []string
	for _, e := range evs[1:] {
		switch e.Kind {
		case event.PlanMismatch:
			mismatched = append(mismatched, e.Mismatch.Field+"="+e.Mismatch.Observed+"/"+e.Mismatch.Predicted)
		case event.Sample:
			// 10 transfers in (0.01, 0.025]: p50 is rank 5 of 10, 0.0175 s.
			if e.Sample.P50US < 17499 || e.Sample.P50US > 17501 || e.Sample.GBps <= 0 {
				t.Errorf("sample %+v: want p50 17,500 µs and a rate", *e.Sample)
			}
		case event.Error:
			errs++
			if e.Error.Status != "ERR_BACKEND" || !strings.Contains(e.Error.Message, "vllm:nixl_num_failed_transfers") {
				t.Errorf("error %+v", *e.Error)
			}
		}
	}
	if errs != 1 {
		t.Errorf("%d errors, want 1 (the failed transfer)", errs)
	}
	// Qwen3-0.6B at D: block 16 and, in memory for exactly 2,048 blocks of
	// 28 layers × 8 KV heads × 128 × K and V × 2 bytes × 16 tokens, 2,048
	// blocks: the engine's 2,048 blocks match, its block size 544 does not.
	if fmt.Sprint(mismatched) != "[block_size=544/16]" {
		t.Errorf("plan mismatches %v, want [block_size=544/16]", mismatched)
	}
}

// TestWatchSideChannel: a D engine at TP 2 answers on its side channel as
// vLLM does. Each rank's NIXL agent is linked to the engine (its hello
// names the rank), each rank's metadata is held against kvscope's
// registration (rank 1 reports 8 blocks fewer: one plan_mismatch, on that
// rank's agent only), and a request in rank 1's ring is drawn as a band
// from P rank 0 to D rank 1 of the deployment.
func TestWatchSideChannel(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("rings are read on Linux")
	}
	// Qwen3-0.6B: 28 layers, 8 KV heads of 128, bf16. At D TP 2 a rank holds
	// 4 heads: one block of 16 tokens is 16 × 4 × 128 × 2 B = 16,384 B of K
	// and as much of V, each its own region under FlashAttention's split
	// layout, so 56 regions of 16,384-byte blocks; the memory below holds
	// exactly 2,048 blocks per rank.
	lens := make([]int, 56)
	for i := range lens {
		lens[i] = 16384
	}
	addrs := make([]uint64, 56)
	answer := func(rank int) []byte {
		blocks := 2048
		if rank == 1 {
			blocks = 2040
		}
		b, err := watchtest.Answer(watchtest.Metadata(fmt.Sprintf("ring-d%d", rank), rank, map[string]any{
			"num_blocks": blocks, "block_lens": lens, "kv_caches_base_addr": addrs}))
		if err != nil {
			t.Error(err)
		}
		return b
	}
	sc, err := watchtest.NewSideChannel(answer)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	dir := t.TempDir()
	ring, err := watchtest.NewWriter(dir, "ring-d1", 4, 64)
	if err != nil {
		t.Fatal(err)
	}
	got := &events{got: map[string][]event.Event{}}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- Watch(ctx, WatchConfig{Name: "gpu7", Dir: dir, Interval: 5 * time.Millisecond,
			SideChannels: []SideChannel{{Addr: sc.Addr, Side: "d"}}, Model: modeltest.Load(t, "Qwen__Qwen3-0.6B"),
			// The fake side channel sends version 4's members (ssm_sizes,
			// physical_blocks_per_logical_kv_block): 0.22 to 0.25's.
			P:    plan.Engine{VLLMVersion: "0.24.0", TensorParallelSize: 1, KVCacheMemoryBytes: 2048 * 16 * 28 * 8 * 128 * 2 * 2, MaxModelLen: 4096},
			D:    plan.Engine{VLLMVersion: "0.24.0", TensorParallelSize: 2, KVCacheMemoryBytes: 2048 * 16 * 28 * 4 * 128 * 2 * 2, MaxModelLen: 4096},
			sink: func(agent string) Sink { return agentSink{got, agent} }})
	}()
	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			got.mu.Lock()
			done := ok()
			got.mu.Unlock()
			if done {
				return
			}
		}
		t.Fatalf("no %s: %+v", what, got.got)
	}
	linked := func(agent string) bool {
		for _, e := range got.got[agent] {
			if e.Kind == event.Hello && strings.HasPrefix(e.Hello.Engine, "D rank "+agent[len(agent)-1:]+" of TP 2 · side channel "+sc.Addr+" · handshake v4 or later (as vLLM 0.22.0 to 0.25.1 send it)") {
				return true
			}
		}
		return false
	}
	wait("linked hellos", func() bool { return linked("gpu7/ring-d0") && linked("gpu7/ring-d1") })
	ring.Push(watchtest.Transfer("rx", 2<<20, 15, 400)...)
	wait("band", func() bool { return len(got.got["gpu7/deployment"]) >= 3 })
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	var mismatches []string
	for agent, evs := range got.got {
		for _, e := range evs {
			if e.Kind == event.PlanMismatch {
				m := e.Mismatch
				mismatches = append(mismatches, fmt.Sprintf("%s %s %s=%s/%s by %s", agent, m.Side, m.Field, m.Observed, m.Predicted, m.Source))
			}
		}
	}
	want := fmt.Sprintf("[gpu7/ring-d1 D num_blocks=2040/2048 by side channel %s rank 1]", sc.Addr)
	if fmt.Sprint(mismatches) != want {
		t.Errorf("mismatches %v, want %s", mismatches, want)
	}
	dep := got.got["gpu7/deployment"]
	if dep[0].Kind != event.Hello || dep[1].Kind != event.Handshake || dep[1].Handshake.PTP != 1 || dep[1].Handshake.DTP != 2 {
		t.Fatalf("deployment events %+v", dep)
	}
	b := dep[2].Batch
	if dep[2].Kind != event.DescBatch || b.PRank != 0 || b.DRank != 1 || b.Bytes != 2<<20 || b.EndNS != 400_000 || b.Timing != event.Measured {
		t.Errorf("band %+v", dep[2])
	}
	if h := dep[0].Hello; h.Role != "watch" || h.Engine != "P TP 1 → D TP 2 · every linked rank" {
		t.Errorf("the engine pair's hello %+v", h)
	}
}

// TestWatchSideChannelSilent: an engine that never answers is one error
// naming its address, however many times it is asked, and the watcher
// asks one rank at a time (never a second request while one is open).
func TestWatchSideChannelSilent(t *testing.T) {
	sc, err := watchtest.NewSideChannel(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	got := &events{got: map[string][]event.Event{}}
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	err = Watch(ctx, WatchConfig{Name: "gpu7", VLLMMetrics: nil, Dir: t.TempDir(), Interval: 5 * time.Millisecond,
		SideChannels: []SideChannel{{Addr: sc.Addr, Side: "p", TP: 4}}, SideChannelEvery: 100 * time.Millisecond, SideChannelTimeout: 150 * time.Millisecond,
		sink: func(agent string) Sink { return agentSink{got, agent} }})
	if err != nil {
		t.Fatal(err)
	}
	name := "gpu7/nixl-side-channel-" + strings.ReplaceAll(sc.Addr, ":", "-")
	// A hello first (a restarted watcher's errors are then told from
	// the last run's), then the one error, and rank 0 as a stuck peer
	// once, with when it stopped answering.
	evs := got.got[name]
	if len(evs) != 3 || evs[0].Kind != event.Hello || evs[1].Kind != event.Error || !strings.Contains(evs[1].Error.Message, sc.Addr) || !strings.Contains(evs[1].Error.Message, "no answer within 150ms") {
		t.Fatalf("events of %s: %+v (all: %v)", name, evs, got.got)
	}
	if s := evs[2].Stuck; evs[2].Kind != event.StuckTransfer || s.Source != "side_channel" || s.SinceNS <= 0 || s.Cleared || !strings.Contains(s.Engine, "P rank 0") {
		t.Fatalf("the stuck rank: %+v", evs[2].Stuck)
	}
	// Each round asks rank 0 and gives up (no answer): never rank 1.
	for n := len(sc.Requests); n > 0; n-- {
		if r := <-sc.Requests; fmt.Sprint(r[1]) != "0" {
			t.Errorf("asked for rank %v after rank 0 went unanswered", r[1])
		}
	}
}
