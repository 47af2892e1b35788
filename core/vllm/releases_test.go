package vllm

import (
	"slices"
	"strings"
	"testing"
)

// TestReleasesHaveEvidence: kvscope profiles a release only where public
// material shows it: every row names its tag and where it is shown, dates
// come in release order, and the newest is v0.31.0 (2026-10-05, commit
// db9527a4: the release issue 25 found as the newest shown). 0.32 and
// 0.33, which nothing shows, are newer than every profile.
func TestReleasesHaveEvidence(t *testing.T) {
	rs := Releases()
	last := ""
	for _, r := range rs {
		if !strings.Contains(r.Evidence, "https://github.com/vllm-project/vllm/releases/tag/v"+r.Name) {
			t.Errorf("%s: evidence %q names no tag", r.Name, r.Evidence)
		}
		d := strings.TrimPrefix(r.Released, "≤")
		if r.Released != "" && (len(d) != 10 || d[4] != '-' || d[7] != '-' || r.DateEvidence == "") {
			t.Errorf("%s: released %q (%s)", r.Name, r.Released, r.DateEvidence)
		}
		if d != "" && d < last {
			t.Errorf("%s: released %s before the release before it (%s)", r.Name, d, last)
		}
		if d != "" {
			last = d
		}
	}
	n := rs[len(rs)-1]
	if n.Name != "0.31.0" || n.Released != "2026-10-05" || !strings.HasPrefix(n.Commit, "db9527a4") || Newest().Name() != n.Name {
		t.Errorf("newest %+v, Newest() %s", n, Newest().Name())
	}
	for _, v := range []string{"0.32.0", "0.33.0", "0.32.0rc1.dev12+gabc"} {
		if _, ok := ReleaseOf(strings.SplitN(v, "rc", 2)[0]); ok {
			t.Errorf("%s has a profile row", v)
		}
		if ver, err := ParseVersion(v); err != nil || !ver.Newer {
			t.Errorf("%s: newer %v, %v", v, ver.Newer, err)
		}
	}
	if !slices.Equal(Versions()[:len(rs)], func() []string {
		var s []string
		for _, r := range rs {
			s = append(s, r.Name)
		}
		return s
	}()) {
		t.Error("Versions() is not the release table plus main and the branch")
	}
}

// TestHandshakeOfEachVersion: a release's handshake follows vLLM's
// version history (the constant's comment in nixl/metadata.py): no hash
// before version 1, cross_layers_blocks hashed from 3 until 7 replaced it
// with the transfer mode, block_strides from 9, region_members from 12;
// kvscope's own 15 only for the branch.
func TestHandshakeOfEachVersion(t *testing.T) {
	tests := []struct {
		version        string
		want           int
		hashHas        []string
		hashLacks      []string
		members        []string
		membersLack    []string
		kvscopeOwnWant bool
	}{
		{"0.10.0", 0, nil, []string{"model"}, []string{"engine_id", "block_lens"}, []string{"physical_blocks_per_logical_kv_block"}, false},
		{"0.16.0", 3, []string{"cross_layers_blocks", "is_hma_enabled"}, []string{"transfer_mode"}, []string{"physical_blocks_per_logical_kv_block"}, []string{"ssm_sizes"}, false},
		{"0.20.0", 3, []string{"cross_layers_blocks"}, nil, nil, []string{"block_strides"}, false},
		{"0.27.0", 7, []string{"transfer_mode", "speculative_config"}, []string{"cross_layers_blocks"}, []string{"ssm_sizes"}, []string{"dcp_size"}, false},
		{"0.29.0", 9, nil, nil, []string{"block_strides", "dcp_size"}, []string{"region_group_ids"}, false},
		{"0.31.0", 12, nil, nil, []string{"region_group_ids", "region_members"}, nil, false},
		{Branch, 15, nil, nil, []string{"region_members"}, nil, true},
	}
	for _, tt := range tests {
		p, err := Lookup(tt.version)
		if err != nil {
			t.Fatal(err)
		}
		h := p.Handshake()
		if h.Version != tt.want || h.Wrapped != (tt.want >= 1) || h.KvscopeOwn != tt.kvscopeOwnWant || h.Rule.Behaviour != BHandshake {
			t.Errorf("%s: version %d wrapped %v own %v rule %q; want %d", tt.version, h.Version, h.Wrapped, h.KvscopeOwn, h.Rule.Behaviour, tt.want)
		}
		for _, s := range tt.hashHas {
			if !slices.Contains(h.HashInputs, s) {
				t.Errorf("%s: hash inputs %q lack %s", tt.version, h.HashInputs, s)
			}
		}
		for _, s := range tt.hashLacks {
			if slices.Contains(h.HashInputs, s) {
				t.Errorf("%s: hash inputs %q have %s", tt.version, h.HashInputs, s)
			}
		}
		for _, s := range tt.members {
			if !slices.Contains(h.Members, s) {
				t.Errorf("%s: members %q lack %s", tt.version, h.Members, s)
			}
		}
		for _, s := range tt.membersLack {
			if slices.Contains(h.Members, s) {
				t.Errorf("%s: members %q have %s", tt.version, h.Members, s)
			}
		}
	}
}

// TestVersionOfMembers: what a decoder tells of an engine from the
// members it sent: the newest member decides.
func TestVersionOfMembers(t *testing.T) {
	tests := []struct {
		members []string
		wrapped bool
		want    int
		why     string
	}{
		{[]string{"engine_id", "block_lens"}, false, 0, ""},
		{[]string{"engine_id", "block_lens"}, true, 1, "compatibility_hash"},
		{[]string{"engine_id", "physical_blocks_per_logical_kv_block", "ssm_sizes"}, true, 4, "ssm_sizes"},
		{[]string{"block_strides", "dcp_size"}, true, 9, "block_strides"},
		{[]string{"region_members", "region_group_ids", "block_strides"}, true, 12, "region_members"},
	}
	for _, tt := range tests {
		if v, why := VersionOfMembers(tt.members, tt.wrapped); v != tt.want || why != tt.why {
			t.Errorf("%q wrapped %v: %d (%s), want %d (%s)", tt.members, tt.wrapped, v, why, tt.want, tt.why)
		}
	}
	if rs := ReleasesSpeaking(12); !slices.Contains(rs, "0.31.0") || slices.Contains(rs, "0.30.0") {
		t.Errorf("releases speaking 12: %q", rs)
	}
}

// TestUnlistedPatchRelease: a patch release no public material shows
// (0.28.1) plans with the rules before it and says so.
func TestUnlistedPatchRelease(t *testing.T) {
	p, err := Lookup("0.28.1")
	if err != nil {
		t.Fatal(err)
	}
	inf := p.Inferred()
	if len(inf) == 0 || !strings.Contains(inf[0], "0.28.1 is not a release kvscope has read") || !strings.Contains(p.Label, "not a release kvscope has read") {
		t.Errorf("label %q, inferred %q", p.Label, inf)
	}
	if q, _ := Lookup("0.28.0"); strings.Contains(q.Label, "not a release") || len(q.Rules) != len(p.Rules) {
		t.Errorf("0.28.0: label %q, %d rules (0.28.1: %d)", q.Label, len(q.Rules), len(p.Rules))
	}
}
