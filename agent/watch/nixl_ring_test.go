//go:build nixl && cgo

package watch_test

import (
	"testing"

	"github.com/kvscope/kvscope/agent/transfer/nixltest"
	"github.com/kvscope/kvscope/agent/watch"
)

// TestRealNIXLRings: real NIXL v1.4.0 agents write their telemetry rings
// (NIXL_TELEMETRY_DIR, the agents capture telemetry); a pull moves a real
// transfer; the watcher reads D's ring: one RX transfer per rank pair's
// request with the request's bytes and NIXL's durations, and memory
// registered on both agents.
func TestRealNIXLRings(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NIXL_TELEMETRY_DIR", dir)
	t.Setenv("NIXL_TELEMETRY_RUN_INTERVAL", "20")
	x, st := nixltest.Pull(t, "kvscope-ring")
	want := 0
	var wantBytes uint64
	for _, rp := range x.RankPairs {
		if len(rp.Pairs) > 0 {
			want++
			for _, q := range rp.Pairs {
				wantBytes += uint64(q.Len)
			}
		}
	}
	c := watchDir(t, dir)
	obs := c.wait(t, "one RX transfer per request", func(o []watch.Observation) bool { return count(o, "transfer") >= want })
	var got uint64
	var registered = map[string]bool{}
	for _, o := range obs {
		switch o.Kind {
		case "transfer":
			if o.Agent != "kvscope-ring-D" || o.Transfer.Dir != "rx" || o.Transfer.XferUS == 0 {
				t.Errorf("transfer %+v of %s: want an RX transfer in D's ring with its time", *o.Transfer, o.Agent)
			}
			got += o.Transfer.Bytes
		case "registered":
			registered[o.Agent] = true
		case "refused":
			t.Errorf("refused %s: %v", o.Agent, o.Err)
		}
	}
	if count(obs, "transfer") != want || got != wantBytes || got != uint64(st.Bytes) {
		t.Errorf("%d transfers of %d bytes in the rings, want %d of %d (NIXL's telemetry said %d)", count(obs, "transfer"), got, want, wantBytes, st.Bytes)
	}
	if !registered["kvscope-ring-P"] || !registered["kvscope-ring-D"] {
		t.Errorf("memory registered by %v, want both agents", registered)
	}
}
