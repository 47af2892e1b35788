package xfer

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

// TestCountOnlyMatchesPairs: counting a transfer's descriptors without
// writing them gives every rank pair's count and the total a full
// computation gives, on vLLM's path and on the group-pair path, for
// attention, sliding-window, state and draft layers, pull and push.
func TestCountOnlyMatchesPairs(t *testing.T) {
	qwen := modeltest.Seed(t)
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	for _, tc := range []struct {
		name      string
		m         bool // qwen
		p, d      plan.Engine
		connector string
		prompt    int
	}{
		{"gpt-oss vLLM path TP2->4", false, plan.Engine{TensorParallelSize: 2}, plan.Engine{TensorParallelSize: 4}, "nixl", 1100},
		{"gpt-oss group pairs TP2->4", false, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, BlockSize: 48}, "nixl", 1100},
		{"gpt-oss push TP4->2", false, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, BlockSize: 32}, "nixl-push", 777},
		{"qwen+dflash group pairs TP2->4", true, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7}, "nixl", 4096},
		{"qwen+dflash vLLM path TP4->4", true, plan.Engine{VLLMVersion: "0.31.0", TensorParallelSize: 4, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: "0.31.0", TensorParallelSize: 4, NumSpeculativeTokens: 7}, "nixl", 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := gpt
			if tc.m {
				m = qwen
			}
			pp, err1 := plan.New(m, tc.p)
			dp, err2 := plan.New(m, tc.d)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			c, _ := ParseConnector(tc.connector)
			req := Request{PromptTokens: tc.prompt}
			full, err := Compute(m, pp, dp, req, Options{Connector: c})
			if err != nil {
				t.Fatal(err)
			}
			if full.Rejection != nil {
				t.Fatal(full.Rejection)
			}
			count, err := Compute(m, pp, dp, req, Options{Connector: c, Output: CountPairs})
			if err != nil {
				t.Fatal(err)
			}
			if count.Rejection != nil {
				t.Fatal(count.Rejection)
			}
			if count.Descs != full.Descs || count.Path != full.Path || count.Descs == 0 || len(count.RankPairs) != len(full.RankPairs) {
				t.Fatalf("count-only: %d descriptors on %s in %d rank pairs; full: %d on %s in %d", count.Descs, count.Path, len(count.RankPairs), full.Descs, full.Path, len(full.RankPairs))
			}
			if fmt.Sprint(count.Handshake.Checks) != fmt.Sprint(full.Handshake.Checks) || count.Handshake.Matched != full.Handshake.Matched {
				t.Errorf("handshake checks: count-only %v, full %v", count.Handshake.Checks, full.Handshake.Checks)
			}
			for i, rp := range count.RankPairs {
				f := full.RankPairs[i]
				if rp.P != f.P || rp.D != f.D || rp.Descs != f.Descs || rp.Op != f.Op || rp.Pairs != nil {
					t.Errorf("rank pair %d: %d->%d %s %d descs; full %d->%d %s %d", i, rp.P, rp.D, rp.Op, rp.Descs, f.P, f.D, f.Op, f.Descs)
				}
			}
			t.Logf("%s: %d descriptors, path %s", tc.name, full.Descs, full.Path)
		})
	}
}

