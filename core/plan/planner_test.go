package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/model/modeltest"
	"github.com/kvscope/kvscope/core/vllm"
)

// plannerModels is every bundled config, the Qwen3.6 seed with its DFlash
// drafter, and each model that has MTP layers with them attached.
func plannerModels(t testing.TB) []*model.Model {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(modeltest.Dir(), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no bundled models in %s: %v", modeltest.Dir(), err)
	}
	var out []*model.Model
	for _, f := range files {
		m := modeltest.Load(t, strings.TrimSuffix(filepath.Base(f), ".json"))
		out = append(out, m)
		if len(m.MTPLayers) > 0 {
			mtp, err := m.WithMTP()
			if err != nil {
				t.Fatal(err)
			}
			mtp.Name += "+mtp"
			out = append(out, mtp)
		}
	}
	seed := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	seed.Name = "Qwen3.6-35B-A3B+DFlash"
	return append(out, seed)
}

// engineGrid is the engines a shared Planner is held against New (a
// fresh Planner each call) on: every tensor-parallel size, block size, KV cache dtype and version
// of the lists, each with the other settings drawn in turn from theirs
// (the draw differs per model, so that across models every pair of
// values meets).
func engineGrid(seed int) []Engine {
	tps := []int{1, 2, 4, 8}
	blockSizes := []int{0, 16, 32, 64, 48}
	dtypes := []string{"", "fp8", "bfloat16"}
	versions := []string{"0.10.0", "0.11.0", "0.12.0", "0.14.0", "0.16.0", "0.17.0", "0.19.0", "0.21.0", "0.27.0", "0.29.0", "", vllm.Main, vllm.Branch}
	selectors := []Selector{"", Classic, Min, Balanced, PaddingBytes}
	minLayers := []int{0, 1, 2, 5}
	groupSizes := []int{0, 0, 0, 4}
	mnbts := []int{0, 2048, 32768}
	maxLens := []int{0, 4096, 262144}
	specTokens := []int{0, 1, 3, 7}
	modes := []string{"", "none", "align", "all"}
	caching := []string{"", "on", "off"}
	pps := []int{1, 1, 1, 2, 4}
	memories := []int64{0, 1 << 30, 8 << 30}
	overrides := []int{0, 0, 0, 0, 1000}
	merges := []BucketMerge{"", "", Strict, Loose}
	var out []Engine
	i := seed
	pick := func(n int) int { i = i*1103515245 + 12345; return (i >> 8 & 0x7fffffff) % n }
	for _, tp := range tps {
		for _, bs := range blockSizes {
			for _, dt := range dtypes {
				for _, v := range versions {
					out = append(out, Engine{
						VLLMVersion: v, TensorParallelSize: tp, BlockSize: bs, KVCacheDType: dt,
						PipelineParallelSize: pps[pick(len(pps))],
						MaxModelLen:          maxLens[pick(len(maxLens))],
						MaxNumBatchedTokens:  mnbts[pick(len(mnbts))],
						KVCacheMemoryBytes:   memories[pick(len(memories))],
						NumSpeculativeTokens: specTokens[pick(len(specTokens))],
						Selector:             selectors[pick(len(selectors))],
						MinGroupLayers:       minLayers[pick(len(minLayers))],
						GroupSize:            groupSizes[pick(len(groupSizes))],
						BucketMerge:          merges[pick(len(merges))],
						DisableHybrid:        pick(8) == 0,
						MambaCacheMode:       modes[pick(len(modes))],
						PrefixCaching:        caching[pick(len(caching))],
						NoAsyncScheduling:    pick(4) == 0,
						NumGPUBlocksOverride: overrides[pick(len(overrides))],
					})
				}
			}
		}
	}
	return out
}

