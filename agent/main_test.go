package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/agent/stream"
	"github.com/kvscope/kvscope/core/event"
)

// TestMain lets a test run this test binary as kvscope-agent itself
// (KVSCOPE_AGENT_MAIN=1): real agent processes, without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("KVSCOPE_AGENT_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseFlags(t *testing.T) {
	cred, _ := event.IssueCredential("the-servers-token-0123", "gpu7")
	o, err := parse([]string{"--server", "ws://10.0.0.5:8080", "--name", "gpu7", "--token", cred, "--model", "Qwen/Qwen3-0.6B", "--rate", "0", "--requests", "3"})
	if err != nil {
		t.Fatal(err)
	}
	c := o.config
	if c.ServerURL != "ws://10.0.0.5:8080/ws/agent" || c.Scenario.Model != "Qwen/Qwen3-0.6B" || c.Scenario.Rate != 0 || c.Scenario.Requests != 3 {
		t.Fatalf("parsed %+v", c)
	}
	o, err = parse([]string{"--connector", "nixl-push", "--p-tensor-parallel-size", "4", "--d-tensor-parallel-size", "2", "--draft", "mtp"})
	if err != nil || o.config.Scenario.Connector != "nixl-push" || o.config.Scenario.P.TensorParallelSize != 4 || o.config.Scenario.D.TensorParallelSize != 2 || o.config.Scenario.Draft != "mtp" {
		t.Fatalf("engine overrides: %+v, %v", o, err)
	}
	// Every engine flag of the table overrides the scenario's engines, plain
	// for both and with p- / d- for one; the older MiB spelling still
	// works, with a warning that names the flag to use.
	o, err = parse([]string{"--kv-cache-memory-bytes", "1.5GiB", "--d-block-size", "32", "--p-no-async-scheduling", "--vllm-version", "pr58207", "--selector", "balanced"})
	if err != nil {
		t.Fatal(err)
	}
	if p, d := o.config.Scenario.P, o.config.Scenario.D; p.KVCacheMemoryBytes != 3<<29 || d.KVCacheMemoryBytes != 3<<29 || d.BlockSize != 32 || p.BlockSize != 0 ||
		!p.NoAsyncScheduling || d.NoAsyncScheduling || p.VLLMVersion != "pr58207" || d.VLLMVersion != "pr58207" || p.Selector != "balanced" || d.Selector != "balanced" {
		t.Errorf("engine flags: P %+v, D %+v", p, d)
	}
	o, err = parse([]string{"--kv-cache-memory-mib", "64"})
	if err != nil || o.config.Scenario.P.KVCacheMemoryBytes != 64<<20 || len(o.warnings) != 1 || !strings.Contains(o.warnings[0], "--kv-cache-memory-bytes 64MiB") {
		t.Errorf("--kv-cache-memory-mib 64: %+v, warnings %q, %v", o.config.Scenario.P, o.warnings, err)
	}
	if o, _ := parse([]string{"--server", "https://kv.example/ws/agent"}); o.config.ServerURL != "wss://kv.example/ws/agent" {
		t.Fatalf("https server: %q", o.config.ServerURL)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", "ftp://x:1"}, `scheme "ftp"`},
		{[]string{"--server", "localhost"}, "want ws://HOST:PORT"},
		{[]string{"--rate", "-5"}, "rate = -5"},
		{[]string{"--role", "p", "--listen", ":7700"}, "give --peer-token"},
		{[]string{"--host-memory-mib", "0"}, "--host-memory-mib 0"},
		{[]string{"--scenario", "/nonexistent.json"}, "no such file"},
		{[]string{"stray"}, `unexpected argument "stray"`},
		{[]string{"--connector", "rdma"}, "connector = rdma"},
		{[]string{"--nats", "nats://127.0.0.1:4222", "--server", "ws://x:1"}, "give one"},
		{[]string{"--nats", "http://127.0.0.1:4222"}, "want nats://HOST:PORT"},
		{[]string{"--d-tensor-parallel-size", "0"}, `--d-tensor-parallel-size "0": want a positive integer`},
		{[]string{"--p-kv-cache-memory-bytes", "lots"}, `--p-kv-cache-memory-bytes "lots": want a positive size`},
		{[]string{"--kv-cache-memory-mib", "8", "--kv-cache-memory-bytes", "8MiB"}, "give one"},
		{[]string{"--block-size", "7", "--vllm-version", "0.19.0"}, "--block-size 7"},
	} {
		if _, err := parse(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
	if _, err := parse([]string{"--role", "p", "--listen", "127.0.0.1:7700"}); err != nil {
		t.Errorf("a loopback P needs no token: %v", err)
	}
	// --nats without credentials: the embedded server's user is the agent's
	// name and its password the agent's credential.
	cred9, _ := event.IssueCredential("the-servers-token-0123", "gpu9/agent")
	o, err = parse([]string{"--nats", "nats://127.0.0.1:4222", "--name", "gpu9/agent", "--token", cred9})
	if err != nil || o.config.NATSAuth.User != "gpu9/agent" || o.config.NATSAuth.Password != cred9 || o.config.NATS != "nats://127.0.0.1:4222" {
		t.Errorf("--nats: %+v, %v", o.config.NATSAuth, err)
	}
}

func TestParseSideChannel(t *testing.T) {
	sc, err := parseSideChannel("d=10.0.0.5:5601/4")
	if err != nil || sc.Side != "D" || sc.Addr != "10.0.0.5:5601" || sc.TP != 4 {
		t.Fatalf("%+v, %v", sc, err)
	}
	if sc, err := parseSideChannel("[::1]:5600"); err != nil || sc.Side != "" || sc.TP != 0 || sc.Addr != "[::1]:5600" {
		t.Fatalf("%+v, %v", sc, err)
	}
	for _, c := range []struct{ in, want string }{
		{"x=h:1", "the side must be p or d"},
		{"p=h:1/0", "TP must be between 1 and 1024"},
		{"p=h:1/two", "TP must be"},
		{"p=h", "not HOST:PORT"},
		{":5600", "not HOST:PORT"},
		{"h:70000", "the port must be between 1 and 65535"},
	} {
		if _, err := parseSideChannel(c.in); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.in) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}

// TestAgentName: --name is checked at startup with the server's rule
// (event.CheckAgentName): a name the server would refuse stops the agent
// with exit status 2 and a message naming --name and the value, quoted,
// before it connects anywhere.
func TestAgentName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" : accepted
	}{
		{[]string{"--name", "gpu-node-07/p"}, ""},
		{[]string{"--name", "user@host:7700", "--server", "ws://127.0.0.1:1"}, ""},
		{[]string{"--name", "a\nkvscope: forged", "--server", "ws://127.0.0.1:1"}, `--name "a\nkvscope: forged": character '\n' at byte 1`},
		{[]string{"--name", "<script>"}, `--name "<script>": character '<' at byte 0`},
		{[]string{"--name", strings.Repeat("x", 129)}, `--name "` + strings.Repeat("x", 129) + `": an agent name is 1 to 128 characters`},
		{[]string{"watch", "--name", "sp ace"}, `--name "sp ace": character ' ' at byte 2`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var err error
			if tc.args[0] == "watch" {
				err = runWatch(context.Background(), tc.args[1:], t.Logf)
			} else {
				_, err = parse(tc.args)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a usage error containing %q", err, tc.want)
			}
		})
	}

	// The agent itself: exit status 2, the message on stderr.
	cmd := exec.Command(os.Args[0], "--name", "a\nb", "--server", "ws://127.0.0.1:1")
	cmd.Env = append(os.Environ(), "KVSCOPE_AGENT_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), `--name "a\nb"`) {
		t.Fatalf("kvscope-agent --name 'a<newline>b': %v, stderr %q; want exit status 2 naming --name", err, stderr.String())
	}
}