// TestTalliedInBatchesMatchesKeptPairs: a transfer whose pairs are not
// kept is tallied as it is made (on vLLM's path foldAt pairs at a time, on
// the group-pair path job by job, one job's pairs in memory at once): a
// long prompt's pairs never all exist at once. Its totals — per rank pair
// descriptors, merged descriptors and bytes, and every group pair — equal
// those of the same transfer with every pair kept, and those recounted
// from the kept pairs by a plain walk (recountGroupPairs, MergedCount).
// The vLLM-path prompts are long enough that runs and group pairs cross
// the batches' edges.
func TestTalliedInBatchesMatchesKeptPairs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		model  string
		p, d   plan.Engine
		prompt int
	}{
		{"Qwen3-0.6B vLLM path TP1->1", "Qwen__Qwen3-0.6B", plan.Engine{TensorParallelSize: 1, MaxModelLen: 1 << 18}, plan.Engine{TensorParallelSize: 1, MaxModelLen: 1 << 18}, 200_000},
		{"gpt-oss vLLM path TP2->4", "openai__gpt-oss-20b", plan.Engine{TensorParallelSize: 2, MaxModelLen: 1 << 17}, plan.Engine{TensorParallelSize: 4, MaxModelLen: 1 << 17}, 100_003},
		{"gpt-oss group pairs TP2->4", "openai__gpt-oss-20b", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 1 << 17},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, BlockSize: 48, MaxModelLen: 1 << 17}, 30_011},
		{"qwen3.6 group pairs TP2->4", "Qwen__Qwen3.6-35B-A3B-FP8", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 1 << 17},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, MaxModelLen: 1 << 17}, 50_000},
		{"gpt-oss group pairs TP2->2 merging", "openai__gpt-oss-20b", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, GroupSize: 3}, 20_000},
		{"gemma-3 sliding group pairs TP2->2", "google__gemma-3-1b-it", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, BlockSize: 32}, 7_001},
		{"Qwen3-0.6B group pairs TP2->2 blocks 16/32", "Qwen__Qwen3-0.6B", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, BlockSize: 32}, 5_000},
		{"nemotron state group pairs TP2->2", "nvidia__NVIDIA-Nemotron-Nano-9B-v2", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, GroupSize: 3}, 6_000},
		{"qwen group pairs TP4->1 blocks 16/64", "Qwen__Qwen3.6-35B-A3B-FP8", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, BlockSize: 16},
			plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 1, BlockSize: 64}, 9_999},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := modeltest.Load(t, tc.model)
			pp, err1 := plan.New(m, tc.p)
			dp, err2 := plan.New(m, tc.d)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			req := Request{PromptTokens: tc.prompt}
			kept, err := Compute(m, pp, dp, req, Options{Output: KeepPairs})
			if err != nil {
				t.Fatal(err)
			}
			if kept.Rejection != nil {
				t.Fatal(kept.Rejection)
			}
			folded, err := Compute(m, pp, dp, req, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if folded.Rejection != nil {
				t.Fatal(folded.Rejection)
			}
			most := 0
			for _, rp := range kept.RankPairs {
				most = max(most, len(rp.Pairs))
			}
			if kept.Path == GroupPairPath && kept.Merged == kept.Descs && strings.Contains(tc.name, "TP2->2") {
				t.Fatalf("%d descriptors, none merged: the case was chosen for runs NIXL merges", kept.Descs)
			}
			if kept.Path == VLLMPath && most < 2*foldAt {
				t.Fatalf("the largest rank pair has %d pairs: too few to be tallied in batches of %d", most, foldAt)
			}
			if folded.Descs != kept.Descs || folded.Merged != kept.Merged || folded.Bytes != kept.Bytes || folded.Path != kept.Path {
				t.Fatalf("in batches: %d descriptors, %d merged, %d bytes on %s; kept: %d, %d, %d on %s",
					folded.Descs, folded.Merged, folded.Bytes, folded.Path, kept.Descs, kept.Merged, kept.Bytes, kept.Path)
			}
			for i, rp := range folded.RankPairs {
				k := kept.RankPairs[i]
				if rp.P != k.P || rp.D != k.D || rp.Descs != k.Descs || rp.Merged != k.Merged || rp.Bytes != k.Bytes || rp.Pairs != nil {
					t.Errorf("rank pair %d->%d in batches: %d descs, %d merged, %d bytes; kept %d, %d, %d", rp.P, rp.D, rp.Descs, rp.Merged, rp.Bytes, k.Descs, k.Merged, k.Bytes)
				}
				if n := MergedCount(k.Pairs); n != k.Merged || len(k.Pairs) != k.Descs {
					t.Errorf("rank pair %d->%d kept: %d pairs, %d merged recounted; its totals %d, %d", k.P, k.D, len(k.Pairs), n, k.Descs, k.Merged)
				}
			}
			if fmt.Sprint(folded.GroupPairs) != fmt.Sprint(kept.GroupPairs) || len(kept.GroupPairs) == 0 {
				t.Errorf("group pairs in batches %v, kept %v", folded.GroupPairs, kept.GroupPairs)
			}
			if want := recountGroupPairs(kept); fmt.Sprint(kept.GroupPairs) != fmt.Sprint(want) {
				t.Errorf("group pairs %v; recounted from the kept pairs %v", kept.GroupPairs, want)
			}
			var bytes int64
			for _, rp := range kept.RankPairs {
				var b int64
				for _, p := range rp.Pairs {
					b += p.Len
				}
				if b != rp.Bytes {
					t.Errorf("rank pair %d->%d: %d bytes; its pairs hold %d", rp.P, rp.D, rp.Bytes, b)
				}
				bytes += b
			}
			if bytes != kept.Bytes {
				t.Errorf("%d bytes; the pairs hold %d", kept.Bytes, bytes)
			}
			t.Logf("%d descriptors (%d merged) in %d rank pairs, the largest %d pairs", kept.Descs, kept.Merged, len(kept.RankPairs), most)
		})
	}
}