// samePlan fails the test unless a shared Planner's outcome equals a fresh
// New's: the whole plan (unexported index included) and the error.
func samePlan(t *testing.T, what string, got *Plan, gotErr error, want *Plan, wantErr error) {
	t.Helper()
	if !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("%s: error %v, want %v", what, gotErr, wantErr)
	}
	if got == nil || want == nil {
		if got != want {
			t.Fatalf("%s: plan %v, want %v", what, got, want)
		}
		return
	}
	// A profile's rules hold their apply funcs, which DeepEqual never
	// finds equal: profiles compare by version and every exported field.
	// strs is where a Planner keeps the plan's strings: storage, whose
	// contents the exported slices hold.
	g, w := *got, *want
	g.Profile, w.Profile = vllm.Profile{}, vllm.Profile{}
	g.strs, w.strs = nil, nil
	if !reflect.DeepEqual(&g, &w) {
		t.Fatalf("%s: plans differ at %s", what, firstDiff(reflect.ValueOf(&g), reflect.ValueOf(&w), "plan"))
	}
	gp, err := json.Marshal(got.Profile)
	if err != nil {
		t.Fatal(err)
	}
	wp, err := json.Marshal(want.Profile)
	if err != nil {
		t.Fatal(err)
	}
	if got.Profile.Version != want.Profile.Version || !bytes.Equal(gp, wp) {
		t.Fatalf("%s: profile %v %s, want %v %s", what, got.Profile.Version, gp, want.Profile.Version, wp)
	}
}

// sameIgnoringProfile reports whether two plans are equal but for their
// profiles (which samePlan compares on its own).
func sameIgnoringProfile(a, b *Plan) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.Profile, y.Profile = vllm.Profile{}, vllm.Profile{}
	x.strs, y.strs = nil, nil
	return reflect.DeepEqual(&x, &y) && a.Profile.Name == b.Profile.Name
}

// firstDiff names the first place where a and b differ, as DeepEqual
// compares them, with both values there.
func firstDiff(a, b reflect.Value, path string) string {
	if a.IsValid() != b.IsValid() || a.IsValid() && a.Type() != b.Type() {
		return path + ": different types"
	}
	if !a.IsValid() {
		return ""
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return fmt.Sprintf("%s: nil %v, want nil %v", path, a.IsNil(), b.IsNil())
			}
			return ""
		}
		return firstDiff(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if d := firstDiff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil %v, want nil %v", path, a.IsNil(), b.IsNil())
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: length %d, want %d", path, a.Len(), b.Len())
		}
		for i := 0; i < a.Len(); i++ {
			if d := firstDiff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Func:
		if a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: nil func %v, want %v", path, a.IsNil(), b.IsNil())
		}
		return ""
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return fmt.Sprintf("%s: %d entries (nil %v), want %d (nil %v)", path, a.Len(), a.IsNil(), b.Len(), b.IsNil())
		}
		for _, k := range a.MapKeys() {
			if d := firstDiff(a.MapIndex(k), b.MapIndex(k), fmt.Sprintf("%s[%v]", path, k)); d != "" {
				return d
			}
		}
		return ""
	}
	if ae, be := fmt.Sprint(a), fmt.Sprint(b); ae != be {
		return fmt.Sprintf("%s: %s, want %s", path, ae, be)
	}
	return ""
}

func TestPlannerMatchesNewOnEveryBundledModel(t *testing.T) {
	for mi, m := range plannerModels(t) {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			pl, err := NewPlanner(m)
			if err != nil {
				t.Fatal(err)
			}
			type kept struct {
				e Engine
				p *Plan
			}
			var keep []kept
			into := new(Plan) // every engine of the grid planned into it in turn
			grid := engineGrid(mi + 1)
			if testing.Short() {
				grid = grid[:len(grid)/8]
			}
			planned, refused, failed := 0, 0, 0
			for _, e := range grid {
				want, wantErr := New(m, e)
				var re *RefusalError
				switch {
				case errors.As(wantErr, &re):
					refused++
				case wantErr != nil:
					failed++
				}
				got, gotErr := pl.Plan(e)
				what := fmt.Sprintf("%+v", e)
				samePlan(t, what, got, gotErr, want, wantErr)
				switch intoErr := pl.PlanInto(e, into); {
				case want != nil:
					samePlan(t, "PlanInto "+what, into, intoErr, want, wantErr)
				case !reflect.DeepEqual(intoErr, wantErr):
					t.Fatalf("%s: PlanInto error %v, want %v", what, intoErr, wantErr)
				}
				sum, sumErr := pl.Summary(e)
				if !reflect.DeepEqual(sumErr, wantErr) {
					t.Fatalf("%s: Summary error %v, want %v", what, sumErr, wantErr)
				}
				if want != nil && sum != want.Summary() {
					t.Fatalf("%s: Summary\n %+v\nwant %+v", what, sum, want.Summary())
				}
				if got != nil {
					planned++
					if len(keep) < 64 {
						keep = append(keep, kept{e, got})
					}
				}
			}
			// Plans made early are still what they were after the rest of
			// the grid went through the same Planner.
			for _, k := range keep {
				want, wantErr := New(m, k.e)
				samePlan(t, "kept "+fmt.Sprintf("%+v", k.e), k.p, wantErr, want, wantErr)
			}
			t.Logf("%d engines: %d planned (%d of them refused to start), %d errors", len(grid), planned, refused, failed)
			if planned-refused == 0 {
				t.Errorf("no engine of the grid plans %s", m.Name)
			}
		})
	}
}

