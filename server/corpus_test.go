package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
)

// corpusChanges are what a refactor changed on purpose: each rewrites the
// baseline's output as this build prints it before the outputs are
// compared. Every entry says why.
func corpusChanges() []struct {
	why string
	fix func([]byte) []byte
} {
	engineMerge := regexp.MustCompile(`("balanced_lambda": [^\n]*\n\s*)"bucket_merge"`)
	return []struct {
		why string
		fix func([]byte) []byte
	}{
		{"issue 23: an engine's JSON keys are its flags' names in snake case (--kv-cache-bucket-merge)",
			func(b []byte) []byte { return engineMerge.ReplaceAll(b, []byte(`${1}"kv_cache_bucket_merge"`)) }},
		{"issue 23: vllm serve lines list the flags in the engine-flag table's order", reorderServeLines},
		{"issue 23: the usage names kvscope help, whose command reference comes from the flag table",
			func(b []byte) []byte {
				return bytes.ReplaceAll(b, []byte("Run kvscope <command> -h for its flags.\n"),
					[]byte("  help     a command's flags (kvscope help COMMAND), or the engine flags (kvscope help flags)\nRun kvscope help <command> for its flags, kvscope help flags for the engine flags.\n"))
			}},
	}
}

// reorderServeLines puts the flags of every "vllm serve MODEL ..." line
// (up to its --speculative-config or --kv-transfer-config) in the
// engine-flag table's order.
func reorderServeLines(b []byte) []byte {
	rank := map[string]int{}
	for i, f := range plan.Flags() {
		rank["--"+f.Name], rank["--no-"+f.Name] = i, i
	}
	var out []byte
	for {
		i := bytes.Index(b, []byte("vllm serve "))
		if i < 0 {
			return append(out, b...)
		}
		out = append(out, b[:i]...)
		b = b[i:]
		end := len(b)
		for _, stop := range []string{" --speculative-config", " --kv-transfer-config", "\n", "\""} {
			if j := bytes.Index(b, []byte(stop)); j >= 0 && j < end {
				end = j
			}
		}
		words := strings.Fields(string(b[:end]))
		type arg struct{ words []string }
		var args []arg
		for _, w := range words[3:] {
			if strings.HasPrefix(w, "--") || len(args) == 0 {
				args = append(args, arg{[]string{w}})
			} else {
				args[len(args)-1].words = append(args[len(args)-1].words, w)
			}
		}
		sort.SliceStable(args, func(i, j int) bool { return rank[args[i].words[0]] < rank[args[j].words[0]] })
		line := words[:3]
		for _, a := range args {
			line = append(line, a.words...)
		}
		out = append(out, strings.Join(line, " ")...)
		b = b[end:]
	}
}

// TestCorpus runs every command line of testdata/corpus.txt through two
// kvscope binaries, KVSCOPE_BASELINE (an earlier build) and KVSCOPE_BIN
// (this one), from the repository root, and requires the same stdout,
// stderr and exit status from both: the guard of a refactor that must not
// change what kvscope prints. make corpus BASE=path/to/old/kvscope runs it.
func TestCorpus(t *testing.T) {
	base, bin := os.Getenv("KVSCOPE_BASELINE"), os.Getenv("KVSCOPE_BIN")
	if base == "" || bin == "" {
		t.Skip("set KVSCOPE_BASELINE and KVSCOPE_BIN (make corpus BASE=...)")
	}
	f, err := os.Open("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 300 {
		t.Fatalf("the corpus has %d command lines, want at least 300", len(lines))
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		stdout, stderr []byte
		code           int
	}
	runOne := func(exe string, args []string) (result, error) {
		cmd := exec.Command(exe, args...)
		cmd.Dir = root
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code, err = ee.ExitCode(), nil
		}
		return result{out.Bytes(), errb.Bytes(), code}, err
	}
	rename := func(b []byte) []byte {
		for _, c := range corpusChanges() {
			b = c.fix(b)
		}
		return b
	}
	var mu sync.Mutex
	failed := 0
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, line := range lines {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			args := strings.Fields(line)
			want, err := runOne(base, args)
			if err != nil {
				t.Errorf("line %d %q: baseline: %v", i+1, line, err)
				return
			}
			got, err := runOne(bin, args)
			if err != nil {
				t.Errorf("line %d %q: %v", i+1, line, err)
				return
			}
			var diffs []string
			if got.code != want.code {
				diffs = append(diffs, fmt.Sprintf("exit %d, baseline %d", got.code, want.code))
			}
			for _, s := range []struct {
				name      string
				got, want []byte
			}{{"stdout", got.stdout, rename(want.stdout)}, {"stderr", got.stderr, rename(want.stderr)}} {
				if !bytes.Equal(s.got, s.want) {
					diffs = append(diffs, fmt.Sprintf("%s differs at byte %d:\n  got:  %q\n  want: %q", s.name, firstDiff(s.got, s.want), excerpt(s.got, s.want), excerpt(s.want, s.got)))
				}
			}
			if len(diffs) > 0 {
				mu.Lock()
				failed++
				mu.Unlock()
				t.Errorf("kvscope %s:\n%s", line, strings.Join(diffs, "\n"))
			}
		}()
	}
	wg.Wait()
	t.Logf("%d command lines, %d differ", len(lines), failed)
}

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// excerpt is a's text around where it first differs from b.
func excerpt(a, b []byte) string {
	i := firstDiff(a, b)
	lo, hi := max(0, i-80), min(len(a), i+120)
	return string(a[lo:hi])
}
