package app

import (
	"testing"

	"github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model"
)

func testCatalog() model.Catalog {
	return catalog.Bundled()
}

// BenchmarkCompute is the app's recompute after an input change, natively:
// Qwen3.6-35B-A3B + DFlash, P TP2 and D TP4, 4096 prompt tokens (the
// default view). The browser runs the same code as WebAssembly.
func BenchmarkCompute(b *testing.B) {
	cat := testCatalog()
	s := DefaultSettings()
	b.ReportAllocs()
	for b.Loop() {
		if r := Compute(s, cat, nil); !r.OK() {
			b.Fatal(r.Errors, r.Err)
		}
	}
}

// BenchmarkTransfer is what the descriptor flow view adds: the transfer of
// the default request (1,024 tokens), P TP2 to D TP8.
func BenchmarkTransfer(b *testing.B) {
	cat := testCatalog()
	s := DefaultSettings()
	s.D.TensorParallelSize = 8
	r := Compute(s, cat, nil)
	b.ReportAllocs()
	for b.Loop() {
		r.transferDone = false
		r.EnsureTransfer(nil)
	}
}
