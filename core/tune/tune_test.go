package tune

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
	"github.com/kvscope/kvscope/core/xfer"
)

func qwenDFlash(t testing.TB) *model.Model {
	t.Helper()
	m := modeltest.LoadWithDraft(t, "Qwen__Qwen3.6-35B-A3B-FP8", "z-lab__Qwen3.6-35B-A3B-DFlash")
	return m
}

// TestDividingBlockSizeForQwenDFlash is the case: Qwen3.6-35B-A3B-FP8
// with its DFlash drafter, P TP2 -> D TP4 on the branch profile. Tune names
// a D block size whose pages divide P's, and it is the one kvscope pd
// advises (xfer's block-size advice, computed here from the plans as pd
// computes it); the plans are made again here to check that they divide.
func TestDividingBlockSizeForQwenDFlash(t *testing.T) {
	m := qwenDFlash(t)
	p := plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}
	d := p
	d.TensorParallelSize = 4
	s, err := NewSearch(Space{Model: m, P: p, D: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Step(context.Background(), len(s.Candidates())); err != nil {
		t.Fatal(err)
	}
	r := s.Result()
	if r.Dividing == nil {
		t.Fatalf("no candidate whose pages divide among %d accepted", r.Feasible)
	}
	conn, _ := xfer.ParseConnector("nixl")
	pd, err := xfer.Prepare(xfer.Setup{Model: m, P: p, D: d, Connector: conn, Plans: xfer.IndependentPlans})
	if err != nil {
		t.Fatal(err)
	}
	if pd.Advice.Divide || pd.Advice.BlockSize == 0 {
		t.Fatalf("pd's advice: %+v", pd.Advice)
	}
	if r.Dividing.DBlock != pd.Advice.BlockSize {
		t.Errorf("tune names D block %d (given %d), pd advises --block-size %d", r.Dividing.DBlock, r.Dividing.DBlockSize, pd.Advice.BlockSize)
	}
	pe, de := s.Engines(r.Dividing.Candidate)
	pp, err1 := plan.New(m, pe)
	dp, err2 := plan.New(m, de)
	if err1 != nil || err2 != nil || !xfer.PagesDivide(pp, dp) {
		t.Fatalf("the named candidate's plans (%v, %v) do not divide", err1, err2)
	}
	if !strings.Contains(r.Dividing.DServe, fmt.Sprintf("--block-size %d", r.Dividing.DBlockSize)) || !strings.Contains(r.Dividing.DServe, "--tensor-parallel-size 4") {
		t.Errorf("D's vllm serve line: %s", r.Dividing.DServe)
	}
	// The most KV tokens come without dividing pages: D keeps its own
	// smaller block, and pays for it in descriptors.
	if best := r.Top[0]; best.PagesDivide || best.DKVTokens <= r.Dividing.DKVTokens || best.Descs <= r.Dividing.Descs {
		t.Errorf("best %+v against dividing %+v", best, *r.Dividing)
	}
}

// TestRankingMatchesIndependentPlans ranks a small grid of gpt-oss-20b
// (TP pairs, D block sizes, batched-token limits) and holds every figure
// and the order against plans and transfers computed here, candidate by
// candidate, and sorted here.
func TestRankingMatchesIndependentPlans(t *testing.T) {
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	base := plan.Engine{VLLMVersion: vllm.Branch} // group pairs: D's block sizes need not be P's
	ranges := Ranges{TPPairs: "1:1,1:2,2:4", BlockSizes: "0,16,32,64", MaxBatched: "2048,8192"}
	conn, _ := xfer.ParseConnector("nixl")
	req := xfer.Request{PromptTokens: 1100}
	for _, objective := range []string{ByKVTokens, ByDescriptors, ByConcurrency, ByPadding} {
		t.Run(objective, func(t *testing.T) {
			r, err := Run(context.Background(), Space{Model: m, P: base, D: base, Ranges: ranges, Request: req, Objective: Objective{Name: objective}, Top: 100})
			if err != nil {
				t.Fatal(err)
			}
			type want struct {
				tp        TPPair
				block, mb int
				kv        int64
				conc      float64
				descs     int
				pad       int64
			}
			var wants []want
			for _, tp := range []TPPair{{1, 1}, {1, 2}, {2, 4}} {
				for _, bs := range []int{0, 16, 32, 64} {
					for _, mb := range []int{2048, 8192} {
						pe, de := base, base
						pe.TensorParallelSize, de.TensorParallelSize, de.BlockSize, de.MaxNumBatchedTokens = tp.P, tp.D, bs, mb
						pp, err1 := plan.New(m, pe)
						dp, err2 := plan.New(m, de)
						if err1 != nil || err2 != nil {
							t.Fatal(err1, err2)
						}
						x, err := xfer.Compute(m, pp, dp, req, xfer.Options{Connector: conn})
						if err != nil || x.Rejection != nil {
							t.Fatal(err, x.Rejection)
						}
						wants = append(wants, want{tp, bs, mb, dp.KVCacheTokens, dp.MaxConcurrency, x.Descs, pp.PaddingBytesPerRequest + dp.PaddingBytesPerRequest})
					}
				}
			}
			key := func(w want) float64 {
				switch objective {
				case ByKVTokens:
					return float64(w.kv)
				case ByConcurrency:
					return w.conc
				case ByDescriptors:
					return -float64(w.descs)
				}
				return -float64(w.pad)
			}
			sort.SliceStable(wants, func(i, j int) bool {
				if key(wants[i]) != key(wants[j]) {
					return key(wants[i]) > key(wants[j])
				}
				return wants[i].descs < wants[j].descs
			})
			if r.Total != 24 || r.Feasible != 24 || len(r.Top) != 24 {
				t.Fatalf("%d candidates, %d accepted, %d listed; refused %+v", r.Total, r.Feasible, len(r.Top), r.Refused)
			}
			for i, got := range r.Top {
				w := wants[i]
				if key(w) != got.Score {
					t.Errorf("#%d: score %v, want %v (%+v)", i+1, got.Score, key(w), w)
				}
				if got.TP == w.tp && got.DBlockSize == w.block && got.MaxBatched == w.mb &&
					(got.DKVTokens != w.kv || got.Descs != w.descs || got.DConcurrency != w.conc || got.PaddingBytes != w.pad) {
					t.Errorf("#%d %v block %d mnbt %d: kv %d descs %d conc %v pad %d, want %+v", i+1, got.TP, got.DBlockSize, got.MaxBatched,
						got.DKVTokens, got.Descs, got.DConcurrency, got.PaddingBytes, w)
				}
			}
		})
	}
}

// TestParetoFront: no point of the front is beaten on both figures by an
// accepted candidate, and every accepted candidate off the front is
// matched or beaten on both by a point on it.
func TestParetoFront(t *testing.T) {
	m := qwenDFlash(t)
	e := plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}
	r, err := Run(context.Background(), Space{Model: m, P: e, D: e, Ranges: Ranges{TPPairs: "2:2,2:4", BlockSizes: "0,16:1024:48"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Front) < 2 {
		t.Fatalf("front of %d points", len(r.Front))
	}
	dominates := func(a, b Scored) bool {
		return a.DKVTokens >= b.DKVTokens && a.Descs <= b.Descs && (a.DKVTokens > b.DKVTokens || a.Descs < b.Descs)
	}
	on := map[int]bool{}
	for _, f := range r.Front {
		on[f.Index] = true
		for _, c := range r.All {
			if dominates(c, f) {
				t.Errorf("front point %d (%d tokens, %d descs) is beaten by %d (%d, %d)", f.Index, f.DKVTokens, f.Descs, c.Index, c.DKVTokens, c.Descs)
			}
		}
	}
	for _, c := range r.All {
		if on[c.Index] != c.OnFront {
			t.Errorf("candidate %d: OnFront %v", c.Index, c.OnFront)
		}
		if on[c.Index] {
			continue
		}
		covered := false
		for _, f := range r.Front {
			covered = covered || f.DKVTokens >= c.DKVTokens && f.Descs <= c.Descs
		}
		if !covered {
			t.Errorf("candidate %d (%d tokens, %d descs) is off the front yet no point covers it", c.Index, c.DKVTokens, c.Descs)
		}
	}
}

// TestRefusalsAreCounted: on a release whose NixlConnector needs one group
// plan, D block sizes that plan otherwise than P's are refused by the
// handshake, each counted under its reason, and every candidate is either
// accepted or refused.
func TestRefusalsAreCounted(t *testing.T) {
	m := qwenDFlash(t)
	e := plan.Engine{VLLMVersion: "0.31.0", TensorParallelSize: 2, NumSpeculativeTokens: 7}
	r, err := Run(context.Background(), Space{Model: m, P: e, D: e, Ranges: Ranges{TPPairs: "2:2,2:4", BlockSizes: "0,16:1024:16"}})
	if err != nil {
		t.Fatal(err)
	}
	n := r.Feasible
	reasons := map[string]int{}
	for _, x := range r.Refused {
		n += x.Count
		reasons[x.Reason] = x.Count
		if x.Example == "" {
			t.Errorf("%s: no example", x.Reason)
		}
	}
	if n != r.Total || r.Evaluated != r.Total {
		t.Errorf("%d accepted + refused, %d evaluated, of %d", n, r.Evaluated, r.Total)
	}
	if reasons["handshake: mamba-prefix-block-size"] == 0 || r.Feasible == 0 {
		t.Errorf("accepted %d, refused %v", r.Feasible, reasons)
	}
	for _, c := range r.All {
		if c.TP.P == c.TP.D && !c.PagesDivide {
			// P and D at one TP with one group plan: the same pages.
			t.Errorf("candidate %d accepted at TP %s without dividing pages", c.Index, c.TP)
		}
	}
}

// TestBadRanges: a range the search cannot take is refused with an error
// naming its flag and the value.
func TestBadRanges(t *testing.T) {
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	tests := []struct {
		name   string
		ranges Ranges
		obj    Objective
		flag   string
		reason string
	}{
		{"empty value", Ranges{BlockSizes: "16,,32"}, Objective{}, "--block-sizes", `"" is not an integer`},
		{"inverted span", Ranges{BlockSizes: "1024:16:16"}, Objective{}, "--block-sizes", "inverted"},
		{"zero step", Ranges{BlockSizes: "16:64:0"}, Objective{}, "--block-sizes", "step 0"},
		{"absurd block size", Ranges{BlockSizes: "16,1048576"}, Objective{}, "--block-sizes", "outside 1..65536"},
		{"negative block size", Ranges{BlockSizes: "-16"}, Objective{}, "--block-sizes", "outside"},
		{"not a number", Ranges{BlockSizes: "16,big"}, Objective{}, "--block-sizes", "not an integer"},
		{"huge span", Ranges{BlockSizes: "1:65536:1"}, Objective{}, "--block-sizes", "more than 10000 values"},
		{"too many candidates", Ranges{TPPairs: "1,2,4,8,16x1,2,4,8,16", BlockSizes: "16:8192:16", MaxBatched: "1024:8192:1024"}, Objective{}, "the ranges", "more than 100000 candidates"},
		{"TP pair without D", Ranges{TPPairs: "2"}, Objective{}, "--tp-pairs", "want P:D"},
		{"TP zero", Ranges{TPPairs: "0:4"}, Objective{}, "--tp-pairs", "1..64"},
		{"TP absurd", Ranges{TPPairs: "1x1024"}, Objective{}, "--tp-pairs", "outside 1..64"},
		{"unknown selector", Ranges{Selectors: "classic,greedy"}, Objective{}, "--selectors", `"greedy"`},
		{"unknown dtype", Ranges{KVCacheDTypes: "fp4"}, Objective{}, "--kv-cache-dtypes", `"fp4"`},
		{"unknown connector", Ranges{Connectors: "lmcache"}, Objective{}, "--connectors", `"lmcache"`},
		{"mnbt zero span", Ranges{MaxBatched: "0:0"}, Objective{}, "", ""},
		{"mnbt absurd", Ranges{MaxBatched: "99999999"}, Objective{}, "--mnbt", "outside"},
		{"unknown objective", Ranges{}, Objective{Name: "speed"}, "--objective", `"speed"`},
		{"mix without weights", Ranges{}, Objective{Name: ByMix}, "--weights", "every weight is 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSearch(Space{Model: m, Ranges: tt.ranges, Objective: tt.obj})
			if tt.flag == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *RangeError
			if !errors.As(err, &re) || re.Flag != tt.flag || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("got %v, want a RangeError of %s with %q", err, tt.flag, tt.reason)
			}
		})
	}
	for _, tt := range []struct{ name, weights, want string }{
		{"weights without mix", "kv=1", "go with --objective mix"},
		{"unknown weight", "speed=1", `"speed"`},
		{"negative weight", "kv=-1", "from 0 to 1e6"},
	} {
		obj := ByMix
		if tt.name == "weights without mix" {
			obj = ByKVTokens
		}
		if _, err := ParseObjective(obj, tt.weights); err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--weights") {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

// TestStepStopsAndResumes: a search runs in slices, stops when its
// context ends, and a finished search in slices equals one run at once.
func TestStepStopsAndResumes(t *testing.T) {
	m := modeltest.Load(t, "openai__gpt-oss-20b")
	sp := Space{Model: m, Ranges: Ranges{TPPairs: "1:1,1:2", BlockSizes: "0,16:256:16"}}
	s, err := NewSearch(sp)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Step(ctx, 10); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled step: %v", err)
	}
	for !s.Done() {
		if err := s.Step(context.Background(), 5); err != nil {
			t.Fatal(err)
		}
		if done, total := s.Progress(); done > total {
			t.Fatalf("progress %d of %d", done, total)
		}
	}
	whole, err := Run(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	sliced := s.Result()
	if fmt.Sprint(sliced.Top) != fmt.Sprint(whole.Top) || sliced.Feasible != whole.Feasible {
		t.Errorf("sliced and whole searches differ")
	}
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts("--x", "0, 64:256:64,64,16", 1, 1024, true)
	if err != nil || fmt.Sprint(got) != "[0 64 128 192 256 16]" {
		t.Errorf("got %v, %v", got, err)
	}
	tps, err := ParseTPPairs("--tp-pairs", "1,2x2,4")
	if err != nil || fmt.Sprint(tps) != "[1:2 1:4 2:2 2:4]" {
		t.Errorf("got %v, %v", tps, err)
	}
}
