package main

import (
	"os"
	"strings"
	"testing"
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
	o, err := parse([]string{"--server", "ws://10.0.0.5:8080", "--token", "t", "--model", "Qwen/Qwen3-0.6B", "--rate", "0", "--requests", "3"})
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
	} {
		if _, err := parse(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parse(%q) = %v, want an error containing %q", c.args, err, c.want)
		}
	}
	if _, err := parse([]string{"--role", "p", "--listen", "127.0.0.1:7700"}); err != nil {
		t.Errorf("a loopback P needs no token: %v", err)
	}
	// --nats without credentials: the embedded server's user is the agent's
	// name and its password the token.
	o, err = parse([]string{"--nats", "nats://127.0.0.1:4222", "--name", "gpu9/agent", "--token", "t9"})
	if err != nil || o.config.NATSAuth.User != "gpu9/agent" || o.config.NATSAuth.Password != "t9" || o.config.NATS != "nats://127.0.0.1:4222" {
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
