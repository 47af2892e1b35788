package vllm

import "slices"

// Release is one vLLM release kvscope has a profile for, with the date it
// was released and where public material shows it. kvscope profiles a
// release only where a public tag, release note, image or pin shows it.
type Release struct {
	Name string `json:"name"` // "0.28.0"
	// Released is the release date (YYYY-MM-DD); "≤YYYY-MM-DD" when only
	// a bound is shown; "" when no date is shown.
	Released string `json:"released"`
	// DateEvidence says how the date is known: "shown" (a tag, release
	// page or dated pin names it), "bounded" (a dated mention bounds it) or
	// "recalled" (the project's reading of the release page, not re-read).
	DateEvidence string `json:"date_evidence"`
	Commit       string `json:"commit,omitempty"` // the tag's commit, where shown
	// Evidence is where the release is shown: the tag or release page,
	// images, pins, release notes or logs that print the version.
	Evidence string `json:"evidence"`
}

// The kinds of date evidence.
const (
	DateShown    = "shown"
	DateBounded  = "bounded"
	DateRecalled = "recalled"
)

func tag(v string) string { return "https://github.com/vllm-project/vllm/releases/tag/v" + v }

// releases is the table of profiled releases, oldest first. The last row
// is the newest release (Newest).
var releases = []Release{
	{"0.10.0", "2025-07-24", DateRecalled, "", tag("0.10.0")},
	{"0.10.1", "2025-08-18", DateRecalled, "", tag("0.10.1") + "; 0.10.1.1 followed on 2025-08-20"},
	{"0.10.2", "2025-09-13", DateRecalled, "", tag("0.10.2") + "; ships Qwen3-Next (#24526)"},
	{"0.11.0", "2025-10-02", DateRecalled, "", tag("0.11.0") + "; startup logs in testdata/vllm-logs print 0.11.0"},
	{"0.11.1", "2025-11-18", DateShown, "", tag("0.11.1") + "; dated in AWS Deep Learning Containers' release notes"},
	{"0.11.2", "2025-11-20", DateShown, "", tag("0.11.2") + "; dated in AWS Deep Learning Containers' release notes (vllm-project/recipes#131: #29223 is not in it)"},
	{"0.12.0", "2025-12-03", DateRecalled, "", tag("0.12.0")},
	{"0.13.0", "2025-12-18", DateRecalled, "", tag("0.13.0") + "; startup logs in testdata/vllm-logs print 0.13.0"},
	{"0.14.0", "≤2026-01-20", DateBounded, "", tag("0.14.0") + "; named with #27614 and #31998 in torch-spyre#636 and djl#3833"},
	{"0.14.1", "2026-01-24", DateRecalled, "", tag("0.14.1") + "; vllm==0.14.1 pins (kserve's pyproject, public install scripts)"},
	{"0.15.0", "2026-01-29", DateRecalled, "", tag("0.15.0")},
	{"0.15.1", "≤2026-02-04", DateBounded, "", tag("0.15.1") + "; vllm==0.15.1 pins; a startup log in testdata/vllm-logs prints 0.15.1"},
	{"0.16.0", "", "", "", tag("0.16.0") + "; runpod-workers/worker-vllm#279 (0.16.0 refuses Qwen3_5Moe); vllm-gaudi#1087 (a v0.16.0 baseline)"},
	{"0.17.0", "≤2026-03-07", DateBounded, "", tag("0.17.0") + "; runpod-workers/worker-vllm#279 (the first release with Qwen3.5)"},
	{"0.17.1", "≤2026-03-11", DateBounded, "", tag("0.17.1") + "; vllm==0.17.1 pins; vllm-gaudi#1224 (cherry-pick to v0.17.1)"},
	{"0.18.0", "≤2026-03-30", DateBounded, "", tag("0.18.0") + "; the 0.19.0 release notes list #32951 and #37812 as new after it"},
	{"0.19.0", "≤2026-04-13", DateBounded, "", tag("0.19.0") + "; its release notes list Gemma 4 (#38826); startup logs in testdata/vllm-logs print 0.19.0"},
	{"0.20.0", "≤2026-04-29", DateBounded, "", tag("0.20.0") + "; dependabot bumps to 0.20.0 on 2026-04-29; startup logs in testdata/vllm-logs print 0.20.0"},
	{"0.20.1", "≤2026-05-05", DateBounded, "", tag("0.20.1") + "; vllm==0.20.1 pins (\"the latest stable vllm==0.20.1 ships only CUDA 13 wheels\")"},
	{"0.20.2", "≤2026-05-15", DateBounded, "", tag("0.20.2") + "; startup logs in testdata/vllm-logs print 0.20.2 (a log dated 05-15)"},
	{"0.21.0", "≤2026-05-16", DateBounded, "", tag("0.21.0") + "; vllm#43308 compares 0.20.0 with 0.21.0"},
	{"0.22.0", "2026-05-30", DateShown, "", tag("0.22.0") + "; dated by AWS Deep Learning Containers PR 6177; a startup log in testdata/vllm-logs prints 0.22.0"},
	{"0.22.1", "2026-06-05", DateShown, "", tag("0.22.1") + "; AWS Deep Learning Containers PR 6207; vllm==0.22.1 pins"},
	{"0.23.0", "2026-06-14", DateShown, "", tag("0.23.0") + "; AWS Deep Learning Containers PR 6244"},
	{"0.24.0", "2026-07-01", DateShown, "", tag("0.24.0") + "; AWS Deep Learning Containers PR 6329; vllm==0.24.0 pins; club-3090#612 prints v0.24.0"},
	{"0.25.0", "≤2026-07-12", DateBounded, "", tag("0.25.0") + "; vllm#51454 runs 0.25.0"},
	{"0.25.1", "≤2026-07-15", DateBounded, "", tag("0.25.1") + "; vllm==0.25.1 pins; vllm#49878 names the regression from v0.25.1 to v0.26; a startup log in testdata/vllm-logs prints 0.25.1"},
	{"0.26.0", "≤2026-07-26", DateBounded, "", tag("0.26.0") + "; vllm==0.26.0 pins; vllm#49878 and vllm#51041 (image v0.26.0-cu129) run it"},
	{"0.27.0", "≤2026-08-11", DateBounded, "", tag("0.27.0") + "; vllm#51742 links v0.27.0's kv_cache_utils.py"},
	{"0.27.1", "≤2026-08-16", DateBounded, "", tag("0.27.1") + "; vllm==0.27.1 pins; Tanguille/cluster#4509 (2026-08-16) runs 0.27.1"},
	{"0.28.0", "2026-08-26", DateShown, "", tag("0.28.0") + "; AWS Deep Learning Containers PR 6667, coreweave#218; club-3090#1120 runs 0.28.0"},
	{"0.28.1", "", "", "", tag("0.28.1") + "; the image vllm/vllm-openai:v0.28.1 named as an engine image by public deployment tooling, and vendor builds vllm==0.28.1+dtk2604 (built 2026-09-17); no release date shown"},
	{"0.29.0", "2026-09-09", DateShown, "98dff2a81d747d1dba01a47f939f48c3526d4206", tag("0.29.0") + "; a release digest (594 commits, Model Runner V2 by default); vllm==0.29.0 pins; vllm-metal 0.29.0 of 2026-09-11; the commit from one public study (not cross-checked)"},
	{"0.30.0", "2026-09-22", DateShown, "ced6857afa0ea7b2e3f0846a62e1394e90f15607", tag("0.30.0") + "; the image vllm/vllm-openai:v0.30.0 and the wheel vllm-0.30.0+cu129 pinned publicly; AMD-AGI/TraceLens#1055 (2026-09-23) calls it the latest release"},
	{"0.31.0", "2026-10-05", DateShown, "db9527a46873454610df6dbedf79a36d6bf1a7f6", tag("0.31.0") + " (2026-10-05T06:44:55Z); the image vllm/vllm-openai:v0.31.0 whose config pins commit db9527a4; vllm==0.31.0 pins; the newest release public material shows (a v0.31.1rc0 tag and 0.31.1rc1 nightlies exist, no 0.31.1, 0.32 or 0.33 release)"},
}