// recountGroupPairs totals x's kept pairs per (P group, D group) with a
// plain walk: descriptors, bytes, distinct layers, and the kind of the D
// layer of the first pair (rank pairs in order), ordered by P group then
// D group.
func recountGroupPairs(x *Transfer) []GroupPair {
	byKey := map[[2]int]*GroupPair{}
	layers := map[[2]int]map[string]bool{}
	var keys [][2]int
	for _, rp := range x.RankPairs {
		for _, p := range rp.Pairs {
			k := [2]int{p.PGroup, p.DGroup}
			g := byKey[k]
			if g == nil {
				reg, _ := x.DRegs[rp.D].Layer(p.Layer)
				g = &GroupPair{PGroup: p.PGroup, DGroup: p.DGroup, Kind: string(reg.Kind)}
				byKey[k], layers[k] = g, map[string]bool{}
				keys = append(keys, k)
			}
			g.Descs++
			g.Bytes += p.Len
			if p.Layer != "" {
				layers[k][p.Layer] = true
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i][0] < keys[j][0] || keys[i][0] == keys[j][0] && keys[i][1] < keys[j][1]
	})
	out := []GroupPair{}
	for _, k := range keys {
		g := byKey[k]
		g.Layers = len(layers[k])
		out = append(out, *g)
	}
	return out
}

