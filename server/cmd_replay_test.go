package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplayCommandErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"v":1,"agent":"a","seq":1,"kind":"sample","sample":{}}`+"\n"+`{"v":1,"agent":"a","seq":2,"kind":"sample"}`+"\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"replay"}, 2, "give one recording"},
		{[]string{"replay", "--speed", "-1", bad}, 2, "--speed -1"},
		{[]string{"replay", filepath.Join(dir, "missing.jsonl")}, 1, "no such file"},
		{[]string{"replay", bad}, 1, "line 2: event: event 0: kind: kind sample without its payload"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("kvscope %v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.want)
		}
	}
}

func TestParseWithArgs(t *testing.T) {
	for _, c := range []struct {
		args  []string
		files string
		speed float64
		err   string
	}{
		{[]string{"a.jsonl"}, "[a.jsonl]", 1, ""},
		{[]string{"--speed", "3", "a.jsonl"}, "[a.jsonl]", 3, ""},
		{[]string{"a.jsonl", "--speed", "2", "b"}, "[a.jsonl b]", 2, ""},
		{[]string{"--speed", "x", "a.jsonl"}, "", 0, "invalid value"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		speed := fs.Float64("speed", 1, "")
		files, err := parseWithArgs(fs, c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(files) != c.files || *speed != c.speed {
			t.Errorf("%v: files %v speed %v err %v", c.args, files, *speed, err)
		}
	}
}