func TestPlannerPlansAreTheCallersOwn(t *testing.T) {
	m := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	pl, err := NewPlanner(m)
	if err != nil {
		t.Fatal(err)
	}
	e := Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7, NumGPUBlocksOverride: 20000}
	first, err := pl.Plan(e)
	if err != nil {
		t.Fatal(err)
	}
	// Scribble over everything a caller owns.
	for i := range first.Layers {
		first.Layers[i].Name, first.Layers[i].Group = "scribbled", -1
	}
	for i := range first.Groups {
		first.Groups[i].Layers[0] = "scribbled"
		first.Groups[i].Layers = append(first.Groups[i].Layers, "appended")
	}
	first.Logs[0], first.Notes[0], first.Stages[0].NumBlocks = "scribbled", "scribbled", -1
	first.InferredReasons = append(first.InferredReasons[:0], "scribbled")
	first.Alignment.AttnBlockSize = -1
	first.Warnings = append(first.Warnings, "scribbled")

	second, err := pl.Plan(e)
	want, wantErr := New(m, e)
	samePlan(t, "after scribbling", second, err, want, wantErr)
	if l, ok := second.LayerByName("draft.L0"); !ok || l.Name != "draft.L0" {
		t.Errorf("LayerByName(draft.L0) = %+v, %v", l, ok)
	}
}

