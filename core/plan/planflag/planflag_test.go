package planflag

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/core/vllm"
)

func parse(t *testing.T, args ...string) *Set {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := Add(fs, "p", "d")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSidesOverridePlainFlags: a plain flag sets both engines, a p- or d-
// flag only its side and over the plain one, whatever their order; a
// toggle's "no-" spelling turns it off on its side.
func TestSidesOverridePlainFlags(t *testing.T) {
	s := parse(t, "--d-block-size", "32", "--block-size", "16", "--kv-cache-memory-bytes", "8GiB", "--p-no-async-scheduling", "--vllm-version", "0.19.0")
	p, err := s.Engine("p")
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Engine("d")
	if err != nil {
		t.Fatal(err)
	}
	if p.BlockSize != 16 || d.BlockSize != 32 || p.KVCacheMemoryBytes != 8<<30 || d.KVCacheMemoryBytes != 8<<30 {
		t.Errorf("P %+v\nD %+v", p, d)
	}
	if !p.NoAsyncScheduling || d.NoAsyncScheduling || d.AsyncScheduling {
		t.Errorf("async: P %v/%v, D %v/%v", p.AsyncScheduling, p.NoAsyncScheduling, d.AsyncScheduling, d.NoAsyncScheduling)
	}
	if p.VLLMVersion != "0.19.0" || d.VLLMVersion != "0.19.0" {
		t.Errorf("versions %q %q", p.VLLMVersion, d.VLLMVersion)
	}
}

// TestErrorsNameTheFlagAsSpelled: a bad value names the flag as the user
// wrote it, with its side; both spellings of a toggle contradict; a
// block size the version's command line refuses is refused.
func TestErrorsNameTheFlagAsSpelled(t *testing.T) {
	for _, c := range []struct {
		args []string
		side string
		want string
	}{
		{[]string{"--d-tensor-parallel-size", "0"}, "d", `--d-tensor-parallel-size "0": want a positive integer`},
		{[]string{"--tensor-parallel-size", "two"}, "p", `--tensor-parallel-size "two": want a positive integer`},
		{[]string{"--p-kv-cache-memory-bytes", "lots"}, "p", `--p-kv-cache-memory-bytes "lots": want a positive size`},
		{[]string{"--async-scheduling", "--no-async-scheduling"}, "", "--async-scheduling and --no-async-scheduling contradict each other"},
		{[]string{"--p-enable-prefix-caching", "--p-no-enable-prefix-caching"}, "p", "--p-enable-prefix-caching and --p-no-enable-prefix-caching contradict"},
		{[]string{"--block-size", "7", "--vllm-version", "0.19.0"}, "d", "--block-size 7"},
		{[]string{"--vllm-version", "0.9.9"}, "", "0.9.9"},
	} {
		s := parse(t, c.args...)
		if _, err := s.Engine(c.side); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestOverlayAppliesOnlyWhatIsGiven: Overlay changes the flags the command
// line names and keeps the rest of the engine; a refused flag is an error
// with the caller's reason.
func TestOverlayAppliesOnlyWhatIsGiven(t *testing.T) {
	base := plan.Engine{VLLMVersion: "0.20.0", TensorParallelSize: 4, MaxModelLen: 8192}
	s := parse(t, "--max-model-len", "4096", "--d-selector", "balanced")
	e := base
	if err := s.Overlay("d", &e, nil); err != nil {
		t.Fatal(err)
	}
	if e.TensorParallelSize != 4 || e.MaxModelLen != 4096 || e.Selector != "balanced" || e.VLLMVersion != "0.20.0" {
		t.Errorf("overlay: %+v", e)
	}
	e = base
	if err := s.Overlay("p", &e, nil); err != nil || e.Selector != "" {
		t.Errorf("P took D's selector: %+v, %v", e, err)
	}
	s = parse(t, "--kv-cache-memory-bytes", "1GiB")
	if err := s.Overlay("", &e, map[string]string{"kv-cache-memory-bytes": "the log says"}); err == nil || err.Error() != "--kv-cache-memory-bytes: the log says" {
		t.Errorf("a refused flag: %v", err)
	}
}

// TestUsageListsEveryFlag: the help lists every flag of the table with its
// default in the profile asked for, and every registered flag is an
// engine flag by IsEngineFlag.
func TestUsageListsEveryFlag(t *testing.T) {
	prof := vllm.For(vllm.Newest())
	var b bytes.Buffer
	Usage(&b, &prof, "p", "d")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	Add(fs, "p", "d")
	for _, f := range plan.Flags() {
		if !strings.Contains(b.String(), "--"+f.Name) || !strings.Contains(b.String(), "(default "+f.Default(&prof)+")") {
			t.Errorf("the usage lacks --%s or its default", f.Name)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !IsEngineFlag(f.Name) {
			t.Errorf("--%s is registered but not an engine flag", f.Name)
		}
	})
	if IsEngineFlag("model") || IsEngineFlag("p-model") {
		t.Error("--model is no engine flag")
	}
}
