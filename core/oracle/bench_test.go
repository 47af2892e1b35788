package oracle

import (
	"bytes"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/xfer"
)

// BenchmarkCheck proves gpt-oss-20b transfers of 1,100 tokens, P TP2 -> D
// TP4, on vLLM's path and (with D at block 48) on the group-pair path;
// SetBytes is the bytes moved, so MB/s is bytes verified per second. The
// baseline copies and compares the same bytes once: memory bandwidth.
func BenchmarkCheck(b *testing.B) {
	m := modeltest.Load(b, "openai__gpt-oss-20b")
	var moved int64
	for _, tc := range []struct {
		name string
		d    plan.Engine
	}{
		{"vllm-path", plan.Engine{TensorParallelSize: 4}},
		{"group-pairs", plan.Engine{TensorParallelSize: 4, BlockSize: 48}},
	} {
		x := transfer(b, m, plan.Engine{TensorParallelSize: 2}, tc.d, xfer.Request{PromptTokens: 1100}, "nixl")
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				res, err := Check(m, x)
				if err != nil || res.Verdict != Exact {
					b.Fatal(err, res)
				}
				moved = res.Bytes
			}
			b.SetBytes(moved)
		})
	}
	b.Run("baseline-copy-compare", func(b *testing.B) {
		src, dst := bytes.Repeat([]byte{1}, int(moved)), make([]byte, moved)
		for b.Loop() {
			copy(dst, src)
			if !bytes.Equal(dst, src) {
				b.Fatal("copy")
			}
		}
		b.SetBytes(moved)
	})
}
