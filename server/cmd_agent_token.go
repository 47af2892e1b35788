package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/kvscope/kvscope/core/event"
	"github.com/kvscope/kvscope/server/api"
)

// runAgentToken is kvscope serve agent-token NAME: the credential of the
// agents named NAME or NAME/..., made from the server's token. An agent
// presents it on /ws/agent (kvscope-agent --token) and to the embedded
// NATS server as its password (--nats); it lets it connect as no other
// agent, and the server keeps no list: a new --token revokes them all.
func runAgentToken(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("serve agent-token", flag.ContinueOnError)
	token := fs.String("token", os.Getenv("KVSCOPE_TOKEN"), "the server's token, as kvscope serve --token (default $KVSCOPE_TOKEN)")
	pos, err := parseWithArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return &usageError{fmt.Errorf("kvscope serve agent-token [--token T] NAME: want one agent name, got %d arguments", len(pos))}
	}
	if *token == "" {
		return &usageError{fmt.Errorf("--token: the server's token is needed (or $KVSCOPE_TOKEN)")}
	}
	if n := utf8.RuneCountInString(*token); n < api.MinTokenLen {
		return &usageError{fmt.Errorf("--token: %d characters, want at least %d (kvscope serve refuses a shorter one)", n, api.MinTokenLen)}
	}
	cred, err := event.IssueCredential(*token, pos[0])
	if err != nil {
		return &usageError{fmt.Errorf("NAME %q: %w", event.Clip(pos[0], 64), err)}
	}
	fmt.Fprintln(stdout, cred)
	return nil
}
