package event

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SubjectPrefix starts every agent's subject in the event log (NATS
// JetStream): kvscope.ev.<agent>.
const SubjectPrefix = "kvscope.ev."

// Detail, not stored: an agent's per-layer events (IsDetail) go to core
// NATS on its detail subject, kvscope.detail.<agent>, and only while some
// browser draws them. A replica says so on the agent's watch subject,
// kvscope.watch.<agent>, at least every WatchEvery while one of its
// browsers draws the agent (on WatchAll while one draws every agent); an
// agent sends detail while the last such word is younger than WatchLease.
// The event log's stream holds kvscope.ev.> only: nothing here is stored.
const (
	DetailPrefix = "kvscope.detail."
	WatchPrefix  = "kvscope.watch."
	WatchAll     = "kvscope.watchall"
	WatchAsk     = "kvscope.watchask" // a replica that starts asks who draws what

	WatchEvery = time.Second
	WatchLease = 3 * time.Second
)

// DetailSubject is an agent's detail subject, written as Subject writes
// the agent's name.
func DetailSubject(agent string) string { return subjectOf(DetailPrefix, agent) }

// WatchSubject is where replicas say that a browser draws the agent's
// detail.
func WatchSubject(agent string) string { return subjectOf(WatchPrefix, agent) }

// Subject is an agent's subject in the event log. NATS subject tokens
// cannot hold ".", "*", ">" or white space; those (and "~", the escape)
// are written ~XX, so the mapping is one to one and an agent's publish
// permission can be written from its name.
func Subject(agent string) string { return subjectOf(SubjectPrefix, agent) }

// subjectOf is an agent's subject under prefix, written as Subject says.
func subjectOf(prefix, agent string) string {
	var sb strings.Builder
	sb.WriteString(prefix)
	for i := 0; i < len(agent); i++ {
		c := agent[i]
		switch {
		case c == '.' || c == '*' || c == '>' || c == '~' || c <= ' ' || c >= 0x7f:
			fmt.Fprintf(&sb, "~%02X", c)
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

// AgentOfSubject is the agent whose subject in the event log subject is
// (Subject's inverse): an event log routes a message by the subject it
// was published on, which an agent's permissions bound, never by what the
// message says of itself.
func AgentOfSubject(subject string) (string, error) { return agentOf(SubjectPrefix, subject) }

// AgentOfDetail is the agent whose detail subject subject is
// (DetailSubject's inverse).
func AgentOfDetail(subject string) (string, error) { return agentOf(DetailPrefix, subject) }

// AgentOfWatch is the agent whose watch subject subject is
// (WatchSubject's inverse).
func AgentOfWatch(subject string) (string, error) { return agentOf(WatchPrefix, subject) }

// agentOf is the agent whose subject under prefix subject is.
func agentOf(prefix, subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok || rest == "" {
		return "", fmt.Errorf("subject %q: not an agent's (want %s<agent>)", Clip(subject, 80), prefix)
	}
	var sb strings.Builder
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c != '~' {
			sb.WriteByte(c)
			continue
		}
		if i+2 >= len(rest) {
			return "", fmt.Errorf("subject %q: a ~ at byte %d without two hex digits", Clip(subject, 80), len(prefix)+i)
		}
		v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("subject %q: ~%s at byte %d is not an escape", Clip(subject, 80), rest[i+1:i+3], len(prefix)+i)
		}
		sb.WriteByte(byte(v))
		i += 2
	}
	agent := sb.String()
	if err := CheckAgentName(agent); err != nil {
		return "", fmt.Errorf("subject %q: %w", Clip(subject, 80), err)
	}
	if subjectOf(prefix, agent) != subject { // one spelling per agent: ~2d for "-" is not the agent's subject
		return "", fmt.Errorf("subject %q: not how agent %q's subject is written (%s)", Clip(subject, 80), agent, subjectOf(prefix, agent))
	}
	return agent, nil
}