// TestAgentTakesItsOwnCredentialOnly: before connecting, the agent
// refuses a --token that cannot carry its name (the server's own token,
// another agent's credential), saying what to run instead; its own
// credential, or one of a name above it, is taken.
func TestAgentTakesItsOwnCredentialOnly(t *testing.T) {
	const secret = "the-servers-token-0123"
	own, _ := event.IssueCredential(secret, "gpu7")
	other, _ := event.IssueCredential(secret, "gpu8")
	for _, c := range []struct {
		name, token, want string
	}{
		{"gpu7", own, ""},
		{"gpu7/p", own, ""},
		{"gpu7", secret, "kvscope serve agent-token gpu7"},
		{"gpu7", other, `the credential of "gpu8" cannot connect as "gpu7"`},
		{"gpu77", own, `cannot connect as "gpu77"`},
	} {
		for _, args := range [][]string{{"--server", "ws://10.0.0.5:8080"}, {"--nats", "nats://10.0.0.5:4222"}} {
			_, err := parse(append(args, "--name", c.name, "--token", c.token))
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%v --name %s --token %.12s…: %v, want %q", args, c.name, c.token, err, c.want)
			}
		}
	}
}

// TestAgentStopsWhenRefused: a server that refuses the agent for good
// (here its token) stops the agent with the server's reason, instead of
// transfers whose events go nowhere and a retry forever.
func TestAgentStopsWhenRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	cred, _ := event.IssueCredential("another-servers-token-42", "refused/agent")
	err := run(ctx, []string{"--server", srv.URL, "--token", cred, "--name", "refused/agent", "--model", "Qwen/Qwen3-0.6B",
		"--kv-cache-memory-mib", "64", "--host-memory-mib", "256", "--rate", "20"}, t.Logf)
	var re *stream.RefusedError
	if !errors.As(err, &re) || re.Status != 401 || !strings.Contains(err.Error(), "a valid bearer token is required") {
		t.Fatalf("run: %v, want the server's 401 and its reason", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the agent stopped only at the test's deadline (%v)", time.Since(start))
	}
	t.Logf("stopped %v after start: %v", time.Since(start), err)
}
