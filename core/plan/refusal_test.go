package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
)

// gpt-oss-20b at TP 1, 131,072 tokens, 8,192 batched tokens, with 3 GiB of
// KV cache memory (reference/planning.md §8.1 for the shapes): one block id
// takes 12 slots * 32,768 B = 393,216 B; a request needs 8,192 full blocks
// and ceil(min(127 + T, L) / 16) + 1 sliding blocks, T the in-flight
// tokens. 3 GiB holds exactly 3,221,225,472 / 393,216 = 8,192 blocks.
func TestStartupRefusalByVersion(t *testing.T) {
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	tests := []struct {
		version  string
		refuses  bool
		estimate int
		message  []string
	}{
		// needed 393,216 * (8,192 + 521) B = 3.19 GiB; the longest fitting
		// length has 8,192 - 521 = 7,671 full blocks: 122,736 tokens.
		{"0.21.0", true, 122736, []string{"models's max seq len (131072)", "(3.19 GiB KV cache is needed", "memory (3.0 GiB)", "is 122736.", "conserving_memory"}},
		// Before 0.14: the sum over layers, the same bytes here (no padding
		// slots), printed with two decimals.
		{"0.13.0", true, 122736, []string{"(3.19 GiB", "memory (3.00 GiB)", "conserving_memory"}},
		{"0.12.0", true, 122736, []string{"memory (3.00 GiB)."}},
		// 0.14 to 0.18 count only group 0, the first layer's: sliding,
		// 521 blocks. vLLM starts.
		{"0.15.0", false, 0, nil},
		// From 0.26 the sliding reserve is 2 * 8,192 in flight: 1,033
		// blocks, so 8,192 - 1,033 = 7,159 full blocks: 114,544 tokens;
		// needed 393,216 * (8,192 + 1,033) B.
		{"0.26.0", true, 114544, []string{"(3.38 GiB"}}, // 393,216 * 9,225 B = 3.378 GiB
		// From 0.29 one block is held back: 7,158 full blocks, 114,528
		// tokens; "model's" since 0.22.
		{"0.29.0", true, 114528, []string{"the model's max seq len"}},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			_, err := New(m, Engine{VLLMVersion: tt.version, MaxModelLen: 131072, KVCacheMemoryBytes: 3 << 30})
			var re *RefusalError
			if !tt.refuses {
				if err != nil {
					t.Fatalf("vLLM %s starts, kvscope says %v", tt.version, err)
				}
				return
			}
			if !errors.As(err, &re) {
				t.Fatalf("want a refusal, got %v", err)
			}
			if re.EstimatedMaxLen != tt.estimate {
				t.Errorf("estimated max model len %d, want %d", re.EstimatedMaxLen, tt.estimate)
			}
			for _, s := range tt.message {
				if !strings.Contains(re.Message, s) {
					t.Errorf("message %q lacks %q", re.Message, s)
				}
			}
		})
	}
}

// The refusal estimate is the longest length that plans: one token more is
// refused, the estimate itself starts.
func TestRefusalEstimateIsTheLongestLengthThatStarts(t *testing.T) {
	m := modeltest.Load(t, "Qwen__Qwen3-0.6B")
	e := Engine{MaxModelLen: 40960, KVCacheMemoryBytes: 1 << 30}
	_, err := New(m, e)
	var re *RefusalError
	if !errors.As(err, &re) || re.EstimatedMaxLen <= 0 {
		t.Fatalf("%v", err)
	}
	e.MaxModelLen = re.EstimatedMaxLen
	if _, err := New(m, e); err != nil {
		t.Errorf("the estimate %d does not start: %v", re.EstimatedMaxLen, err)
	}
	e.MaxModelLen++
	if _, err := New(m, e); !errors.As(err, &re) {
		t.Errorf("one token past the estimate starts: %v", err)
	}
}