func TestPlannerIsSafeForConcurrentUse(t *testing.T) {
	m := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	pl, err := NewPlanner(m)
	if err != nil {
		t.Fatal(err)
	}
	grid := engineGrid(7)[:260]
	type outcome struct {
		p   *Plan
		err error
	}
	want := make([]outcome, len(grid))
	for i, e := range grid {
		want[i].p, want[i].err = New(m, e)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := range grid {
				i := (k*7 + w*31) % len(grid) // every worker in its own order
				got, err := pl.Plan(grid[i])
				if !reflect.DeepEqual(err, want[i].err) || !sameIgnoringProfile(got, want[i].p) {
					errs <- fmt.Sprintf("worker %d, engine %+v: plan differs", w, grid[i])
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}

func TestPlannerStartsOverWhenItsCacheIsFull(t *testing.T) {
	m := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	pl, err := NewPlanner(m)
	if err != nil {
		t.Fatal(err)
	}
	pl.maxRanks, pl.maxProfiles, pl.maxSplits = 3, 2, 2
	grid := engineGrid(11)[:120]
	for i := range grid {
		grid[i].GroupSize = i % 7 // many group sizes for one rank
	}
	kept := make([]*Plan, len(grid))
	for i, e := range grid {
		kept[i], _ = pl.Plan(e)
		if len(pl.ranks) > 3 || len(pl.profiles) > 2 {
			t.Fatalf("cache holds %d ranks and %d profiles, bounds 3 and 2", len(pl.ranks), len(pl.profiles))
		}
		for _, r := range pl.ranks {
			if len(r.splits) > 2 {
				t.Fatalf("a rank holds %d splits, bound 2", len(r.splits))
			}
		}
	}
	for i, e := range grid {
		want, wantErr := New(m, e)
		got, gotErr := pl.Plan(e)
		samePlan(t, fmt.Sprintf("%+v", e), got, gotErr, want, wantErr)
		samePlan(t, "kept "+fmt.Sprintf("%+v", e), kept[i], wantErr, want, wantErr)
	}
}

func TestPlannerErrors(t *testing.T) {
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	noKV := &model.Model{Name: "empty", DType: "bfloat16", MaxModelLen: 4096}
	tests := []struct {
		name   string
		m      *model.Model
		engine Engine
		want   any // the error type
	}{
		{"an unknown version names --vllm-version", gpt, Engine{VLLMVersion: "0.9.0"}, &FlagError{}},
		{"a TP that does not divide the heads names --tensor-parallel-size", gpt, Engine{TensorParallelSize: 3}, nil},
		{"a bad dtype names --kv-cache-dtype", gpt, Engine{KVCacheDType: "int3"}, nil},
		{"a model without KV layers says so", noKV, Engine{}, nil},
		{"too little memory is vLLM's refusal", gpt, Engine{KVCacheMemoryBytes: 1 << 20}, &RefusalError{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl, err := NewPlanner(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second time from the cache
				got, gotErr := pl.Plan(tt.engine)
				want, wantErr := New(tt.m, tt.engine)
				if wantErr == nil {
					t.Fatal("New plans it")
				}
				samePlan(t, tt.name, got, gotErr, want, wantErr)
				if _, err := pl.Summary(tt.engine); !reflect.DeepEqual(err, wantErr) {
					t.Fatalf("Summary error %v, want %v", err, wantErr)
				}
				switch w := tt.want.(type) {
				case *FlagError:
					if !errors.As(gotErr, &w) {
						t.Errorf("error %T, want %T", gotErr, w)
					}
				case *RefusalError:
					if !errors.As(gotErr, &w) || got == nil {
						t.Errorf("error %T with plan %v, want a refusal with its plan", gotErr, got != nil)
					}
				}
			}
		})
	}
	if _, err := NewPlanner(nil); err == nil {
		t.Error("NewPlanner(nil) has no error")
	}
}

func TestPlannerSummaryAllocatesNothing(t *testing.T) {
	seed := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	gpt := modeltest.Load(t, "openai__gpt-oss-20b")
	tests := []struct {
		name string
		m    *model.Model
		e    Engine
	}{
		{"qwen3.6+dflash tp4", seed, Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 4, MaxModelLen: 262144, NumSpeculativeTokens: 7}},
		{"qwen3.6+dflash pp2 classic", seed, Engine{TensorParallelSize: 2, PipelineParallelSize: 2, Selector: Classic, MaxModelLen: 131072}},
		{"gpt-oss-20b tp1", gpt, Engine{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl, err := NewPlanner(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pl.Summary(tt.e); err != nil { // fills the cache
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(100, func() { _, _ = pl.Summary(tt.e) }); n != 0 {
				t.Errorf("Summary allocates %v times per call", n)
			}
		})
	}
}

// TestPlannerForgetsRanks: after ForgetRanks a Planner plans as before
// (every field, against New), and a plan handed out before is
// untouched by the plans after.
func TestPlannerForgetsRanks(t *testing.T) {
	m := withDraft(t, "Qwen__Qwen3.6-35B-A3B", "z-lab__Qwen3.6-35B-A3B-DFlash")
	pl, err := NewPlanner(m)
	if err != nil {
		t.Fatal(err)
	}
	e := Engine{VLLMVersion: vllm.Branch, TensorParallelSize: 2, MaxModelLen: 262144, NumSpeculativeTokens: 7}
	first, err := pl.Plan(e)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := json.Marshal(first)
	for _, bs := range []int{0, 64, 592} {
		pl.ForgetRanks()
		e.BlockSize = bs
		got, gotErr := pl.Plan(e)
		want, wantErr := New(m, e)
		samePlan(t, fmt.Sprintf("block size %d after ForgetRanks", bs), got, gotErr, want, wantErr)
	}
	if again, _ := json.Marshal(first); string(again) != string(kept) {
		t.Errorf("a plan handed out before ForgetRanks changed")
	}
}
