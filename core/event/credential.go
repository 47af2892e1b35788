package event

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Agents' credentials. kvscope serve holds one secret (its --token); each
// agent holds a credential issued for its name (kvscope serve agent-token
// NAME), an HMAC of the name under a key derived from the secret. The
// server checks a credential with the secret alone (it keeps no list),
// and holding one agent's credential says nothing of another's: the
// credential of scope "host1" connects as host1 and as host1/<anything>
// (a watcher names its engines' agents so), never as host2.
//
// A credential reads kvsa1.<scope>.<mac>: the scope in clear (an agent
// name), the MAC base64url without padding. Message ids in the event log
// are keyed too (MessageID), so no one who lacks an agent's key can make
// one of its ids and have JetStream drop that agent's frame as a
// duplicate.

// credentialPrefix starts every agent credential (version 1 of the form).
const credentialPrefix = "kvsa1."

// ErrNotCredential is the error for a bearer that is no agent credential
// (the server's own token, say).
var ErrNotCredential = errors.New("not an agent credential (kvscope serve agent-token NAME issues one; the server's own token is not accepted from agents)")

// credentialKey is the key credentials are made with: the secret's HMAC
// of a fixed label, so that a credential is never an HMAC under the
// secret itself.
func credentialKey(secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("kvscope agent credentials v1"))
	return m.Sum(nil)
}

func credentialMAC(secret, scope string) []byte {
	m := hmac.New(sha256.New, credentialKey(secret))
	m.Write([]byte(scope))
	return m.Sum(nil)
}

// IssueCredential is the credential of the agents named scope or
// scope/...: what kvscope serve agent-token prints. scope must be a
// valid agent name (CheckAgentName).
func IssueCredential(secret, scope string) (string, error) {
	if secret == "" {
		return "", errors.New("agent credential: the server has no secret (give kvscope serve --token)")
	}
	if err := CheckAgentName(scope); err != nil {
		return "", fmt.Errorf("agent credential: %w", err)
	}
	return credentialPrefix + scope + "." + base64.RawURLEncoding.EncodeToString(credentialMAC(secret, scope)), nil
}

// CredentialScope is the agent name a credential was issued for, as it
// reads (not checked: CheckCredential checks it).
func CredentialScope(cred string) (string, error) {
	rest, ok := strings.CutPrefix(cred, credentialPrefix)
	dot := strings.LastIndexByte(rest, '.')
	if !ok || dot <= 0 || dot == len(rest)-1 {
		return "", ErrNotCredential
	}
	return rest[:dot], nil
}

// CheckCredential reports, as an error that says why, whether cred is a
// credential the server with this secret issued whose scope covers
// agent: the scope itself, or a name under it (scope/...).
func CheckCredential(secret, cred, agent string) error {
	scope, err := CredentialScope(cred)
	if err != nil {
		return err
	}
	// The whole credential is compared with the one issued, not its MAC
	// decoded: base64's decoder skips line breaks, so a decoded MAC would
	// let "kvsa1.a.AB\nCD" pass for "kvsa1.a.ABCD".
	want := credentialPrefix + scope + "." + base64.RawURLEncoding.EncodeToString(credentialMAC(secret, scope))
	if secret == "" || !hmac.Equal([]byte(cred), []byte(want)) {
		return fmt.Errorf("the credential of %q is not one this server issued", Clip(scope, 64))
	}
	if !InScope(scope, agent) {
		return fmt.Errorf("the credential of %q cannot connect as agent %q (only as %[1]q or %[1]q/...)", Clip(scope, 64), Clip(agent, 64))
	}
	return nil
}

// InScope reports whether a credential of scope covers agent.
func InScope(scope, agent string) bool {
	return agent == scope || strings.HasPrefix(agent, scope+"/")
}

// MessageIDKey is the key an agent's message ids are made with: from the
// agent's credential when it publishes to the event log itself
// (kvscope-agent --nats), or from the server's secret and the agent's
// name when a server stores the frames it received (every replica of a
// fleet derives the same key, so a frame one replica stored and another
// stores again is dropped as a duplicate).
func MessageIDKey(credentialOrSecret, agent string) []byte {
	m := hmac.New(sha256.New, []byte(credentialOrSecret))
	m.Write([]byte("kvscope message ids v1\x00"))
	m.Write([]byte(agent))
	return m.Sum(nil)
}

// MessageID is the event-log message id of an agent's frame of events
// first to last sent by the agent process epoch: readable in front (the
// agent and the range), then a MAC under key, so an id can neither be
// guessed nor made by anyone without the key; a restarted agent (a new
// epoch) never repeats an id of its previous run.
func MessageID(key []byte, agent, epoch string, first, last uint64) string {
	rng := strconv.FormatUint(first, 10) + "-" + strconv.FormatUint(last, 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(agent + "\x00" + epoch + "\x00" + rng))
	return agent + "#" + rng + "#" + hex.EncodeToString(m.Sum(nil)[:12])
}

// MaxEpoch is the longest agent epoch (a process's random id, sent with
// every connection and stored with every frame).
const MaxEpoch = 32

// CheckEpoch refuses an epoch that is too long or not made of letters
// and digits ("" is an agent that sends none).
func CheckEpoch(epoch string) error {
	if len(epoch) > MaxEpoch {
		return fmt.Errorf("epoch of %d characters: at most %d", len(epoch), MaxEpoch)
	}
	for i := 0; i < len(epoch); i++ {
		c := epoch[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return fmt.Errorf("epoch %q: character %q at byte %d: letters and digits only", Clip(epoch, 40), c, i)
		}
	}
	return nil
}

// MaxSeqJump is how far past an agent's last stored sequence number its
// next event may be: more than any agent queue holds (the events an agent
// dropped while it could not send). A larger jump is refused, not
// adopted: adopting it would make every later real event look already
// stored.
const MaxSeqJump = 1 << 20

// SeqJumpError is a frame whose sequence number jumps past MaxSeqJump.
type SeqJumpError struct {
	Agent     string
	Last, Seq uint64
}

func (e *SeqJumpError) Error() string {
	return fmt.Sprintf("agent %q: event %d jumps %d past its last stored event %d (at most %d; an agent's queue holds fewer)",
		e.Agent, e.Seq, e.Seq-e.Last, e.Last, MaxSeqJump)
}

// CheckSeqJump refuses an event numbered seq from an agent whose last
// stored event is last (0: none known), unless it restarts the
// agent's sequence.
func CheckSeqJump(agent string, last, seq uint64) error {
	if last > 0 && seq > last && seq-last > MaxSeqJump {
		return &SeqJumpError{Agent: agent, Last: last, Seq: seq}
	}
	return nil
}
