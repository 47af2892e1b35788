// Package vllm holds kvscope's version profiles: for every vLLM release
// from 0.10 on, for vLLM main and for the branch kvscope's group-pair
// transfers come from, which planner and connector behaviour that version
// has. One table (Changes) says, for each behaviour that changed, from
// which version it holds, the vLLM pull request behind it, and whether the
// release boundary was read from code, confirmed by a public thread, or
// inferred. Everything else in core asks a Profile, never a version
// number.
//
// The package is at the bottom of core: it imports nothing of kvscope's.
package vllm

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a point in vLLM's history: a release (0.11.1), vLLM main, or
// the group-pair branch. Releases order by number; main comes after every
// release and the branch after main (it is main plus its own changes).
type Version struct {
	Major, Minor, Patch int
	// Line is set for the two versions that are not releases: "main" or
	// the branch's name.
	Line string
	// Dev is set for a development build (0.11.1.dev42+gabc): kvscope
	// plans it as the release it leads to.
	Dev bool
	// Newer is set for a release newer than every release kvscope has
	// read (a log from a newer vLLM): kvscope plans it with the newest
	// release's rules and says so (inferred).
	Newer bool
	// Text is the version as written.
	Text string
}

// The names of the two profiles that are not releases.
const (
	// Main is vLLM main as far as kvscope has read it.
	Main = "main"
	// Branch is the branch kvscope's group-pair transfers model: vLLM PR
	// #58207's group-size selector plus the NixlConnector change motivated
	// by RFC #58638, which moves KV per pair of P and D cache groups.
	Branch = "pr58207"
)

// branchAliases are other names users give the branch.
var branchAliases = []string{Branch, "branch", "group-pairs", "pr58207-gp"}

// Newest is the newest vLLM release kvscope has a profile for; a user who
// names no version gets it. It is the newest release public material
// shows: v0.31.0, 2026-10-05, commit db9527a4
// (https://github.com/vllm-project/vllm/releases/tag/v0.31.0; the
// vllm/vllm-openai:v0.31.0 image; vllm==0.31.0 pins). No public tag,
// release note, image or pin read here shows a 0.32 or a 0.33, so a
// version past 0.31 plans with 0.31.0's rules, inferred (Version.Newer).
func Newest() Version { return mustVersion(releases[len(releases)-1].Name) }

// oldest is the first release kvscope models.
func oldest() Version { return Version{Major: 0, Minor: 10, Patch: 0} }

// ParseVersion reads a vLLM version as users and logs write it: "0.11",
// "0.11.0", "v0.10.1.1", "0.11.1rc6", "0.11.1.dev42+g1234abc", "main",
// "pr58207" (or "branch"), or "" and "latest" for the newest release.
// Versions before 0.10 are errors that say so; a release after the
// newest profile is planned as the newest, marked Newer.
func ParseVersion(s string) (Version, error) {
	text := strings.TrimSpace(s)
	low := strings.ToLower(text)
	switch low {
	case "", "latest", "newest", "release":
		return Newest(), nil
	case Main:
		return Version{Line: Main, Text: Main}, nil
	}
	for _, a := range branchAliases {
		if low == a {
			return Version{Line: Branch, Text: Branch}, nil
		}
	}
	num := strings.TrimPrefix(low, "v")
	v := Version{Text: text}
	if i := strings.IndexAny(num, "+"); i >= 0 {
		num = num[:i]
	}
	if i := strings.Index(num, ".dev"); i >= 0 {
		v.Dev = true
		num = num[:i]
	}
	if i := strings.Index(num, "rc"); i >= 0 {
		num = num[:i]
	}
	parts := strings.Split(num, ".")
	if len(parts) < 2 || len(parts) > 4 {
		return Version{}, versionErr(text, "want a release such as 0.11.0, or main, or "+Branch)
	}
	var nums [4]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 9999 {
			return Version{}, versionErr(text, "want a release such as 0.11.0, or main, or "+Branch)
		}
		nums[i] = n
	}
	v.Major, v.Minor, v.Patch = nums[0], nums[1], nums[2]
	if v.Less(oldest()) {
		return Version{}, versionErr(text, "kvscope's profiles start at vLLM 0.10.0 (the first V1 releases with the hybrid KV cache manager)")
	}
	if n := Newest(); v.Major > n.Major || v.Major == n.Major && v.Minor > n.Minor {
		v.Newer = true
	}
	return v, nil
}

// VersionError reports a version kvscope has no profile for.
type VersionError struct {
	Version string
	Reason  string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("--vllm-version %q: %s", e.Version, e.Reason)
}

func versionErr(v, reason string) error { return &VersionError{Version: v, Reason: reason} }

// IsRelease reports whether v is a numbered release (or a build of one).
func (v Version) IsRelease() bool { return v.Line == "" }

// Name is the canonical name: "0.11.1", "main" or "pr58207".
func (v Version) Name() string {
	if v.Line != "" {
		return v.Line
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// rank orders versions: releases by number, then main, then the branch.
func (v Version) rank() [4]int {
	switch v.Line {
	case Main:
		return [4]int{1 << 20}
	case Branch:
		return [4]int{1 << 21}
	}
	return [4]int{v.Major, v.Minor, v.Patch}
}

// Less reports whether v comes before w.
func (v Version) Less(w Version) bool {
	a, b := v.rank(), w.rank()
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// mustVersion parses a version from the package's own table.
func mustVersion(s string) Version {
	switch s {
	case Main:
		return Version{Line: Main, Text: Main}
	case Branch:
		return Version{Line: Branch, Text: Branch}
	}
	v := Version{Text: s}
	nums := [3]*int{&v.Major, &v.Minor, &v.Patch}
	for i, part := range strings.SplitN(s, ".", 3) {
		n, err := strconv.Atoi(part)
		if err != nil {
			return Version{Major: 1 << 19} // never reached: the table is tested
		}
		*nums[i] = n
	}
	return v
}
