package app

import (
	"github.com/kvscope/kvscope/core/plan"
	"testing"

	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// TestRootComponent mounts the app outside a browser (go-app's test
// engine) and checks it computes the default view and answers shortcuts.
func TestRootComponent(t *testing.T) {
	e := app.NewTestEngine()
	root := &Root{Catalog: testCatalog()}
	if err := e.Load(root); err != nil {
		t.Fatal(err)
	}
	e.ConsumeAll()
	if root.result == nil {
		// The test engine does not navigate; do what OnNav does.
		root.settings = DefaultSettings()
		root.recompute(app.Context{})
	}
	if root.result == nil || !root.result.OK() {
		t.Fatalf("no result: %+v", root.result)
	}
	p, _ := root.result.Plans()
	if p.KVCacheTokens <= 0 {
		t.Errorf("P KV tokens %d", p.KVCacheTokens)
	}
	if err := app.Match(app.Div().ID("kvscope").Class("kvscope"), root.Render()); err != nil {
		t.Errorf("root element: %v", err)
	}
}

// TestUserWords: errors lose core's package prefixes, and keep the rest
// (a flag and its value) as written.
func TestUserWords(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"kvspec: --tensor-parallel-size 3: must divide num_attention_heads = 16", "--tensor-parallel-size 3: must divide num_attention_heads = 16"},
		{"xfer: --connector nixl-push: vLLM 0.20.0 has no NixlPushConnector", "--connector nixl-push: vLLM 0.20.0 has no NixlPushConnector"},
		{"D: plan: kvspec: x", "D: x"},
		{"model: bad JSON", "bad JSON"},
		{"max-model-len: 12: too small", "max-model-len: 12: too small"},
	} {
		if got := userWords(tt.in); got != tt.want {
			t.Errorf("userWords(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestExportName: exports name the model, the view and the TP pair.
func TestExportName(t *testing.T) {
	c := &Root{settings: DefaultSettings()}
	if got := c.exportName(); got != "kvscope-Qwen3.6-35B-A3B-plan-2to4" {
		t.Errorf("default: %q", got)
	}
	c.settings.View = "flow"
	c.settings.Model = "org/we ird:name"
	if got := c.exportName(); got != "kvscope-we-ird-name-flow-2to4" {
		t.Errorf("flow: %q", got)
	}
}

// TestBadValueOnOneSideKeepsTheOther: D at TP 3 (Qwen3-0.6B's 16
// attention heads do not divide by 3) is D's error; P still plans, on
// its own, and a message both sides share is listed once.
func TestBadValueOnOneSideKeepsTheOther(t *testing.T) {
	s := DefaultSettings()
	s.Model, s.Draft, s.Version = "Qwen/Qwen3-0.6B", "", "0.31.0"
	s.P = plan.Engine{TensorParallelSize: 1}
	s.D = plan.Engine{TensorParallelSize: 3}
	r := Compute(s, testCatalog(), nil)
	if r.OK() || r.Errors["d-tensor-parallel-size"] == "" || r.Alone[0] == nil || r.Alone[1] != nil {
		t.Fatalf("errors %v, alone %v", r.Errors, r.Alone)
	}
	if r.Alone[0].Engine.TensorParallelSize != 1 || r.Alone[0].KVCacheTokens == 0 {
		t.Errorf("P alone: %+v", r.Alone[0].Engine)
	}
	lines := errorLines(FieldErrors{"p-max-model-len": "refused", "d-max-model-len": "refused", "connector": "x"})
	if len(lines) != 2 || lines[1][0] != "d-max-model-len, p-max-model-len" {
		t.Errorf("lines %q", lines)
	}
}
