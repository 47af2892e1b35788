package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/event"
)

// credential is agent's credential from a server whose token is token.
func credential(t testing.TB, token, agent string) string {
	t.Helper()
	cred, err := event.IssueCredential(token, agent)
	if err != nil {
		t.Fatal(err)
	}
	return cred
}

// TestAgentTokenCommand: kvscope serve agent-token NAME prints the
// credential the server takes from NAME and its sub-agents, made from
// --token (or $KVSCOPE_TOKEN); bad names and a missing token are usage
// errors that name what is wrong.
func TestAgentTokenCommand(t *testing.T) {
	const secret = "a-server-token-of-some-length"
	var out bytes.Buffer
	if err := runServe([]string{"agent-token", "--token", secret, "gpu7"}, &out); err != nil {
		t.Fatal(err)
	}
	cred := strings.TrimSpace(out.String())
	for _, c := range []struct {
		agent string
		ok    bool
	}{{"gpu7", true}, {"gpu7/p", true}, {"gpu8", false}, {"gpu77", false}, {"gpu", false}} {
		if err := event.CheckCredential(secret, cred, c.agent); (err == nil) != c.ok {
			t.Errorf("the credential printed for gpu7, as %s: %v, want ok=%v", c.agent, err, c.ok)
		}
	}
	if err := event.CheckCredential("another-server-token-entirely", cred, "gpu7"); err == nil {
		t.Error("another server took the credential")
	}
	t.Setenv("KVSCOPE_TOKEN", secret)
	out.Reset()
	if err := runServe([]string{"agent-token", "gpu7"}, &out); err != nil || strings.TrimSpace(out.String()) != cred {
		t.Errorf("from $KVSCOPE_TOKEN: %q, %v; want the same credential", out.String(), err)
	}
	t.Setenv("KVSCOPE_TOKEN", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"agent-token", "gpu7"}, "--token"},
		{[]string{"agent-token", "--token", "short", "gpu7"}, "--token: 5 characters"},
		{[]string{"agent-token", "--token", secret}, "want one agent name"},
		{[]string{"agent-token", "--token", secret, "a b"}, `NAME "a b"`},
	} {
		err := runServe(c.args, &out)
		if _, usage := err.(*usageError); !usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kvscope serve %v: %v, want a usage error naming %q", c.args, err, c.want)
		}
	}
}

// TestBudgetFlags: the agents' budget takes rates and sizes, 0 for no
// bound, and names the flag and value it refuses.
func TestBudgetFlags(t *testing.T) {
	for _, c := range []struct {
		args          []string
		events, bytes float64
		err           string
	}{
		{nil, 5000, 4 << 20, ""},
		{[]string{"--agent-events-per-sec", "0", "--agent-bytes-per-sec", "0"}, 0, 0, ""},
		{[]string{"--agent-bytes-per-sec", "1.5MiB"}, 5000, 1.5 * (1 << 20), ""},
		{[]string{"--agent-events-per-sec", "-1"}, 0, 0, "--agent-events-per-sec -1"},
		{[]string{"--agent-bytes-per-sec", "lots"}, 0, 0, `--agent-bytes-per-sec "lots"`},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		read := budgetFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		b, err := read()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: %v, want an error naming %s", c.args, err, c.err)
			}
			continue
		}
		if err != nil || b.EventsPerSec != c.events || b.BytesPerSec != c.bytes {
			t.Errorf("%v: %+v, %v; want %g events/s and %g bytes/s", c.args, b, err, c.events, c.bytes)
		}
	}
}
