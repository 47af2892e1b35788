package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// hugeValue is a field value of 3.3 MB, as the hostile probe of issue 24
// sent for vllm_version (the body limit is 4 MiB).
var hugeValue = strings.Repeat("9", 3_300_000)

// maxErrorBody is what the test lets one error envelope weigh: the message
// quotes at most api.MaxQuoted bytes of a value; the longest honest one
// (an unknown model, the bundled names listed) is about 1.3 KiB.
const maxErrorBody = 2 << 10

// TestErrorsClipTheirInput: a multi-MB field value sent to each endpoint
// gets an error that still names the field (and the value's length), in
// a body of at most 2 KiB (issue 24: a 3.3 MB vllm_version answered a
// 6 MB error).
func TestErrorsClipTheirInput(t *testing.T) {
	h := newMux(catalog(), serveOptions{Addr: "127.0.0.1:8080", Agent: "embedded", Logf: t.Logf})
	big := hugeValue
	log, err := os.ReadFile("../testdata/vllm-logs/gpt-oss-120b-h100-fp8kv-v0.11.2.log")
	if err != nil {
		t.Fatal(err)
	}
	logJSON, _ := json.Marshal(string(log))
	tests := []struct {
		name, method, route, body string
		field                     string // what the message must name, as the JSON key or as the flag
	}{
		{"the request's vllm_version", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","vllm_version":"` + big + `"}`, "vllm_version"},
		{"an engine's vllm_version", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","engine":{"vllm_version":"` + big + `"}}`, "vllm_version"},
		{"an engine's string flag", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","engine":{"kv_cache_dtype":"` + big + `"}}`, "kv_cache_dtype"},
		{"an engine's number flag as digits", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","engine":{"tensor_parallel_size":` + big + `}}`, "tensor_parallel_size"},
		{"an engine's byte count", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","engine":{"kv_cache_memory_bytes":"` + big + `"}}`, "kv_cache_memory_bytes"},
		{"an unknown engine key", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","engine":{"` + big + `":1}}`, "unknown key"},
		{"an unknown top-level key", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","` + big + `":1}`, "unknown field"},
		{"the model name", "POST", "/api/plan", `{"model":"` + big + `"}`, "model"},
		{"the draft name", "POST", "/api/plan", `{"model":"Qwen/Qwen3-0.6B","draft":"` + big + `"}`, "draft"},
		{"an inline config's model_type", "POST", "/api/plan", `{"config":{"model_type":"` + big + `"}}`, "model"},
		{"the connector", "POST", "/api/pd", `{"model":"Qwen/Qwen3-0.6B","connector":"` + big + `"}`, "connector"},
		{"the prompt as digits", "POST", "/api/pd", `{"model":"Qwen/Qwen3-0.6B","prompt_tokens":` + big + `}`, "prompt_tokens"},
		{"P's block size", "POST", "/api/oracle", `{"model":"Qwen/Qwen3-0.6B","p":{"block_size":"` + big + `"}}`, "block_size"},
		{"the oracle's vllm_version", "POST", "/api/oracle", `{"model":"Qwen/Qwen3-0.6B","vllm_version":"` + big + `"}`, "vllm_version"},
		{"the objective", "POST", "/api/tune", `{"model":"Qwen/Qwen3-0.6B","objective":"` + big + `"}`, "objective"},
		{"the weights", "POST", "/api/tune", `{"model":"Qwen/Qwen3-0.6B","objective":"mix","weights":"` + big + `"}`, "weight"},
		{"a range", "POST", "/api/tune", `{"model":"Qwen/Qwen3-0.6B","ranges":{"tp_pairs":"` + big + `"}}`, "tp-pairs"},
		{"the log", "POST", "/api/check", `{"log":"` + big + `"}`, "log"},
		{"the check's model", "POST", "/api/check", `{"log":` + string(logJSON) + `,"model":"` + big + `"}`, "model"},
		{"the live query", "POST", "/api/live/run", `{"query":"model=` + big + `"}`, "model"},
		{"the flags' vllm_version", "GET", "/api/flags?vllm_version=" + big, "", "vllm_version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.route, strings.NewReader(tt.body))
			r.Host = "127.0.0.1:8080"
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			body := w.Body.String()
			var e struct {
				Status, Error string
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Status != "error" {
				t.Fatalf("%s %s: %d, not an error envelope (%v): %.300s", tt.method, tt.route, w.Code, err, body)
			}
			if w.Code < 400 || len(body) > maxErrorBody || !names(e.Error, tt.field) {
				t.Errorf("%s %s: %d, a %d-byte body (at most %d), naming %q? %.600s", tt.method, tt.route, w.Code, len(body), maxErrorBody, tt.field, e.Error)
			}
			if strings.Contains(e.Error, strings.Repeat("9", 300)) {
				t.Errorf("the message quotes more than 256 bytes of the value: %.600s", e.Error)
			}
			t.Logf("%d, %d bytes: %s", w.Code, len(body), e.Error)
		})
	}
}

// names reports whether msg names field, as its JSON key (kv_cache_dtype)
// or as its flag (--kv-cache-dtype).
func names(msg, field string) bool {
	return strings.Contains(msg, field) || strings.Contains(msg, strings.ReplaceAll(field, "_", "-"))
}
