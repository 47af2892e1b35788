package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestPDFromTwoLogs: kvscope pd --p-log --d-log plans each engine from its
// own real startup log and runs the release's handshake rules on the
// pair. The verdicts come from the rules' rows, not from kvscope's output:
// the Qwen3.6-35B-A3B serving log of 0.20.0 runs Mamba prefix caching
// (align), which vLLM's NixlConnector moves only from 0.23.0 (#42554, in
// that release's notes); a dense Qwen3-32B at TP 2 on 0.27.1 against
// itself is vLLM's own path, and moves what kvscope pd moves with the
// flags the log implies; two models, a log whose engine never started and
// a missing side are errors naming the side.
func TestPDFromTwoLogs(t *testing.T) {
	logs := func(name string) string { return filepath.Join("..", "testdata", "vllm-logs", name) }
	qwen36 := logs("qwen36-35b-a3b-nvfp4-v0.20.0-262k.log")
	qwen32 := logs("qwen3-32b-tp2-v0.27.1-FRAGMENT.log")
	frag := []string{"--vllm-version", "0.27.1", "--model", "Qwen/Qwen3-32B", "--tensor-parallel-size", "2"}

	code, out, errs := runCLI(t, "pd", "--p-log", qwen36, "--d-log", qwen36, "--prompt-tokens", "1000")
	if code != 0 || !strings.Contains(out, "REJECTED (mamba-prefix-caching, P/D)") || !strings.Contains(out, "vLLM 0.23.0 accepts it (#42554") || !strings.Contains(out, "P log "+qwen36+": vLLM 0.20.0, check match") {
		t.Errorf("Qwen3.6 on 0.20.0 with prefix caching: exit %d %s\n%s", code, errs, out)
	}

	// Pairs of real logs and the rule row that decides each (kvscope
	// versions): different releases (the hash takes the version, #29503);
	// 0.24.0 on both sides, after #42554 (0.23.0), with the hybrid
	// manager kept on (#41847, 0.23.0); gemma-4 on 0.20.2, whose connector
	// turns the hybrid manager off (kept on from 0.23.0); Qwen3.6-27B on
	// 0.23.1rc1 without and with MTP, whose blocks differ (1568 and 1600
	// tokens, the attention block each log prints) under the hybrid
	// manager, which the connector accepts only from 0.27.0 (#49612:
	// "HMA does not support different remote block size yet" before);
	// Qwen3.5-9B (GDN) on 0.17.1rc1, whose NixlConnector cannot move state
	// (SupportsHMA came with 0.18.0, #35758): refused at start-up;
	// the 0.20.0 log against itself at D TP 2 with prefix caching off,
	// GDN state between TP sizes, accepted from 0.22.0 (#41869).
	for _, tt := range []struct {
		name, p, d string
		flags      []string
		verdict    string
		want       []string
	}{
		{"different releases", qwen36, logs("qwen36-35b-a3b-nvfp4-mtp2-v0.20.2-262k.log"), nil, "rejected", []string{"REJECTED (vllm-version, P/D)", "P runs vLLM 0.20.0, D 0.20.2", "vLLM version             0.20.0", "DIFFERS (hashed)"}},
		{"0.24.0 on both sides", logs("club3090-612-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"), logs("club3090-652-qwen36-35b-a3b-nvfp4-v0.24.0-5090-fragment.log"), nil, "ok", []string{"handshake v4 (", "path vllm", "1 rank pair, pull"}},
		{"the hybrid manager off", logs("gemma4-26b-a4b-h200-v0.20.2.log"), logs("gemma4-26b-a4b-h200-v0.20.2.log"), nil, "ok", []string{"turns the hybrid KV cache manager off", "path vllm", "off (the connector turns it off)", "requests of 32,768 tokens at once against", "with it on (-"}},
		{"block sizes differ under the hybrid manager", logs("qwen36-27b-nvfp4-v0.23.1rc1-arm64.log"), logs("qwen36-27b-nvfp4-mtp2-v0.23.1rc1-arm64.log"), nil, "rejected", []string{"REJECTED (hybrid-block-size, P/D)", "HMA does not support different remote block size yet", "block size (tokens)      1,568", "first request"}},
		{"state before the connector moved it", logs("qwen35-9b-awq-v0.17.1rc1-eager.log"), logs("qwen35-9b-awq-v0.17.1rc1-eager.log"), nil, "rejected", []string{"rule state-connector", "at start-up", "vLLM 0.18.0 or later"}},
		{"GDN state between TP sizes before 0.22", qwen36, qwen36, []string{"--no-enable-prefix-caching", "--d-tensor-parallel-size", "2"}, "rejected", []string{"REJECTED (gdn-tp, P/D)", "vLLM 0.22.0 accepts it (#41869"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runCLI(t, append([]string{"pd", "--p-log", tt.p, "--d-log", tt.d, "--prompt-tokens", "1000"}, tt.flags...)...)
			if code != 0 || !strings.HasPrefix(out, "verdict: "+tt.verdict+"\n") {
				t.Fatalf("exit %d %s: want verdict %s first\n%s", code, errs, tt.verdict, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q\n%s", w, out)
				}
			}
		})
	}

	code, out, errs = runCLI(t, append([]string{"pd", "--p-log", qwen32, "--d-log", qwen32, "--prompt-tokens", "1000", "--json"}, frag...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		P struct {
			Verdict string   `json:"verdict"`
			Model   string   `json:"model"`
			Flags   []string `json:"flags"`
		} `json:"p_log"`
		PD struct {
			Preflight struct {
				Verdict string `json:"verdict"`
				Descs   int    `json:"descs_per_rank_pair"`
			} `json:"preflight"`
			Transfer struct {
				Path   string `json:"path"`
				Descs  int    `json:"descs"`
				Bytes  int64  `json:"bytes"`
				Reject any    `json:"rejection"`
			} `json:"transfer"`
		} `json:"pd"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.P.Verdict != "match" || got.PD.Transfer.Path != "vllm" || got.PD.Transfer.Reject != nil || got.PD.Transfer.Descs == 0 ||
		got.PD.Preflight.Verdict != "ok" || 2*got.PD.Preflight.Descs != got.PD.Transfer.Descs { // TP 2 to TP 2: two rank pairs alike
		t.Fatalf("Qwen3-32B TP 2 against itself: %+v", got)
	}
	// The same engines as flags: the descriptor count and bytes agree.
	args := append([]string{"pd", "--model", got.P.Model, "--prompt-tokens", "1000", "--json"}, got.P.Flags...)
	code, out, errs = runCLI(t, args...)
	var flags struct {
		Transfer struct {
			Descs int   `json:"descs"`
			Bytes int64 `json:"bytes"`
		} `json:"transfer"`
	}
	if err := json.Unmarshal([]byte(out), &flags); code != 0 || err != nil {
		t.Fatalf("%v: exit %d %s %v", args, code, errs, err)
	}
	if flags.Transfer.Descs != got.PD.Transfer.Descs || flags.Transfer.Bytes != got.PD.Transfer.Bytes {
		t.Errorf("from the logs %d descriptors %d B; from the flags %v %d descriptors %d B", got.PD.Transfer.Descs, got.PD.Transfer.Bytes, got.P.Flags, flags.Transfer.Descs, flags.Transfer.Bytes)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"two models", []string{"--p-log", logs("llama31-8b-l4-v0.11.0.log"), "--d-log", logs("llama3-8b-v0.11.2.log")}, "P and D must serve one model"},
		{"D never started", append([]string{"--p-log", qwen32, "--d-log", logs("qwen3-32b-tp1-v0.27.1-NEGATIVE-FRAGMENT.log")}, frag...), "D's engine did not start"},
		{"one side only", []string{"--p-log", qwen36}, "give both engines' startup logs"},
		{"a log that is not one", []string{"--p-log", qwen36, "--d-log", logs("index.json")}, "--d-log"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runCLI(t, append([]string{"pd"}, tt.args...)...)
			if code == 0 || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr %q; want an error naming %q", code, errs, tt.want)
			}
		})
	}
}
