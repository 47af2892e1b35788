package plan

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/vllm"
)

// TestNewerVersionPlansAsTheNewest: an engine naming a vLLM newer than
// every release kvscope has read is planned with the newest release's
// rules (the same groups and blocks), and the plan is inferred, saying
// why first; the newest release itself is not inferred on that account.
func TestNewerVersionPlansAsTheNewest(t *testing.T) {
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	e := Engine{TensorParallelSize: 2, KVCacheMemoryBytes: 4 << 30, MaxModelLen: 8192}
	e.VLLMVersion = vllm.Newest().Name()
	newest, err := New(m, e)
	if err != nil {
		t.Fatal(err)
	}
	e.VLLMVersion = "0.40.0"
	newer, err := New(m, e)
	if err != nil {
		t.Fatalf("vLLM 0.40.0: %v, want it planned as %s", err, vllm.Newest().Name())
	}
	if !reflect.DeepEqual(newer.Groups, newest.Groups) || newer.NumBlocks != newest.NumBlocks {
		t.Errorf("0.40.0 plans other groups or blocks than %s", vllm.Newest().Name())
	}
	if !newer.Inferred || len(newer.InferredReasons) == 0 || !strings.Contains(newer.InferredReasons[0], "0.40.0 is newer than the newest release kvscope has read") {
		t.Errorf("inferred %v, reasons %q", newer.Inferred, newer.InferredReasons)
	}
	for _, r := range newest.InferredReasons {
		if strings.Contains(r, "newer than") {
			t.Errorf("the newest release itself: %q", r)
		}
	}
}
