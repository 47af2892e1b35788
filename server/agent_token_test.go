package main

import (
	"bytes"
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
