package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// qwenTune is the deployment: Qwen3.6-35B-A3B-FP8 with its DFlash
// drafter, P TP2 -> D TP4, on the group-pair profile.
var qwenTune = []string{"--model", "Qwen__Qwen3.6-35B-A3B-FP8", "--draft", "z-lab__Qwen3.6-35B-A3B-DFlash", "--vllm-version", "pr58207",
	"--p-tensor-parallel-size", "2", "--d-tensor-parallel-size", "4", "--num-speculative-tokens", "7"}

// TestTuneNamesWhatPDAdvises: kvscope tune names the D block size whose
// pages divide P's, and it is the --block-size kvscope pd advises for the
// same deployment; --json carries it with the vllm serve lines.
func TestTuneNamesWhatPDAdvises(t *testing.T) {
	code, out, errs := runCLI(t, append([]string{"pd"}, qwenTune...)...)
	if code != 0 || !strings.Contains(out, "--block-size 592 on both engines makes them divide") {
		t.Fatalf("pd (exit %d): %s %s", code, out, errs)
	}
	code, out, errs = runCLI(t, append([]string{"tune"}, qwenTune...)...)
	if code != 0 || !strings.Contains(out, "pages divide: D --block-size 592 (planned 592; P 592) with TP 2:4") {
		t.Fatalf("tune (exit %d): %s %s", code, out, errs)
	}
	code, out, errs = runCLI(t, append([]string{"tune", "--json", "--top", "3"}, qwenTune...)...)
	if code != 0 {
		t.Fatalf("tune --json (exit %d): %s", code, errs)
	}
	var r struct {
		Candidates int `json:"candidates"`
		Feasible   int `json:"feasible"`
		Top        []struct {
			DServe string `json:"d_vllm_serve"`
		} `json:"top"`
		Dividing struct {
			DBlock      int    `json:"d_block_size_planned"`
			PagesDivide bool   `json:"pages_divide"`
			DServe      string `json:"d_vllm_serve"`
		} `json:"best_pages_divide"`
		Inferred []string `json:"inferred"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Candidates != 65 || r.Feasible == 0 || len(r.Top) != 3 || r.Dividing.DBlock != 592 || !r.Dividing.PagesDivide ||
		!strings.Contains(r.Dividing.DServe, "vllm serve Qwen/Qwen3.6-35B-A3B-FP8 --tensor-parallel-size 4 --block-size 592") || len(r.Inferred) == 0 {
		t.Errorf("tune --json: %+v", r)
	}
}

// TestTuneRefusesBadRanges: a range kvscope tune cannot take exits 2 with
// one line naming the flag and the value.
func TestTuneRefusesBadRanges(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--block-sizes", ""}, "--block-sizes is empty"},
		{[]string{"--tp-pairs", " "}, "--tp-pairs is empty"},
		{[]string{"--block-sizes", "512:16:16"}, `--block-sizes "512:16:16": 512:16 is inverted`},
		{[]string{"--block-sizes", "16:64:0"}, "step 0: must be positive"},
		{[]string{"--block-sizes", "16,4194304"}, "4194304 is outside 1..65536"},
		{[]string{"--tp-pairs", "2:3x"}, "--tp-pairs"},
		{[]string{"--mnbt", "-1"}, "--mnbt"}, {[]string{"--min-group-layers", "9999"}, "--min-group-layers"},
		{[]string{"--selectors", "fastest"}, `"fastest": want one of`},
		{[]string{"--kv-cache-dtypes", "int4"}, `--kv-cache-dtypes "int4"`},
		{[]string{"--objective", "vibes"}, `--objective "vibes"`},
		{[]string{"--objective", "mix", "--weights", "kv=x"}, "--weights"},
		{[]string{"--top", "0"}, ""}, // 0: the default
		{[]string{"--top", "5000"}, "--top"},
		{[]string{"--tp-pairs", "1,2,4,8x1,2,4,8", "--block-sizes", "1:8192:1", "--mnbt", "1024:8192:1024"}, "more than 100000 candidates"},
	} {
		code, _, errs := runCLI(t, append(append([]string{"tune"}, qwenTune...), tt.args...)...)
		if tt.want == "" {
			if code != 0 {
				t.Errorf("%v: exit %d: %s", tt.args, code, errs)
			}
			continue
		}
		if code != 2 || !strings.Contains(errs, tt.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q on one line", tt.args, code, errs, tt.want)
		}
	}
}

// TestAPITune: /api/tune runs the same search as the command; a bad range
// is a 400 naming its flag.
func TestAPITune(t *testing.T) {
	srv := httptest.NewServer(newMux(catalog(), serveOptions{Agent: "none"}))
	defer srv.Close()
	body := map[string]any{"model": "Qwen__Qwen3.6-35B-A3B-FP8", "draft": "z-lab__Qwen3.6-35B-A3B-DFlash", "vllm_version": "pr58207",
		"p": map[string]any{"tensor_parallel_size": 2, "num_speculative_tokens": 7}, "d": map[string]any{"tensor_parallel_size": 4, "num_speculative_tokens": 7},
		"ranges": map[string]any{"block_sizes": "0,304,592"}, "top": 2}
	code, res := postJSON(t, srv, "/api/tune", body)
	if code != http.StatusOK {
		t.Fatalf("%d: %v", code, res)
	}
	d, _ := res["best_pages_divide"].(map[string]any)
	if res["candidates"] != float64(3) || d == nil || d["d_block_size_planned"] != float64(592) {
		t.Errorf("result: candidates %v, best_pages_divide %v", res["candidates"], d)
	}
	body["ranges"] = map[string]any{"block_sizes": "64:16"}
	code, res = postJSON(t, srv, "/api/tune", body)
	if msg, _ := res["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "--block-sizes") {
		t.Errorf("a bad range: %d %v", code, res)
	}
}
