package plan

import (
	"fmt"
	"github.com/kvscope/kvscope/core/vllm"
	"reflect"
	"testing"

	"github.com/kvscope/kvscope/core/kvspec"
	"github.com/kvscope/kvscope/core/model"
)

// These are vLLM's test_get_kv_cache_config_one_worker vectors (T1-T11 of
// reference/planning.md §7), built the way its helpers build them:
// new_kv_cache_spec(block_size=16, num_kv_heads=2, head_size=64,
// dtype=float32) and new_sliding_window_spec(sliding_window=1), with
// max_model_len 16. P = 16*2*64*4*2 = 16,384 bytes.

const pageP = 16 * 2 * 64 * 4 * 2

func fullSpec(head int) kvspec.Spec {
	return kvspec.Spec{Kind: model.Full, BlockSize: 16, KVHeads: 2, HeadSize: head, HeadSizeV: head, DTypeBytes: 4}
}

func swSpec(head, window int) kvspec.Spec {
	s := fullSpec(head)
	s.Kind, s.Window = model.Sliding, window
	return s
}

func layers(specs ...kvspec.Spec) []kvspec.LayerSpec {
	out := make([]kvspec.LayerSpec, len(specs))
	for i, s := range specs {
		name := fmt.Sprintf("l%d", i+1)
		out[i] = kvspec.LayerSpec{Layer: model.Layer{Name: name, Index: i, Role: model.Target, Kind: s.Kind}, Spec: s}
	}
	return out
}

