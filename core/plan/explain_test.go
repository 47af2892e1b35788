package plan

import (
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/vllm"
)

// TestExplain: the explanation is the planner's own decision. For the
// published P/D deployment (Qwen3.6-35B-A3B + DFlash, 7 speculative
// tokens, 262,144 tokens, the group-pair branch) the padding-bytes
// selector picks g = 3 at TP 2 and g = 11 at TP 4 (the deployment's
// published plans), attention blocks of 592 and 304 tokens (the
// padding-bytes note's figures); the chosen candidate has the fewest
// padding bytes, then groups, of every g weighed (the PR's rule, so an
// explanation whose costs disagree with the selector fails here);
// gpt-oss-20b's two buckets of 12 on a release take the classic rule's
// largest, and a dense model is one uniform group.
func TestExplain(t *testing.T) {
	seed := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	at := func(tp int) *Plan {
		return mustPlan(t, seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: tp, NumSpeculativeTokens: 7, MaxModelLen: 262144})
	}
	for _, tt := range []struct {
		tp, g, block int
	}{{2, 3, 592}, {4, 11, 304}} {
		p := at(tt.tp)
		x := p.Explain()
		if x.Chosen != tt.g || x.Dispatch != "hybrid" || x.Selector != string(PaddingBytes) {
			t.Errorf("TP %d: chose %d by %s (%s), want g = %d by padding-bytes", tt.tp, x.Chosen, x.Selector, x.Dispatch, tt.g)
		}
		var chosen *Candidate
		for i := range x.Candidates {
			c := &x.Candidates[i]
			if c.Chosen {
				chosen = c
			}
		}
		if chosen == nil || chosen.G != tt.g {
			t.Fatalf("TP %d: no chosen candidate g = %d in %+v", tt.tp, tt.g, x.Candidates)
		}
		for _, c := range x.Candidates {
			if c.PaddingBytes < chosen.PaddingBytes || c.PaddingBytes == chosen.PaddingBytes && c.Groups < chosen.Groups {
				t.Errorf("TP %d: g = %d (%d B, %d groups) beats the chosen g = %d (%d B, %d groups)", tt.tp, c.G, c.PaddingBytes, c.Groups, chosen.G, chosen.PaddingBytes, chosen.Groups)
			}
		}
		if !strings.Contains(x.Alignment, "attention block "+itoa(tt.block)+" tokens") || !strings.Contains(strings.Join(x.Lines, "\n"), "whole request") {
			t.Errorf("TP %d: alignment %q, lines %q", tt.tp, x.Alignment, x.Lines)
		}
	}
	diff := Difference(at(2), at(4), "P", "D")
	joined := strings.Join(diff, "\n")
	for _, want := range []string{"--tensor-parallel-size (P 2, D 4)", "P's selector picks g = 3, D's g = 11", "block size P 592, D 304"} {
		if !strings.Contains(joined, want) {
			t.Errorf("difference lacks %q:\n%s", want, joined)
		}
	}
	if d := Difference(at(2), at(2), "P", "D"); len(d) != 0 {
		t.Errorf("a plan against itself: %q", d)
	}

	gpt := mustPlan(t, modeltest.Load(t, "openai__gpt-oss-20b"), Engine{VLLMVersion: "0.20.0"})
	if x := gpt.Explain(); x.Chosen != 12 || !strings.Contains(x.Why, "under 1.50 x the smallest (12): g is the largest, 12") {
		t.Errorf("gpt-oss-20b on 0.20.0: g = %d, %q", x.Chosen, x.Why)
	}
	dense := mustPlan(t, modeltest.Load(t, "Qwen__Qwen3-0.6B"), Engine{VLLMVersion: "0.20.0"})
	if x := dense.Explain(); x.Dispatch != "uniform" || len(x.Candidates) != 0 || len(x.Lines) < 2 {
		t.Errorf("Qwen3-0.6B: %+v", x)
	}
}

func itoa(n int) string { return strings.TrimSpace(Commas(int64(n))) }
