package api

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readLog(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "vllm-logs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPDFromLogs: /api/pd with p_log and d_log answers as kvscope pd
// --p-log --d-log --json: each side's check, the transfer and the
// preflight's verdict. Two Qwen3.6-35B-A3B logs of 0.24.0 move on vLLM's
// path (Mamba prefix caching moves from 0.23.0, #42554); the same
// engines sent as p and d give the same descriptors. The 0.20.0 log
// against 0.20.2's is refused on the version (the compatibility hash
// takes it). Bad bodies name the field.
func TestPDFromLogs(t *testing.T) {
	_, srv := newTestServer(t, DefaultLimits())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := func(v map[string]any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	p, d := readLog(t, "club3090-612-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"), readLog(t, "club3090-652-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log")
	code, _, out, err := post(t, ctx, srv.URL+"/api/pd", body(map[string]any{"p_log": p, "d_log": d, "prompt_tokens": 1000}))
	if err != nil || code != 200 {
		t.Fatalf("%d %v %v", code, err, out)
	}
	pd := out["pd"].(map[string]any)
	pf := pd["preflight"].(map[string]any)
	tr := pd["transfer"].(map[string]any)
	if pf["verdict"] != "ok" || out["p_log"].(map[string]any)["verdict"] != "match" || tr["path"] != "vllm" || !strings.Contains(pf["sentence"].(string), "will transfer") {
		t.Fatalf("0.24.0 pair: preflight %v, p_log verdict %v, path %v", pf, out["p_log"].(map[string]any)["verdict"], tr["path"])
	}
	inv := pd["invariant"].(map[string]any)
	same := body(map[string]any{"model": "Qwen/Qwen3.6-35B-A3B", "p": inv["p_independent"].(map[string]any)["engine"], "d": inv["d_independent"].(map[string]any)["engine"], "prompt_tokens": 1000})
	code, _, flags, err := post(t, ctx, srv.URL+"/api/pd", same)
	if err != nil || code != 200 {
		t.Fatalf("the same engines as p and d: %d %v %v", code, err, flags)
	}
	if got, want := flags["transfer"].(map[string]any)["descs"], tr["descs"]; got != want {
		t.Errorf("from the logs %v descriptors, from the engines %v", want, got)
	}

	code, _, out, _ = post(t, ctx, srv.URL+"/api/pd", body(map[string]any{"p_log": readLog(t, "qwen36-35b-a3b-nvfp4-v0.20.0-262k.log"), "d_log": readLog(t, "qwen36-35b-a3b-nvfp4-mtp2-v0.20.2-262k.log")}))
	if code != 200 {
		t.Fatalf("0.20.0 against 0.20.2: %d %v", code, out)
	}
	rej, _ := out["pd"].(map[string]any)["preflight"].(map[string]any)["rejection"].(map[string]any)
	if rej["rule"] != "vllm-version" || rej["when"] == "" {
		t.Errorf("0.20.0 against 0.20.2: rejection %v", rej)
	}

	for _, tt := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"one log", map[string]any{"p_log": p}, "d_log"},
		{"logs and engines", map[string]any{"p_log": p, "d_log": d, "p": map[string]any{"tensor_parallel_size": 2}}, "without p and d"},
		{"not a log", map[string]any{"p_log": p, "d_log": "hello"}, "d_log"},
		{"two models", map[string]any{"p_log": p, "d_log": readLog(t, "llama31-8b-l4-v0.11.0.log")}, "must serve one model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, out, err := post(t, ctx, srv.URL+"/api/pd", body(tt.body))
			if err != nil || code != 400 || !strings.Contains(out["error"].(string), tt.want) {
				t.Errorf("%d %v %v: want a 400 naming %q", code, err, out, tt.want)
			}
		})
	}
}
