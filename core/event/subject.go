package event

import (
	"fmt"
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
