package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	kvapp "github.com/kvscope/kvscope/app"
)

// TestFooterCommandReproducesTheView: the command the app's footer shows
// prints the numbers the view shows. For several views' settings (the
// default deployment, whose view uses 1,024 prompt tokens against the
// CLI's 4,096; a push with a prefix hit on a release; a blocks-first
// layout with the independent plans), kvscope pd with the footer's
// arguments gives the view's KV cache tokens, descriptors and bytes.
func TestFooterCommandReproducesTheView(t *testing.T) {
	for _, query := range []string{
		"",
		"model=openai%2Fgpt-oss-20b&vllm-version=0.24.0&p-tensor-parallel-size=1&d-tensor-parallel-size=2&connector=nixl-push&prompt-tokens=2048&prefix-hit-tokens=512&view=flow",
		"model=Qwen%2FQwen3-0.6B&vllm-version=0.31.0&d-tensor-parallel-size=2&layout=blocks-first&plans=independent&prompt-tokens=300&view=pd",
	} {
		t.Run(query, func(t *testing.T) {
			q, _ := url.ParseQuery(query)
			s, errs := kvapp.ParseQuery(q)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			r := kvapp.Compute(s, catalog(), nil)
			if !r.OK() {
				t.Fatalf("the view does not compute: %v %s", r.Errors, r.Err)
			}
			r.EnsureTransfer(nil)
			cmd := s.CLI("pd")
			args := strings.Fields(cmd)
			if args[0] != "kvscope" || args[1] != "pd" {
				t.Fatalf("footer %q", cmd)
			}
			code, out, stderr := runCLI(t, append(args[1:], "--json")...)
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", cmd, code, stderr)
			}
			var got struct {
				Invariant struct {
					P struct {
						KVCacheTokens int64 `json:"kv_cache_tokens"`
					} `json:"p_independent"`
				} `json:"invariant"`
				Transfer struct {
					Descs int   `json:"descs"`
					Bytes int64 `json:"bytes"`
				} `json:"transfer"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			view := r.PD.Transfer
			if got.Invariant.P.KVCacheTokens != r.PD.Invariant.PIndependent.KVCacheTokens || got.Transfer.Descs != view.Descs || got.Transfer.Bytes != view.Bytes {
				t.Errorf("%s\nprints %d KV tokens, %d descriptors, %d B; the view shows %d, %d, %d", cmd, got.Invariant.P.KVCacheTokens, got.Transfer.Descs, got.Transfer.Bytes,
					r.PD.Invariant.PIndependent.KVCacheTokens, view.Descs, view.Bytes)
			}
		})
	}
}