// Releases lists the profiled releases, oldest first, with their dates
// and evidence (a copy).
func Releases() []Release { return slices.Clone(releases) }

// ReleaseOf returns the table row of a profiled release.
func ReleaseOf(name string) (Release, bool) {
	for _, r := range releases {
		if r.Name == name {
			return r, true
		}
	}
	return Release{}, false
}

// ProfileRow is one profile as kvscope versions lists it: a release with
// its date and evidence, or main or the branch, and the handshake version
// it speaks.
type ProfileRow struct {
	Release
	Kind        string `json:"kind"` // release, main or branch
	NixlVersion int    `json:"nixl_connector_version"`
}

// Overview is everything kvscope versions prints: the default, the
// profiles with their evidence, the handshake's version history and the
// table of behaviour changes.
type Overview struct {
	Default    string            `json:"default"`
	Versions   []string          `json:"versions"`
	Profiles   []ProfileRow      `json:"profiles"`
	Handshakes []MetadataVersion `json:"handshake_versions"`
	Changes    []Change          `json:"changes"`
}

// Describe builds the overview.
func Describe() Overview {
	o := Overview{Default: Newest().Name(), Versions: Versions(), Handshakes: MetadataVersions(), Changes: Changes()}
	for _, r := range releases {
		o.Profiles = append(o.Profiles, ProfileRow{Release: r, Kind: "release", NixlVersion: For(mustVersion(r.Name)).NixlVersion})
	}
	for _, name := range []string{Main, Branch} {
		p := For(mustVersion(name))
		kind := name
		if name == Branch {
			kind = "branch"
		}
		o.Profiles = append(o.Profiles, ProfileRow{Release: Release{Name: name, Evidence: p.Label}, Kind: kind, NixlVersion: p.NixlVersion})
	}
	return o
}
