package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/vllm"
)

// refusalRE is vLLM's start-up refusal as the engine prints it
// (_check_enough_kv_cache_memory): the max seq len asked, the GiB one
// request needs and the GiB available, and the estimated maximum model
// length.
var refusalRE = regexp.MustCompile(`To serve at least one request with the model's max seq len \((\d+)\), \(([0-9.]+) GiB KV cache is needed, which is larger than the available KV cache memory \(([0-9.]+) GiB\)\. Based on the available memory, the estimated maximum model length is (\d+)\.`)

// TestCLIRefusesLikeVLLM: when the KV cache memory of a worker cannot hold
// one request of --max-model-len, kvscope plan and kvscope pd exit 1 with
// vLLM's refusal and print no plan; the estimated maximum model length is
// the longest --max-model-len that then starts (one token more is refused
// again).
func TestCLIRefusesLikeVLLM(t *testing.T) {
	gpt := modelPath("openai__gpt-oss-20b")
	pd := []string{"pd", "--model", gpt, "--prompt-tokens", "100"}
	tests := []struct {
		name   string
		args   []string // everything but --max-model-len
		prefix string   // the side pd names before the refusal
	}{
		{"plan", []string{"plan", "--model", gpt, "--kv-cache-memory-bytes", "1GiB"}, "kvscope plan: vLLM "},
		{"pd, decode side", append(append([]string{}, pd...), "--d-kv-cache-memory-bytes", "1GiB"), "kvscope pd: D: vLLM "},
		{"pd, prefill side", append(append([]string{}, pd...), "--p-kv-cache-memory-bytes", "1GiB"), "kvscope pd: P: vLLM "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := func(maxLen int) (int, string, string) {
				return runCLI(t, append(append([]string{}, tt.args...), "--max-model-len", strconv.Itoa(maxLen))...)
			}
			code, out, errs := at(131072)
			if code != 1 {
				t.Fatalf("exit %d, want 1 (vLLM refuses to start); stderr %q", code, errs)
			}
			if out != "" {
				t.Errorf("a refused engine prints no plan, got %q", out)
			}
			if !strings.HasPrefix(errs, tt.prefix) || !strings.Contains(errs, "refuses to start") {
				t.Errorf("stderr %q does not start with %q and name the refusal", errs, tt.prefix)
			}
			m := refusalRE.FindStringSubmatch(errs)
			if m == nil {
				t.Fatalf("stderr lacks vLLM's refusal text: %q", errs)
			}
			needed, _ := strconv.ParseFloat(m[2], 64)
			avail, _ := strconv.ParseFloat(m[3], 64)
			est, _ := strconv.Atoi(m[4])
			if m[1] != "131072" || avail != 1 || needed <= avail {
				t.Errorf("refusal for max seq len %s needs %v GiB of %v GiB; want 131072, more than 1 GiB of 1 GiB", m[1], needed, avail)
			}
			if est <= 0 || est >= 131072 {
				t.Fatalf("estimated maximum model length %d, want within (0, 131072)", est)
			}
			if code, _, errs := at(est); code != 0 {
				t.Errorf("--max-model-len %d (the estimate) exits %d, want 0: %s", est, code, errs)
			}
			if code, _, errs := at(est + 1); code != 1 || !refusalRE.MatchString(errs) {
				t.Errorf("--max-model-len %d (one past the estimate) exits %d, want 1 with the refusal: %s", est+1, code, errs)
			}
		})
	}
}

// TestCLITextNamesTheProfile: the first line of plan's and pd's text output
// names the vLLM profile the numbers follow, the newest release when no
// --vllm-version is given, and it is the profile --json reports for the
// same command line.
func TestCLITextNamesTheProfile(t *testing.T) {
	newest := vllm.For(vllm.Newest())
	v019, err := vllm.Lookup("0.19")
	if err != nil {
		t.Fatal(err)
	}
	branch, err := vllm.Lookup(vllm.Branch)
	if err != nil {
		t.Fatal(err)
	}
	if newest.Name == v019.Name || newest.Name == branch.Name {
		t.Fatalf("the cases need three different profiles: %s, %s, %s", newest.Name, v019.Name, branch.Name)
	}
	gpt := modelPath("openai__gpt-oss-20b")
	tests := []struct {
		name string
		args []string
		want vllm.Profile
	}{
		{"plan, default", []string{"plan", "--model", gpt}, newest},
		{"plan --vllm-version 0.19", []string{"plan", "--model", gpt, "--vllm-version", "0.19"}, v019},
		{"plan --vllm-version pr58207", []string{"plan", "--model", gpt, "--vllm-version", vllm.Branch}, branch},
		{"pd, default", []string{"pd", "--model", gpt, "--prompt-tokens", "100"}, newest},
		{"pd --vllm-version 0.19", []string{"pd", "--model", gpt, "--prompt-tokens", "100", "--vllm-version", "0.19"}, v019},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			header, _, _ := strings.Cut(out, "\n")
			if want := "vLLM profile " + tt.want.Name + ": " + tt.want.Label; header != want {
				t.Errorf("header %q, want %q", header, want)
			}
			code, out, errs = runCLI(t, append(append([]string{}, tt.args...), "--json")...)
			if code != 0 {
				t.Fatalf("--json: exit %d: %s", code, errs)
			}
			var got struct {
				Version string `json:"vllm_version"`
				Profile string `json:"vllm_profile"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			if got.Version != tt.want.Name || got.Profile != tt.want.Label {
				t.Errorf("--json says %s (%s), the header %s (%s)", got.Version, got.Profile, tt.want.Name, tt.want.Label)
			}
		})
	}
}

// TestPDSpeaksTheReleasesHandshake: pd prints the handshake version of the
// release it plans (3 for 0.20.0, 12 for 0.31.0, kvscope's 15 for the
// branch only) and refuses what that release's NixlConnector refuses: the
// gated-delta-net Qwen3.5-0.8B from P TP 1 to D TP 2 is refused by 0.20.0
// (hybrid SSM models need equal TP; GDN support came with #41869) and
// accepted by 0.31.0, which asks for the DS conv state layout.
func TestPDSpeaksTheReleasesHandshake(t *testing.T) {
	qwen := modelPath("Qwen__Qwen3.5-0.8B")
	tests := []struct {
		version string
		want    []string
		exit    int
	}{
		{"0.20.0", []string{"handshake v3 (", "REJECTED (gdn-tp, P/D)", "vLLM 0.20.0's NixlConnector refuses it", "vLLM 0.22.0 accepts it (#41869",
			"vLLM's error: Hybrid SSM (Mamba) models require homogeneous TP (P TP == D TP)."}, 0},
		{"0.31.0", []string{"handshake v12 (", "ok   gdn-tp", "VLLM_SSM_CONV_STATE_LAYOUT=DS", "path vllm"}, 0},
		{vllm.Branch, []string{"handshake v15 (kvscope's group-pair protocol)"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			code, out, errs := runCLI(t, "pd", "--model", qwen, "--p-tensor-parallel-size", "1", "--d-tensor-parallel-size", "2", "--prompt-tokens", "200", "--vllm-version", tt.version)
			if code != tt.exit {
				t.Fatalf("exit %d: %s", code, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("pd output lacks %q:\n%s", w, out)
				}
			}
			if tt.version != vllm.Branch && strings.Contains(out, "v15") {
				t.Errorf("a release prints kvscope's v15:\n%s", out)
			}
		})
	}
}
