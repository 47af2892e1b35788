package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// corpusRenames are the names a refactor changed on purpose: each old
// spelling in the baseline's output is read as the new one before the
// outputs are compared. Every entry says why.
var corpusRenames = []struct{ old, new, why string }{}

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
		for _, r := range corpusRenames {
			b = bytes.ReplaceAll(b, []byte(r.old), []byte(r.new))
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