func repeat(n int, s kvspec.Spec) []kvspec.Spec {
	out := make([]kvspec.Spec, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func cat(parts ...[]kvspec.Spec) []kvspec.Spec {
	var out []kvspec.Spec
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func groupNames(p *Plan) [][]string {
	var out [][]string
	for _, g := range p.Groups {
		out = append(out, g.Layers)
	}
	return out
}

func TestOneWorkerGoldenVectors(t *testing.T) {
	full, sw := fullSpec(64), swSpec(64, 1)
	classic := Engine{MaxModelLen: 16, Selector: Classic}
	tests := []struct {
		name      string
		specs     []kvspec.Spec
		engine    Engine
		avail     int64
		numBlocks int64
		groups    [][]string
		blockSize map[string]int // layer -> block size, where it differs from 16
		page      int64
	}{
		{"T1 two full layers make one uniform group", []kvspec.Spec{full, full}, classic, 2 * 32 * pageP, 32,
			[][]string{{"l1", "l2"}}, nil, pageP},
		{"T2 two sliding layers make one uniform group", []kvspec.Spec{sw, sw}, classic, 2 * 32 * pageP, 32,
			[][]string{{"l1", "l2"}}, nil, pageP},
		{"T4 full and sliding make two groups sharing one slot", []kvspec.Spec{full, sw}, classic, 2 * 32 * pageP, 64,
			[][]string{{"l1"}, {"l2"}}, nil, pageP},
		{"T5 2F+4S split by g=2, sliding strided", cat(repeat(2, full), repeat(4, sw)), classic, 2 * 32 * pageP, 32,
			[][]string{{"l1", "l2"}, {"l3", "l5"}, {"l4", "l6"}}, nil, pageP},
		{"T6 3F+7S classic picks g=3", cat(repeat(3, full), repeat(7, sw)), classic, 3 * 32 * pageP, 32,
			[][]string{{"l1", "l2", "l3"}, {"l4", "l7", "l10"}, {"l5", "l8"}, {"l6", "l9"}}, nil, pageP},
		{"T7 6F+5S keeps g=6 since 6 < 7.5", cat(repeat(6, full), repeat(5, sw)), classic, 6 * 32 * pageP, 32,
			[][]string{{"l1", "l2", "l3", "l4", "l5", "l6"}, {"l7", "l8", "l9", "l10", "l11"}}, nil, pageP},
		{"T8 full layers of different head sizes make one uniform-type group", []kvspec.Spec{fullSpec(128), full}, classic, 3 * 32 * pageP, 32,
			[][]string{{"l1", "l2"}}, nil, 3 * pageP},
		{"T9 a sliding layer with half the page doubles its block size", []kvspec.Spec{full, swSpec(32, 1)}, classic, 32 * pageP, 32,
			[][]string{{"l1"}, {"l2"}}, map[string]int{"l2": 32}, pageP},
		// Newest vLLM pads a page that does not divide the largest:
		// the full page 16,384 is padded to the sliding page 16*2*96*4*2 =
		// 24,576, so num_blocks = 2*32*16,384 / 24,576 = 42 (floor).
		{"T10 a page that does not divide is padded", []kvspec.Spec{full, swSpec(96, 1)}, classic, 2 * 32 * pageP, 42,
			[][]string{{"l1"}, {"l2"}}, nil, 24576},
		{"T11 num_gpu_blocks_override wins", []kvspec.Spec{full, full}, Engine{MaxModelLen: 16, Selector: Classic, NumGPUBlocksOverride: 16}, 2 * 32 * pageP, 16,
			[][]string{{"l1", "l2"}}, nil, pageP},
		// The padding-bytes selector's updated test: a sliding layer's worst
		// case (2 blocks) exceeds a full layer's (1 block) at max_model_len
		// 16, so 3F+7S pads to 4 full + 8 sliding: g=4, num_blocks
		// 3*32*P / (4P) = 24.
		{"T6 under padding-bytes pads full attention to 4", cat(repeat(3, full), repeat(7, sw)), Engine{VLLMVersion: vllm.Branch, MaxModelLen: 16}, 3 * 32 * pageP, 24,
			[][]string{{"l1", "l2", "l3"}, {"l4", "l6", "l8", "l10"}, {"l5", "l7", "l9"}}, nil, pageP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.engine
			e.KVCacheMemoryBytes = tt.avail
			p, err := FromSpecs(layers(tt.specs...), e)
			if err != nil {
				t.Fatal(err)
			}
			if p.NumBlocks != tt.numBlocks {
				t.Errorf("num_blocks = %d, want %d", p.NumBlocks, tt.numBlocks)
			}
			if got := groupNames(p); !reflect.DeepEqual(got, tt.groups) {
				t.Errorf("groups = %v, want %v", got, tt.groups)
			}
			if p.PageBytes != tt.page {
				t.Errorf("page = %d, want %d", p.PageBytes, tt.page)
			}
			for _, l := range p.Layers {
				want := 16
				if bs, ok := tt.blockSize[l.Name]; ok {
					want = bs
				}
				if l.Block != want {
					t.Errorf("%s block size = %d, want %d", l.Name, l.Block, want)
				}
			}
		})
	}
}

func TestDisabledHybridManagerMakesOneGroup(t *testing.T) {
	// T3: with the hybrid manager disabled, the sliding layer becomes full
	// attention that records its window, and both share one group.
	p, err := FromSpecs(layers(fullSpec(64), swSpec(64, 1)), Engine{MaxModelLen: 16, DisableHybrid: true, KVCacheMemoryBytes: 2 * 32 * pageP})
	if err != nil {
		t.Fatal(err)
	}
	if p.NumBlocks != 32 || p.NumGroups != 1 || p.Groups[0].Kind != model.Full {
		t.Errorf("num_blocks %d, groups %d (%s); want 32 and one full group", p.NumBlocks, p.NumGroups, p.Groups[0].Kind)
	}
	if p.Layers[1].Spec.Window != 1 {
		t.Errorf("the converted layer lost its window: %+v", p.Layers[1].Spec)
	}
	state := kvspec.Spec{Kind: model.Mamba2, BlockSize: 16, Shapes: [][]int{{2, 512}, {3, 32, 32}}, StateDTypeBytes: []int{4, 4}, MambaMode: "none"}
	if _, err := FromSpecs(layers(fullSpec(64), state), Engine{MaxModelLen: 16, DisableHybrid: true}); err == nil {
		t.Error("disabling the hybrid manager with state layers must fail as vLLM's unify_hybrid_kv_cache_specs does")
	}
}

// The selector vectors of vLLM PR #58207 (padding-bytes-selector.md §1): all
// layers share one page, max_model_len 32768, 256 tokens in flight, block 16.
// "sw" has window 1, "draft sw" window 1024. The expected value is the
// largest group's layer count.
func TestPaddingBytesSelectorVectors(t *testing.T) {
	full := fullSpec(64)
	sw := swSpec(64, 1)
	draftSW := swSpec(64, 1024)
	tests := []struct {
		full, sw, draftSW, minLayers, want int
	}{
		{10, 30, 1, 2, 2},
		{10, 30, 1, 3, 5},
		{13, 12, 0, 3, 13},
		{10, 52, 0, 3, 10},
		{9, 39, 5, 3, 9},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%d full %d sw %d draft sw min %d gives %d", tt.full, tt.sw, tt.draftSW, tt.minLayers, tt.want)
		t.Run(name, func(t *testing.T) {
			specs := cat(repeat(tt.full, full), repeat(tt.sw, sw), repeat(tt.draftSW, draftSW))
			e := Engine{VLLMVersion: vllm.Branch, MaxModelLen: 32768, MaxNumBatchedTokens: 256, NoAsyncScheduling: true, MinGroupLayers: tt.minLayers}
			p, err := FromSpecs(layers(specs...), e)
			if err != nil {
				t.Fatal(err)
			}
			if p.Slots != tt.want {
				t.Errorf("largest group = %d, want %d (g = %d, groups %d)", p.Slots, tt.want, p.GroupSize, p.NumGroups)
			}
		})
	}
}

// MiMo-V2.6 + DFlash (padding-bytes-selector.md §1): 9 full layers (block
// 32 after unification), 39 sliding W=128 and 5 drafter sliding W=1024
// (block 16), max_model_len 1,048,576, 2 x 8192 tokens in flight. By hand:
// a full group holds ceil(1,048,576/32) = 32,768 blocks per request, a
// sliding group ceil((127+16,384)/16)+1 = 1,033, the drafter group
// ceil((1,023+16,384)/16)+1 = 1,089. Stock g=5 gives 2 full + 8 sliding + 1
// drafter groups = 74,889 blocks per request; g=9 gives 1 + 5 + 1 = 39,022.
// With the benchmark's pools (151,389 blocks at G=5, 84,094 at G=9) the
// newest capacity formula gives the reported 2,119,708 and 2,259,724 tokens.
func TestMiMoCrossCheck(t *testing.T) {
	// Full pages hold half the sliding page's bytes per block at block 16,
	// so unification doubles their block size to 32.
	full := kvspec.Spec{Kind: model.Full, BlockSize: 16, KVHeads: 1, HeadSize: 64, HeadSizeV: 64, DTypeBytes: 2}
	sw := kvspec.Spec{Kind: model.Sliding, BlockSize: 16, KVHeads: 2, HeadSize: 64, HeadSizeV: 64, DTypeBytes: 2, Window: 128}
	dsw := sw
	dsw.Window = 1024
	page := sw.PageBytes()
	specs := cat(repeat(9, full), repeat(39, sw), repeat(5, dsw))
	for _, tt := range []struct {
		selector  Selector
		slots     int
		groups    int
		perReq    int64
		numBlocks int64
		tokens    int64
	}{
		{Classic, 5, 11, 74889, 151389, 2119708},
		{PaddingBytes, 9, 7, 39022, 84094, 2259724},
	} {
		t.Run(string(tt.selector), func(t *testing.T) {
			avail := tt.numBlocks * int64(tt.slots) * page
			e := Engine{VLLMVersion: vllm.Branch, MaxModelLen: 1048576, MaxNumBatchedTokens: 8192, Selector: tt.selector, KVCacheMemoryBytes: avail}
			p, err := FromSpecs(layers(specs...), e)
			if err != nil {
				t.Fatal(err)
			}
			if p.Slots != tt.slots || p.NumGroups != tt.groups || p.BlocksPerRequest != tt.perReq {
				t.Errorf("G %d, groups %d, blocks/request %d; want %d, %d, %d", p.Slots, p.NumGroups, p.BlocksPerRequest, tt.slots, tt.groups, tt.perReq)
			}
			if p.NumBlocks != tt.numBlocks || p.KVCacheTokens != tt.tokens {
				t.Errorf("num_blocks %d, KV tokens %d; want %d, %d", p.NumBlocks, p.KVCacheTokens, tt.numBlocks, tt.tokens)
			}
			if p.Groups[0].BlockSize != 32 {
				t.Errorf("full block size = %d, want 32 after unification", p.Groups[0].BlockSize)
			}
		})
	}
}

func TestSelectorsOnBucketVectors(t *testing.T) {
	// reference/planning.md §5: classic and #49472 (lambda 1) group sizes.
	tests := []struct {
		name     string
		sizes    []int
		classic  int
		balanced int
	}{
		{"gpt-oss-20b", []int{12, 12}, 12, 12},
		{"gpt-oss with EAGLE", []int{12, 13}, 13, 13},
		{"Gemma-3-12B", []int{40, 8}, 8, 8},
		{"Gemma-3-27B", []int{52, 10}, 10, 13},
		{"Qwen3-Next", []int{36, 12}, 12, 12},
		{"Qwen3.6 + DFlash", []int{30, 10, 5, 1}, 1, 5},
		{"MiMo + DFlash", []int{9, 39, 5}, 5, 10},
		{"3 F + 7 SW", []int{3, 7}, 3, 4},
		{"20 F + 30 SW", []int{20, 30}, 20, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if g := classicGroupSize(tt.sizes, mainThreshold); g != tt.classic {
				t.Errorf("classic g = %d, want %d", g, tt.classic)
			}
			if g := balancedGroupSize(tt.sizes, 1); g != tt.balanced {
				t.Errorf("balanced g = %d, want %d", g, tt.balanced)
			}
		})
	}
}

func TestSplitIsStrided(t *testing.T) {
	// 10 full layers and 52 sliding ones at g=10: the full bucket is one
	// group, and the sliding one gives 6 groups of 9,9,9,9,8,8, each
	// layers[i::6] of the bucket.
	specs := cat(repeat(10, fullSpec(64)), repeat(52, swSpec(64, 1)))
	p, err := FromSpecs(layers(specs...), Engine{MaxModelLen: 16, GroupSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Groups) != 1+6 {
		t.Fatalf("groups = %d, want 1 full and 6 sliding", len(p.Groups))
	}
	for i, want := range []int{9, 9, 9, 9, 8, 8} {
		g := p.Groups[1+i]
		if len(g.Layers) != want {
			t.Errorf("group %d has %d layers, want %d", i, len(g.Layers), want)
		}
		for k, name := range g.Layers {
			if li := i + 6*k; name != fmt.Sprintf("l%d", 10+li+1) {
				t.Errorf("group %d slot %d = layer %s, want bucket layer %d (l%d)", i, k, name, li, 10+li+1)
			}
		}
	}
	if len(p.Warnings) != 1 || p.Warnings[0] != "Add 8 padding layers, may waste at most 15.38% KV cache memory" {
		t.Errorf("warnings = %q", p.Warnings)
	}
}
