package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/tune"
	"github.com/kvscope/kvscope/server/internal/memtest"
)

// wideConfig is a pasted config.json of layers decoder layers of 64 KV
// heads of 128 channels: a model as wide as the config parser allows is
// what a hostile /api/tune pastes.
func wideConfig(layers int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"architectures":["LlamaForCausalLM"],"model_type":"llama","num_hidden_layers":%d,"num_attention_heads":64,`+
		`"num_key_value_heads":64,"head_dim":128,"hidden_size":8192,"intermediate_size":8192,"vocab_size":32000,`+
		`"max_position_embeddings":131072,"torch_dtype":"bfloat16"}`, layers))
}

// tuneUse runs one /api/tune request in this process and returns the
// largest growth of the heap (live objects and garbage not yet collected)
// sampled while it runs, and what it took.
func tuneUse(t *testing.T, a *Server, req TuneRequest) (peak int64, took time.Duration, res *tune.Result) {
	t.Helper()
	var out any
	var err error
	peak = memtest.PeakGrowth(200*time.Microsecond, func() {
		start := time.Now()
		out, err = a.tune(context.Background(), &req)
		took = time.Since(start)
	})
	if err != nil {
		t.Fatalf("the search: %v", err)
	}
	return peak, took, out.(*tune.Result)
}

// TestTuneMemoryEstimate: the memory admission reserves for an /api/tune
// search is never below the heap growth sampled while it runs (live
// objects and garbage not yet collected), over a small model and over wide
// models at high TP, whose registrations are what a search holds; for
// those (tight) it is within 8x of it.
func TestTuneMemoryEstimate(t *testing.T) {
	a := New(catalog.Bundled(), Limits{MaxMemory: 64 << 30, MaxPairs: 1 << 40, MaxResponse: 1 << 40, QueueWait: time.Second, MaxQueue: 1, TuneDeadline: 5 * time.Minute})
	tp := func(n int) plan.Engine {
		return plan.Engine{TensorParallelSize: n, MaxModelLen: 8192, KVCacheMemoryBytes: 1 << 40}
	}
	qwen := ModelRequest{Model: "Qwen/Qwen3-0.6B"}
	for _, c := range []struct {
		name  string
		req   TuneRequest
		tight bool
	}{
		{"Qwen3-0.6B, the default ranges", TuneRequest{ModelRequest: qwen}, false},
		{"Qwen3-0.6B, 1,560 candidates", TuneRequest{ModelRequest: qwen, Ranges: tune.Ranges{TPPairs: "1:1,1:2,2:4,4:8", Selectors: "classic,balanced,padding-bytes", KVCacheDTypes: "default,fp8"}}, false},
		{"1,024 layers, TP 8 to 16", TuneRequest{ModelRequest: ModelRequest{Config: wideConfig(1024)}, P: tp(8), D: tp(16), Ranges: tune.Ranges{BlockSizes: "16:256:16"}}, true},
		{"1,024 layers, TP 32 to 64", TuneRequest{ModelRequest: ModelRequest{Config: wideConfig(1024)}, P: tp(32), D: tp(64), Ranges: tune.Ranges{BlockSizes: "16:64:16"}}, true},
		{"1,024 layers, four P engines", TuneRequest{ModelRequest: ModelRequest{Config: wideConfig(1024)}, P: tp(4), D: tp(8), Ranges: tune.Ranges{BlockSizes: "16:64:16", PBlockSizes: "16,32", Selectors: "classic,balanced"}}, true},
		{"4,096 layers, TP 8 to 16 and 16 to 32", TuneRequest{ModelRequest: ModelRequest{Config: wideConfig(4096)}, P: tp(1), D: tp(1), Ranges: tune.Ranges{TPPairs: "8:16,16:32", BlockSizes: "16:128:16"}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, m, err := tuneSearch(context.Background(), a, &c.req)
			if err != nil {
				t.Fatal(err)
			}
			est := tuneMemory(m, s)
			peak, took, res := tuneUse(t, a, c.req)
			t.Logf("%d candidates (%d feasible) in %v: estimate %.1f MiB, peak heap %.1f MiB (%.2fx)", res.Total, res.Feasible, took.Round(time.Millisecond),
				float64(est)/(1<<20), float64(peak)/(1<<20), float64(est)/float64(peak))
			if res.Feasible == 0 {
				t.Errorf("no candidate accepted (refused: %+v): the search held little", res.Refused)
			}
			if est < peak {
				t.Errorf("the estimate %d is below the heap's growth of %d bytes", est, peak)
			}
			if c.tight && est > 8*peak {
				t.Errorf("the estimate %d is over 8x the heap's growth of %d bytes", est, peak)
			}
		})
	}
}

// TestTuneDeadline: a search still running at Limits.TuneDeadline answers
// 200 with what it has evaluated, marked partial (partial, stopped naming
// --tune-deadline, evaluated under candidates), soon after the deadline and
// well before the server's write timeout; a search that ends in time is
// not marked.
func TestTuneDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	_, srv := newTestServer(t, Limits{MaxMemory: 8 << 30, MaxPairs: 1 << 40, MaxResponse: 1 << 40, QueueWait: time.Second, MaxQueue: 1, TuneDeadline: deadline})
	body := func(req TuneRequest) string {
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any // without the configs not given (null)
		json.Unmarshal(b, &m)
		for k, v := range m {
			if v == nil {
				delete(m, k)
			}
		}
		b, _ = json.Marshal(m)
		return string(b)
	}
	tp := func(n int) plan.Engine {
		return plan.Engine{TensorParallelSize: n, MaxModelLen: 8192, KVCacheMemoryBytes: 1 << 40}
	}
	for _, c := range []struct {
		name    string
		req     TuneRequest
		partial bool
	}{
		// 64 candidates of about 100 ms each on this machine.
		{"a search past the deadline answers what it has", TuneRequest{ModelRequest: ModelRequest{Config: wideConfig(4096)}, P: tp(1), D: tp(1),
			Ranges: tune.Ranges{TPPairs: "8:16,16:32", BlockSizes: "16:512:16"}}, true},
		{"a search in time is whole", TuneRequest{ModelRequest: ModelRequest{Model: "Qwen/Qwen3-0.6B"}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			code, _, out, err := post(t, context.Background(), srv.URL+"/api/tune", body(c.req))
			took := time.Since(start)
			if err != nil || code != 200 {
				t.Fatalf("%d %v (%v)", code, out, err)
			}
			stopped, _ := out["stopped"].(string)
			t.Logf("answered in %v: %v of %v candidates evaluated; partial %v: %s", took.Round(time.Millisecond), out["evaluated"], out["candidates"], out["partial"], stopped)
			if !c.partial {
				if _, ok := out["partial"]; ok || stopped != "" || out["evaluated"] != out["candidates"] {
					t.Errorf("a whole search: partial %v, stopped %q, %v of %v evaluated", out["partial"], stopped, out["evaluated"], out["candidates"])
				}
				return
			}
			if out["partial"] != true || !strings.Contains(stopped, "--tune-deadline 300ms") || out["evaluated"].(float64) >= out["candidates"].(float64) {
				t.Errorf("partial %v, stopped %q, %v of %v evaluated: want a partial answer naming --tune-deadline", out["partial"], stopped, out["evaluated"], out["candidates"])
			}
			if _, ok := out["top"].([]any); !ok {
				t.Errorf("the partial answer has no top list: %v", out)
			}
			if took > deadline+3*time.Second {
				t.Errorf("answered %v after the request, %v past the deadline", took, took-deadline)
			}
		})
	}
}
