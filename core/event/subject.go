package event

import (
	"fmt"
	"strconv"
	"strings"
)

// SubjectPrefix starts every agent's subject in the event log (NATS
// JetStream): kvscope.ev.<agent>.
const SubjectPrefix = "kvscope.ev."

// Subject is an agent's subject in the event log. NATS subject tokens
// cannot hold ".", "*", ">" or white space; those (and "~", the escape)
// are written ~XX, so the mapping is one to one and an agent's publish
// permission can be written from its name.
func Subject(agent string) string {
	var sb strings.Builder
	sb.WriteString(SubjectPrefix)
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
func AgentOfSubject(subject string) (string, error) {
	rest, ok := strings.CutPrefix(subject, SubjectPrefix)
	if !ok || rest == "" {
		return "", fmt.Errorf("subject %q: not an agent's (want %s<agent>)", Clip(subject, 80), SubjectPrefix)
	}
	var sb strings.Builder
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c != '~' {
			sb.WriteByte(c)
			continue
		}
		if i+2 >= len(rest) {
			return "", fmt.Errorf("subject %q: a ~ at byte %d without two hex digits", Clip(subject, 80), len(SubjectPrefix)+i)
		}
		v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("subject %q: ~%s at byte %d is not an escape", Clip(subject, 80), rest[i+1:i+3], len(SubjectPrefix)+i)
		}
		sb.WriteByte(byte(v))
		i += 2
	}
	agent := sb.String()
	if err := CheckAgentName(agent); err != nil {
		return "", fmt.Errorf("subject %q: %w", Clip(subject, 80), err)
	}
	if Subject(agent) != subject { // one spelling per agent: ~2d for "-" is not the agent's subject
		return "", fmt.Errorf("subject %q: not how agent %q's subject is written (%s)", Clip(subject, 80), agent, Subject(agent))
	}
	return agent, nil
}
