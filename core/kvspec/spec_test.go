package kvspec

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
)

func TestQwen3NextAlignment(t *testing.T) {
	// reference/planning.md §3.1: conv (3, 8192/TP) and SSM (32/TP, 128, 128)
	// in bf16; attention 2 KV heads of 256 (replicated past TP 2).
	m := modeltest.Load(t, "Qwen__Qwen3-Next-80B-A3B-Instruct")
	tests := []struct {
		tp                int
		attn1, state      int64
		blockSize         int
		page              int64
		padPercentRounded float64
	}{
		{1, 2048, 1097728, 544, 1114112, 1.49},
		{2, 1024, 548864, 544, 557056, 1.49},
		{4, 1024, 274432, 272, 278528, 1.49},
		{8, 1024, 137216, 144, 147456, 7.46},
	}
	for _, tt := range tests {
		r, err := ForRank(m, Options{TensorParallelSize: tt.tp})
		if err != nil {
			t.Fatal(err)
		}
		a := r.Alignment
		if a.AttnBytesPerToken != tt.attn1 || a.StatePageBytes != tt.state || r.BlockSize != tt.blockSize || a.AttnPageBytes != tt.page {
			t.Errorf("TP%d: %+v, block %d", tt.tp, a, r.BlockSize)
		}
		if got := math.Round(a.PadPercent*100) / 100; got != tt.padPercentRounded {
			t.Errorf("TP%d pad %.4f%%, want %.2f%%", tt.tp, a.PadPercent, tt.padPercentRounded)
		}
		for _, l := range r.Layers {
			if l.Spec.PageBytes() != tt.page {
				t.Errorf("TP%d %s page %d, want %d (every page equal after alignment)", tt.tp, l.Layer.Name, l.Spec.PageBytes(), tt.page)
				break
			}
		}
	}
}