// TestPreparedSharesRegistrations: a prepared deployment registers both
// sides, shakes hands and lays out the group pairs once, and every
// request's transfer reads them; each
// transfer is what Compute makes afresh for the same plans and request
// (registrations, handshake, pairs, totals), on vLLM's path and on the
// group-pair path, pull and push, and a later request leaves an earlier
// transfer as it was.
func TestPreparedSharesRegistrations(t *testing.T) {
	m := seedModel(t)
	for _, tc := range []struct {
		name      string
		p, d      plan.Engine
		plans     PlanChoice
		connector string
	}{
		{"own plans TP2->4 (group pairs)", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7}, IndependentPlans, "nixl"},
		{"invariant plans TP2->4", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7}, InvariantPlans, "nixl"},
		{"push TP4->2", plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, BlockSize: 32}, IndependentPlans, "nixl-push"},
		{"release TP4->4 (vLLM's path)", plan.Engine{VLLMVersion: "0.31.0", TensorParallelSize: 4, NumSpeculativeTokens: 7}, plan.Engine{VLLMVersion: "0.31.0", TensorParallelSize: 4, NumSpeculativeTokens: 7}, IndependentPlans, "nixl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConnector(tc.connector)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Prepare(Setup{Model: m, P: tc.p, D: tc.d, Connector: c, Plans: tc.plans})
			if err != nil {
				t.Fatal(err)
			}
			pp, dp := r.UsedPlans()
			first, err := r.Compute(Request{PromptTokens: 5000}, true)
			if err != nil || first.Rejection != nil {
				t.Fatal(err, first.Rejection)
			}
			before, _ := json.Marshal(first)
			fresh, err := Compute(m, pp, dp, Request{PromptTokens: 5000}, Options{Connector: c, Output: KeepPairs})
			if err != nil {
				t.Fatal(err)
			}
			// The prepared transfer carries the deployment's notes besides.
			fresh.Logs, fresh.Inferred = first.Logs, first.Inferred
			want, _ := json.Marshal(fresh)
			if string(before) != string(want) || !reflect.DeepEqual(first.PRegs, fresh.PRegs) || !reflect.DeepEqual(first.DRegs, fresh.DRegs) {
				t.Fatalf("prepared transfer differs from a fresh one:\n%.600s\n%.600s", before, want)
			}
			second, err := r.Compute(Request{PromptTokens: 777, PrefixHitTokens: 0}, true)
			if err != nil || second.Rejection != nil {
				t.Fatal(err, second.Rejection)
			}
			if first.PRegs[0] != second.PRegs[0] || first.DRegs[0] != second.DRegs[0] || first.Handshake != second.Handshake {
				t.Error("the two requests' transfers do not share the deployment's registrations and handshake")
			}
			if (r.pairing != nil) != (first.Path == GroupPairPath) {
				t.Errorf("a %s transfer; the deployment's group-pair layout made: %v", first.Path, r.pairing != nil)
			}
			after, _ := json.Marshal(first)
			if string(after) != string(before) || second.Descs >= first.Descs {
				t.Errorf("a later request changed an earlier transfer (or has as many descriptors: %d, %d)", second.Descs, first.Descs)
			}
			t.Logf("%s: %s, %d descriptors", tc.name, first.Path, first.Descs)
		})
	}
}

// TestWorkersWriteWhatOneWrites: a long transfer's rank pairs written by
// several workers (one per core, up to one per rank pair) are the pairs,
// totals and group pairs one worker writes, pull and push; pairs only
// tallied (one worker at any GOMAXPROCS) come to the same totals.
func TestWorkersWriteWhatOneWrites(t *testing.T) {
	seed := seedModel(t)
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	for _, tc := range []struct {
		name      string
		m         *model.Model
		p, d      plan.Engine
		connector string
		plans     PlanChoice
		prompt    int
	}{
		{"Qwen3.6 + DFlash own plans TP2->4", seed, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, NumSpeculativeTokens: 7, MaxModelLen: 262144}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, NumSpeculativeTokens: 7, MaxModelLen: 262144}, "nixl", IndependentPlans, 200_000},
		{"gpt-oss TP4->2 block 32, push", gpt, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, MaxModelLen: 1 << 17}, plan.Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, BlockSize: 32, MaxModelLen: 1 << 17}, "nixl-push", IndependentPlans, 30_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := ParseConnector(tc.connector)
			r, err := Prepare(Setup{Model: tc.m, P: tc.p, D: tc.d, Connector: c, Plans: tc.plans})
			if err != nil {
				t.Fatal(err)
			}
			req := Request{PromptTokens: tc.prompt}
			compute := func(procs int, keep bool) []byte {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				x, err := r.Compute(req, keep)
				if err != nil {
					t.Fatal(err)
				}
				if x.Rejection != nil {
					t.Fatal(x.Rejection)
				}
				if x.Descs < parallelPairs || len(x.RankPairs) < 2 || x.Path != GroupPairPath {
					t.Fatalf("%d descriptors in %d rank pairs on %s: too few for several workers, or not the group-pair path", x.Descs, len(x.RankPairs), x.Path)
				}
				out, _ := json.Marshal(x)
				t.Logf("GOMAXPROCS %d, pairs kept %v: %d descriptors in %d rank pairs", procs, keep, x.Descs, len(x.RankPairs))
				return out
			}
			for _, keep := range []bool{true, false} {
				one, many := compute(1, keep), compute(4, keep)
				if string(one) != string(many) {
					t.Errorf("kept %v: four workers wrote %d bytes of JSON, one %d, not the same", keep, len(many), len(one))
				}
			}
		})
	}
}
