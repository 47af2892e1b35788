package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model"
)

// TestModelsMarksFamilies: kvscope models lists every bundled model with
// its model type and status, then the family table with the refused
// families' layer kinds and the rule for unknown model types; --json and
// GET /api/families print the same listing.
func TestModelsMarksFamilies(t *testing.T) {
	var text bytes.Buffer
	if err := runModels(nil, &text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Qwen/Qwen3-235B-A22B-Instruct-2507",
		"qwen3_moe",
		"model families:",
		"refused   DeepSeek-V4 / V4.1",
		"compressed sparse attention",
		"KDA (Kimi Delta Attention)",
		"modelled  Qwen3.5 / Qwen3.6 / Qwen3.8",
		"moonshotai/Kimi-Linear-48B-A3B-Instruct",
		"unknown   any other model type",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("kvscope models lacks %q:\n%s", want, text.String())
		}
	}
	var js bytes.Buffer
	if err := runModels([]string{"--json"}, &js); err != nil {
		t.Fatal(err)
	}
	var l model.Listing
	if err := json.Unmarshal(js.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Models) != len(catalog().Names()) || len(l.Families) == 0 || l.Unknown == "" {
		t.Errorf("--json: %d models of %d, %d families, unknown %q", len(l.Models), len(catalog().Names()), len(l.Families), l.Unknown)
	}
	refused := 0
	for _, f := range l.Families {
		if f.Status == model.Refused {
			refused++
		}
	}
	if refused < 5 {
		t.Errorf("%d refused families, want DeepSeek-V4, DSA, GLM-5.3-Flash, Kimi-Linear, Qwen3.8-Flash-Next, MiMo", refused)
	}
	srv := httptest.NewServer(newMux(catalog(), serveOptions{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/families")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, js.Bytes()) {
		t.Errorf("GET /api/families: %d, and not what kvscope models --json prints:\n%s", resp.StatusCode, body)
	}
}

// TestAPIRefusesUnmodelledLayerKinds: an inline config of a family kvscope
// refuses is a 400 naming the model type, the layer kind and the key, as
// the CLI's error is; a Kimi-Linear plan (KDA + MLA) is a 200.
func TestAPIRefusesUnmodelledLayerKinds(t *testing.T) {
	srv := httptest.NewServer(newMux(catalog(), serveOptions{}))
	defer srv.Close()
	dsv4, err := os.ReadFile(filepath.Join("..", "testdata", "models", "nvidia__DeepSeek-V4-Flash-NVFP4.json"))
	if err != nil {
		t.Fatal(err)
	}
	code, out := postJSON(t, srv, "/api/plan", map[string]any{"config": json.RawMessage(dsv4), "engine": map[string]any{"tensor_parallel_size": 4}})
	msg, _ := out["error"].(string)
	if code != 400 || !strings.Contains(msg, "model_type deepseek_v4, layer kind compressed sparse attention") || !strings.Contains(msg, "not modelled by kvscope") {
		t.Errorf("DeepSeek-V4 config: %d %v", code, out)
	}
	code, out = postJSON(t, srv, "/api/plan", map[string]any{"model": "moonshotai/Kimi-Linear-48B-A3B-Instruct", "engine": map[string]any{"tensor_parallel_size": 2, "max_model_len": 32768}})
	if code != 200 {
		t.Errorf("Kimi-Linear plan: %d %v", code, out["error"])
	}
	// MiMo-V2-Flash plans, but its K and V heads of different sizes have no
	// descriptor geometry: a transfer is a 400 that says why, not a crash.
	mimo, err := os.ReadFile(filepath.Join("..", "testdata", "models", "DERIVED__MiMo-V2-Flash.json"))
	if err != nil {
		t.Fatal(err)
	}
	code, out = postJSON(t, srv, "/api/plan", map[string]any{"config": json.RawMessage(mimo), "engine": map[string]any{"tensor_parallel_size": 4, "max_model_len": 32768}})
	if code != 200 {
		t.Errorf("MiMo-V2-Flash plan: %d %v", code, out["error"])
	}
	for _, path := range []string{"/api/pd", "/api/oracle"} {
		code, out = postJSON(t, srv, path, map[string]any{"config": json.RawMessage(mimo), "p": map[string]any{"tensor_parallel_size": 4, "max_model_len": 32768}, "d": map[string]any{"tensor_parallel_size": 4, "max_model_len": 32768}})
		if msg, _ := out["error"].(string); code != 400 || !strings.Contains(msg, "DiffKV") {
			t.Errorf("MiMo-V2-Flash %s: %d %v", path, code, out)
		}
	}
}
