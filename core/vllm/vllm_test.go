package vllm

import (
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in, name string
		dev      bool
		err      string
	}{
		{"", Newest().Name(), false, ""},
		{"latest", Newest().Name(), false, ""},
		{"0.11", "0.11.0", false, ""},
		{"v0.10.1.1", "0.10.1", false, ""},
		{"0.11.1rc6.dev115+gbc92", "0.11.1", true, ""},
		{"0.13.0+faa43dbf.nv26.01", "0.13.0", false, ""},
		{"main", Main, false, ""},
		{"branch", Branch, false, ""},
		{"PR58207", Branch, false, ""},
		{"0.9.0", "", false, "start at vLLM 0.10.0"},
		{"0.40.0", "0.40.0", false, ""},
		{"1.0", "1.0.0", false, ""},
		{"eleven", "", false, "want a release"},
		{"0.x.1", "", false, "want a release"},
	}
	for _, tt := range tests {
		v, err := ParseVersion(tt.in)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want an error naming %q", tt.in, err, tt.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tt.in, err)
		case v.Name() != tt.name || v.Dev != tt.dev:
			t.Errorf("%q: %s dev %v, want %s dev %v", tt.in, v.Name(), v.Dev, tt.name, tt.dev)
		}
	}
}

// TestNewerThanEveryProfile: a release newer than the newest profile is
// planned with the newest release's rules (the same profile, but for its
// name), marked newer, labelled and listed as inferred; the newest itself
// and a build of it are not.
func TestNewerThanEveryProfile(t *testing.T) {
	newest := For(Newest())
	for _, in := range []string{"0.40.0", "1.0", "v0.99.1rc2"} {
		p, err := Lookup(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if !p.Version.Newer || len(p.Rules) != len(newest.Rules) || p.Selector != newest.Selector || p.MergeBuckets != newest.MergeBuckets || p.AsyncDefault != newest.AsyncDefault {
			t.Errorf("%q: newer %v, %d rules (want %d, the newest release's)", in, p.Version.Newer, len(p.Rules), len(newest.Rules))
		}
		inf := p.Inferred()
		if len(inf) == 0 || !strings.Contains(inf[0], "newer than the newest release kvscope has read ("+Newest().Name()+")") || !strings.Contains(p.Label, "inferred") {
			t.Errorf("%q: inferred %q, label %q", in, inf, p.Label)
		}
	}
	for _, in := range []string{Newest().Name(), Newest().Name() + ".dev7+gabc", "main"} {
		if v, err := ParseVersion(in); err != nil || v.Newer {
			t.Errorf("%q: newer %v, %v", in, v.Newer, err)
		}
	}
}

// The table is the one place that says when a behaviour changed: every row
// names a known version, a rule and a source, and rows come in version
// order so that a later row of a behaviour wins.
func TestChangesTableIsWellFormed(t *testing.T) {
	known := map[string]bool{}
	for _, v := range Versions() {
		known[v] = true
	}
	var last Version
	for i, c := range Changes() {
		if !known[c.From] {
			t.Errorf("row %d (%s): version %q is not among Versions()", i, c.What(), c.From)
		}
		v := mustVersion(c.From)
		if v.Less(last) {
			t.Errorf("row %d (%s from %s) comes after a row from %s", i, c.What(), c.From, last.Name())
		}
		last = v
		if c.Rule == "" || c.Source == "" || c.apply == nil {
			t.Errorf("row %d (%s): rule, source and effect are required", i, c.What())
		}
		switch c.Evidence {
		case Read, Confirmed, Inferred:
		default:
			t.Errorf("row %d (%s): evidence %q", i, c.What(), c.Evidence)
		}
	}
	vs := Versions()
	for i := 1; i < len(vs); i++ {
		if !mustVersion(vs[i-1]).Less(mustVersion(vs[i])) {
			t.Errorf("Versions() out of order at %s, %s", vs[i-1], vs[i])
		}
	}
	if vs[len(vs)-3] != Newest().Name() {
		t.Errorf("the newest release %s is not the last release of Versions()", Newest().Name())
	}
}

func TestProfilesFollowTheTable(t *testing.T) {
	tests := []struct {
		version string
		check   func(p Profile) bool
		what    string
	}{
		{"0.11.0", func(p Profile) bool { return p.Selector == SelectorMin }, "0.10-0.11: g = the smallest bucket"},
		{"0.12.0", func(p Profile) bool { return p.Selector == SelectorMinOrMax && p.Threshold == 1.25 }, "#29303: 1.25"},
		{"0.17.1", func(p Profile) bool { return p.Threshold == 1.25 }, "0.17 still 1.25"},
		{"0.18.0", func(p Profile) bool { return p.Threshold == 1.5 }, "#36684: 1.5 from 0.18"},
		{"0.25.1", func(p Profile) bool { return !p.InFlightBatches }, "one batch before #47728"},
		{"0.26.0", func(p Profile) bool { return p.InFlightBatches }, "#47728 from 0.26"},
		{"0.20.0", func(p Profile) bool { return p.KVSizeLine == SizePerGroup }, "0.20.0 logs blocks per group"},
		{"0.20.1", func(p Profile) bool { return p.KVSizeLine == SizeConcurrency }, "#41069 from 0.20.1"},
		{"0.19.0", func(p Profile) bool { return p.Align == AlignBackend }, "0.19 aligns to the kernel block"},
		{"0.20.0", func(p Profile) bool { return p.Align == AlignBackendUser }, "#37467 from 0.20"},
		{"0.19.1", func(p Profile) bool { return p.SSMHooks["nemotron-h"] == "checkpoint:float16" }, "NemotronH float16 through 0.19"},
		{"0.20.0", func(p Profile) bool { return p.SSMHooks["nemotron-h"] == "checkpoint:float32" }, "#39032 float32 from 0.20"},
		{"0.16.0", func(p Profile) bool { _, ok := p.SSMHooks["qwen3.5"]; return !ok }, "no Qwen3.5 hook before 0.17"},
		{"0.27.1", func(p Profile) bool { return p.HybridPrefixCaching == "opt-in" }, "hybrid prefix caching opt-in until 0.28"},
		{"0.28.0", func(p Profile) bool { return p.HybridPrefixCaching == "on" && p.PrefixMambaMode == "align" }, "#50991"},
		{"0.23.0", func(p Profile) bool { return !p.PushConnector }, "no NixlPushConnector in 0.23"},
		{"0.24.0", func(p Profile) bool { return p.PushConnector }, "NixlPushConnector from 0.24"},
		{"0.28.0", func(p Profile) bool { return !p.NullBlock }, "no null block in 0.28"},
		{"0.29.0", func(p Profile) bool { return p.NullBlock }, "#47272 from 0.29"},
		{Main, func(p Profile) bool { return p.Selector == SelectorMinOrMax && !p.GroupPairs }, "main has the classic rule and no group pairs"},
		{Branch, func(p Profile) bool {
			return p.Selector == SelectorPaddingBytes && p.GroupPairs && p.TPInvariant && !p.NullBlock
		}, "the branch"},
	}
	for _, tt := range tests {
		p, err := Lookup(tt.version)
		if err != nil {
			t.Fatal(err)
		}
		if !tt.check(p) {
			t.Errorf("%s: %s does not hold", tt.version, tt.what)
		}
		if p.Name != tt.version {
			t.Errorf("profile name %q for %q", p.Name, tt.version)
		}
	}
}

func TestSSMDTypeHooks(t *testing.T) {
	p19, _ := Lookup("0.19.0")
	if d, note := p19.SSMDType("qwen3_5_text", "float32", "bfloat16"); d != "float32" || note == "" {
		t.Errorf("0.19 Qwen3.5 with float32 declared: %s %q", d, note)
	}
	if d, _ := p19.SSMDType("qwen3_5_text", "", "bfloat16"); d != "bfloat16" {
		t.Errorf("0.19 Qwen3.5 declaring nothing: %s, want the model dtype (no float32 default)", d)
	}
	if d, _ := p19.SSMDType("nemotron_h", "", "bfloat16"); d != "float16" {
		t.Errorf("0.19 NemotronH: %s", d)
	}
	br, _ := Lookup(Branch)
	if d, _ := br.SSMDType("qwen3_5_moe_text", "float32", "bfloat16"); d != "bfloat16" {
		t.Errorf("branch: %s", d)
	}
	p16, _ := Lookup("0.16.0")
	if !p16.SSMFlagIgnored("qwen3_next") || (Profile{}).SSMFlagIgnored("qwen3_next") {
		t.Error("Qwen3-Next ignores --mamba-ssm-cache-dtype before 0.17 only")
	}
}
