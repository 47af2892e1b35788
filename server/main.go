// Command kvscope plans vLLM KV cache groups, computes and checks the
// descriptor geometry of prefill/decode KV transfers, and serves the browser
// app.
//
//	kvscope plan   --model M.json [engine flags] [--json]
//	kvscope pd     --model M.json --p-tensor-parallel-size N --d-tensor-parallel-size N [...] [--json]
//	kvscope oracle [--sweep | the pd flags] [--json]
//	kvscope check  LOG [--model M] [--draft D] [--vllm-version V] [--json]
//	kvscope versions [--json]
//	kvscope serve  [--addr A] [--token T] [--allowed-host H] [--agent embedded|none] [--record FILE.jsonl]
//	kvscope serve agent-token [--token T] NAME
//	kvscope replay [--speed S] [--addr A] [--token T] FILE.jsonl
//	kvscope models [--json]
//
// Every subcommand is a function of its arguments and an output writer, so
// tests run them exactly as a user does.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	name, summary string
	run           func(args []string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"plan", "plan one engine's KV cache groups and what they cost", runPlan},
		{"pd", "plan a prefill/decode pair and compute the descriptor geometry of a transfer", runPD},
		{"tune", "search P/D engine flags for the most D KV tokens, the fewest descriptors or a mix, as vLLM and the handshake allow", runTune},
		{"oracle", "prove a transfer on bytes, or run the sweep (--sweep)", runOracle},
		{"check", "hold a vLLM startup log against kvscope's plan, line by line (exit 3 when they differ, 4 when the log lacks lines a full judgement needs)", runCheck},
		{"versions", "list the vLLM version profiles and the table of behaviour changes", runVersions},
		{"serve", "serve the browser app and the JSON API (serve agent-token NAME: an agent's credential)", runServe},
		{"replay", "serve the app and play a recorded event file (serve --record) into its live view", runReplay},
		{"site", "write the browser app as a static website (no server needed)", runSite},
		{"models", "list the bundled model configs and which model families kvscope models, refuses (with the layer kind) or does not know", runModels},
		{"help", "a command's flags (kvscope help COMMAND), or the engine flags (kvscope help flags)", runHelp},
	}
}

// run dispatches a subcommand and returns the process exit code: 0 on
// success, 1 on an error, 2 on a usage error, 3 when kvscope check finds
// that a log and the plan differ.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout)
		var hr *helpRequest
		switch {
		case err == nil:
			return 0
		case errors.As(err, &hr):
			writeHelp(stderr, c, hr.fs)
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(differsError)):
			return 3
		case errors.As(err, new(partialError)):
			return 4
		case errors.As(err, new(*usageError)):
			fmt.Fprintf(stderr, "kvscope %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "kvscope %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "kvscope: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kvscope <command> [flags]")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "Run kvscope help <command> for its flags, kvscope help flags for the engine flags.")
}

// usageError is a bad command line, as opposed to a failed computation.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// parseFlags parses a flag set whose errors are returned, not printed twice.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &helpRequest{fs}
		}
		return &usageError{err}
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// parseWithArgs parses flags that may come before or after positional
// arguments, and returns the positional ones.
func parseWithArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		fs.SetOutput(io.Discard)
		if err := fs.Parse(args); err != nil {
			return nil, parseFlags(fs, args) // the same error, reported as parseFlags does
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
