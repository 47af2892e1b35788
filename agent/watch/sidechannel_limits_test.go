package watch_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/watch"
	"github.com/kvscope/kvscope/agent/watch/watchtest"
)

// TestHandshakeValueLimit: an answer of millions of values (ten million
// block lengths fit in 10 MB of msgpack) is refused before it is decoded,
// whether read from bytes or over a side channel; one of vLLM's size is
// read.
func TestHandshakeValueLimit(t *testing.T) {
	for _, c := range []struct {
		name    string
		regions int
		want    string // "" when read
	}{
		{"256 regions", 256, ""},
		{"100,000 regions", 100_000, ""},
		{"10 million block lengths", 10_000_000, "more than 262144 values"},
	} {
		t.Run(c.name, func(t *testing.T) {
			lens := make([]int, c.regions)
			for i := range lens {
				lens[i] = 1 // a one-byte msgpack value each
			}
			answer := handshakeAnswer(t, "agent-big", 0, map[string]any{"block_lens": lens})
			sc, err := watchtest.NewSideChannel(func(int) []byte { return answer })
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Close()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			md, err := watch.DecodeHandshake(answer)
			runtime.ReadMemStats(&after)
			if c.want == "" {
				if err != nil || len(md.BlockLens) != c.regions {
					t.Fatalf("%v: want %d block lengths", err, c.regions)
				}
			} else if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v: want %q", err, c.want)
			}
			// Decoding into interfaces costs some 90 bytes a value.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100*uint64(min(c.regions, 1<<18))+(8<<20) {
				t.Errorf("allocated %d bytes for %d values", alloc, c.regions)
			}
			_, err = watch.QueryRank(context.Background(), sc.Addr, 0, 10*time.Second, 0)
			if (err == nil) != (c.want == "") || err != nil && (!strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), sc.Addr)) {
				t.Errorf("over the side channel: %v, want %q naming %s", err, c.want, sc.Addr)
			}
		})
	}
}
