package event

import (
	"strings"
	"testing"
)

// TestCredentials: a credential connects as its scope and the names under
// it, never as another agent, and only on the server whose secret made
// it; tampering with any part of it is refused with the reason.
func TestCredentials(t *testing.T) {
	const secret = "a-server-token-0123456789"
	cred, err := IssueCredential(secret, "gpu7")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cred, "kvsa1.gpu7.") {
		t.Fatalf("credential %q: want kvsa1.gpu7.<mac>", cred)
	}
	for _, c := range []struct {
		secret, cred, agent, err string
	}{
		{secret, cred, "gpu7", ""},
		{secret, cred, "gpu7/p", ""},
		{secret, cred, "gpu7/p/rank0", ""},
		{secret, cred, "gpu8", `cannot connect as agent "gpu8"`},
		{secret, cred, "gpu77", `cannot connect as agent "gpu77"`},
		{secret, cred, "gpu", `cannot connect as agent "gpu"`},
		{"another-server-token-0123", cred, "gpu7", "not one this server issued"},
		{"", cred, "gpu7", "not one this server issued"},
		{secret, strings.Replace(cred, "gpu7", "gpu8", 1), "gpu8", "not one this server issued"},
		{secret, cred[:len(cred)-1] + "A", "gpu7", "not one this server issued"},
		{secret, cred + "=", "gpu7", "not one this server issued"},
		// base64 decoders skip line breaks; a credential is its exact text.
		{secret, cred[:len(cred)-4] + "\n\r" + cred[len(cred)-4:], "gpu7", "not one this server issued"},
		{secret, cred + "\n", "gpu7", "not one this server issued"},
		{secret, secret, "gpu7", "not an agent credential"},
		{secret, "kvsa1.", "gpu7", "not an agent credential"},
		{secret, "kvsa1.gpu7.", "gpu7", "not an agent credential"},
		{secret, "", "gpu7", "not an agent credential"},
	} {
		err := CheckCredential(c.secret, c.cred, c.agent)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("CheckCredential(%.10s…, %.20s…, %s) = %v, want %q", c.secret, c.cred, c.agent, err, c.err)
		}
	}
	for _, bad := range []string{"", "a b", "a\nb", strings.Repeat("x", MaxAgentName+1)} {
		if _, err := IssueCredential(secret, bad); err == nil {
			t.Errorf("a credential issued for %q", bad)
		}
	}
	if _, err := IssueCredential("", "gpu7"); err == nil {
		t.Error("a credential issued without a secret")
	}
}

// TestMessageIDs: an id names its agent and range in clear and changes
// with the key, the agent, the epoch and the range.
func TestMessageIDs(t *testing.T) {
	k := MessageIDKey("secret-0123456789abcdef", "a")
	id := MessageID(k, "a", "E1", 1, 5)
	if !strings.HasPrefix(id, "a#1-5#") || len(id) != len("a#1-5#")+24 {
		t.Fatalf("id %q", id)
	}
	for _, other := range []string{
		MessageID(MessageIDKey("secret-0123456789abcdeg", "a"), "a", "E1", 1, 5),
		MessageID(MessageIDKey("secret-0123456789abcdef", "b"), "a", "E1", 1, 5),
		MessageID(k, "b", "E1", 1, 5),
		MessageID(k, "a", "E2", 1, 5),
		MessageID(k, "a", "", 1, 5),
		MessageID(k, "a", "E1", 1, 6),
		MessageID(k, "a", "E1", 15, 5),
	} {
		if other == id || strings.HasSuffix(other, id[len(id)-24:]) {
			t.Errorf("%q made again as %q", id, other)
		}
	}
}

// TestSubjectsRoundTrip: every agent name's subject reads back as that
// name, and what is not an agent's subject (or not how its agent's is
// written) is refused with the reason.
func TestSubjectsRoundTrip(t *testing.T) {
	for _, name := range []string{"a", "gpu7/p", "host.example/agent", "user@host:7700", "a.b.c", "+-_:@/."} {
		got, err := AgentOfSubject(Subject(name))
		if err != nil || got != name {
			t.Errorf("%q → %s → %q, %v", name, Subject(name), got, err)
		}
	}
	for _, c := range []struct{ subject, err string }{
		{"kvscope.ev.", "not an agent's"},
		{"other.a", "not an agent's"},
		{"kvscope.ev.a~2", "without two hex digits"},
		{"kvscope.ev.a~zz", "is not an escape"},
		{"kvscope.ev.a~2d", "not how agent"}, // "-" needs no escape
		{"kvscope.ev.a~0A", "character"},     // a newline is no agent's
		{"kvscope.ev.a.b", "not how agent"},  // a second token
	} {
		if _, err := AgentOfSubject(c.subject); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("AgentOfSubject(%q) = %v, want %q", c.subject, err, c.err)
		}
	}
}

// TestSeqJumps: a jump past MaxSeqJump from a known last event is
// refused; from none known, or within it, it is not.
func TestSeqJumps(t *testing.T) {
	for _, c := range []struct {
		last, seq uint64
		ok        bool
	}{{0, 1 << 50, true}, {5, 5 + MaxSeqJump, true}, {5, 6 + MaxSeqJump, false}, {5, 3, true}, {1, 1e15, false}} {
		err := CheckSeqJump("a", c.last, c.seq)
		if (err == nil) != c.ok {
			t.Errorf("last %d, next %d: %v, want ok=%v", c.last, c.seq, err, c.ok)
		}
	}
}

// FuzzCredential: whatever a bearer, secret, agent name or subject holds,
// the checks answer without a panic, and a credential they accept is one
// issued for a scope covering the agent.
func FuzzCredential(f *testing.F) {
	cred, _ := IssueCredential("s3cret-token-0123", "gpu7")
	f.Add("s3cret-token-0123", cred, "gpu7/p", "kvscope.ev.gpu7~2E", "E1")
	f.Add("", "kvsa1..", "", "kvscope.ev.~", "")
	f.Add("s3cret-token-0123", cred[:20]+"\n\n\n"+cred[20:], "gpu7/p", "", "") // CI's finding
	f.Fuzz(func(t *testing.T, secret, cred, agent, subject, epoch string) {
		if err := CheckCredential(secret, cred, agent); err == nil {
			scope, _ := CredentialScope(cred)
			if want, _ := IssueCredential(secret, scope); want != cred || !InScope(scope, agent) {
				t.Fatalf("accepted %q for %q (scope %q)", cred, agent, scope)
			}
		}
		if a, err := AgentOfSubject(subject); err == nil && Subject(a) != subject {
			t.Fatalf("subject %q read as %q, whose subject is %q", subject, a, Subject(a))
		}
		if CheckEpoch(epoch) == nil && len(epoch) > MaxEpoch {
			t.Fatalf("epoch of %d characters taken", len(epoch))
		}
		ReadHistory([]byte(subject))
	})
}