func TestStateShapes(t *testing.T) {
	gdn := model.Layer{Kind: model.GatedDeltaNet, State: &model.StateDims{ConvKernel: 4, KeyHeads: 16, ValueHeads: 32, KeyHeadDim: 128, ValueHeadDim: 128}}
	mamba2 := model.Layer{Kind: model.Mamba2, State: &model.StateDims{ConvKernel: 4, Intermediate: 10240, Groups: 8, Heads: 128, HeadDim: 80, StateSize: 128}}
	single := model.Layer{Kind: model.Mamba2, State: &model.StateDims{ConvKernel: 4, Intermediate: 4096, Groups: 1, Heads: 64, HeadDim: 64, StateSize: 128}}
	mamba1 := model.Layer{Kind: model.Mamba1, State: &model.StateDims{ConvKernel: 4, Intermediate: 8192, StateSize: 16}}
	tests := []struct {
		name string
		l    model.Layer
		tp   int
		spec int
		want [][]int
	}{
		{"GDN conv_dim = 128*16*2 + 128*32", gdn, 1, 0, [][]int{{3, 8192}, {32, 128, 128}}},
		{"GDN with 7 speculative rows at TP2", gdn, 2, 7, [][]int{{10, 4096}, {16, 128, 128}}},
		{"Mamba2 conv_dim = 10240 + 2*8*128", mamba2, 1, 0, [][]int{{3, 12288}, {128, 80, 128}}},
		{"Mamba2 one group replicated to 4 shards", single, 4, 0, [][]int{{3, (4096 + 2*4*128) / 4}, {16, 64, 128}}},
		{"Mamba1 has no speculative rows", mamba1, 2, 3, [][]int{{3, 4096}, {4096, 16}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := StateShapes(tt.l, tt.tp, tt.spec); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("shapes = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPages(t *testing.T) {
	t.Run("MLA stores the latent once: DeepSeek-V3 bf16 block 64 is 73,728 B", func(t *testing.T) {
		r, err := ForRank(modeltest.Load(t, "deepseek-ai__DeepSeek-V3"), Options{TensorParallelSize: 8, BlockSize: 64})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Layers[0].Spec.PageBytes(); got != 64*576*2 {
			t.Errorf("page = %d, want 73728", got)
		}
	})
	t.Run("FlashMLA forces block 64", func(t *testing.T) {
		r, err := ForRank(modeltest.Load(t, "deepseek-ai__DeepSeek-V2-Lite"), Options{AttentionBackend: "FLASHMLA"})
		if err != nil {
			t.Fatal(err)
		}
		if r.BlockSize != 64 {
			t.Errorf("block size %d, want 64", r.BlockSize)
		}
	})
	t.Run("fp8 halves a bf16 page", func(t *testing.T) {
		m := modeltest.Load(t, "openai__gpt-oss-20b")
		bf, _ := ForRank(m, Options{})
		f8, _ := ForRank(m, Options{KVCacheDType: "fp8"})
		if bf.Layers[0].Spec.PageBytes() != 32768 || f8.Layers[0].Spec.PageBytes() != 16384 {
			t.Errorf("bf16 %d, fp8 %d", bf.Layers[0].Spec.PageBytes(), f8.Layers[0].Spec.PageBytes())
		}
	})
	t.Run("Nemotron-H Mamba2 state at TP1", func(t *testing.T) {
		m := modeltest.Load(t, "nvidia__NVIDIA-Nemotron-Nano-9B-v2")
		r, err := ForRank(m, Options{MambaSSMCacheDType: "bfloat16"})
		if err != nil {
			t.Fatal(err)
		}
		// conv 3*12288*2 = 73,728; SSM 128*80*128*2 = 2,621,440.
		if r.Alignment.StatePageBytes != 73728+2621440 {
			t.Errorf("state page %d", r.Alignment.StatePageBytes)
		}
		// attention 8 heads * 128 * 2 * 2 = 4,096 B per token; 16 *
		// ceil(2,695,168 / 65,536) = 672.
		if r.BlockSize != 672 {
			t.Errorf("block %d, want 672", r.BlockSize)
		}
		// The newest release's NemotronH hook picks float32 for auto: SSM
		// 2,621,440*2 = 5,242,880, state 5,316,608; 16 * ceil(5,316,608 /
		// 65,536) = 16 * 82 = 1,312.
		f32, err := ForRank(m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if f32.Alignment.StatePageBytes != 73728+5242880 || f32.BlockSize != 1312 {
			t.Errorf("float32 SSM: state page %d, block %d; want 5,316,608 and 1,312", f32.Alignment.StatePageBytes, f32.BlockSize)
		}
	})
}

func TestMaxBlocks(t *testing.T) {
	lim := Limits{MaxModelLen: 131072, InFlightTokens: 8192}
	tests := []struct {
		name string
		s    Spec
		want int64
	}{
		{"full: ceil(131072/16)", Spec{Kind: model.Full, BlockSize: 16}, 8192},
		{"sliding 128: ceil((127+8192)/16)+1", Spec{Kind: model.Sliding, BlockSize: 16, Window: 128}, 521},
		{"sliding with 1 retained token still fits: 8320 tokens", Spec{Kind: model.Sliding, BlockSize: 16, Window: 128, ExtraRetained: 1}, 521},
		{"sliding with 2 retained tokens crosses a block", Spec{Kind: model.Sliding, BlockSize: 16, Window: 128, ExtraRetained: 2}, 522},
		{"chunked 8192: ceil(16384/16), no +1", Spec{Kind: model.ChunkedLocal, BlockSize: 16, Chunk: 8192}, 1024},
		{"sliding capped by max_model_len", Spec{Kind: model.Sliding, BlockSize: 16, Window: 1 << 20}, 8193},
		{"state none: 1 + spec", Spec{Kind: model.GatedDeltaNet, BlockSize: 16, MambaMode: "none", SpecBlocks: 7}, 8},
		{"state align: 2 + spec", Spec{Kind: model.Mamba2, BlockSize: 16, MambaMode: "align", SpecBlocks: 1}, 3},
		{"state all: ceil(M/bs) + spec", Spec{Kind: model.Mamba2, BlockSize: 16, MambaMode: "all", SpecBlocks: 2}, 8194},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.MaxBlocks(lim); got != tt.want {
				t.Errorf("MaxBlocks = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestOptionErrorsNameTheFlag(t *testing.T) {
	m := modeltest.Load(t, "Qwen__Qwen3.6-35B-A3B")
	tests := []struct {
		o    Options
		flag string
	}{
		{Options{TensorParallelSize: 3}, "--tensor-parallel-size"},
		{Options{KVCacheDType: "int4"}, "--kv-cache-dtype"},
		{Options{MambaSSMCacheDType: "fp64"}, "--mamba-ssm-cache-dtype"},
		{Options{MambaCacheMode: "sometimes"}, "--mamba-cache-mode"},
		{Options{AttentionBackend: "FLASHMLA"}, "--attention-backend"},
		{Options{AttentionBackend: "NOPE"}, "--attention-backend"},
	}
	for _, tt := range tests {
		_, err := ForRank(m, tt.o)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != tt.flag {
			t.Errorf("%+v: error %v, want one naming %s", tt.o, err, tt.flag)
		}
	}
}
