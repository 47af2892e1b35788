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

func notes(published string) string { return "its release notes, published " + published }

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
	{"0.14.1", "2026-01-24", DateShown, "", tag("0.14.1") + "; " + notes("2026-01-24T20:29:27Z") + "; vllm==0.14.1 pins"},
	{"0.15.0", "2026-01-29", DateShown, "", tag("0.15.0") + "; " + notes("2026-01-29T10:21:01Z")},
	{"0.15.1", "2026-02-04", DateShown, "", tag("0.15.1") + "; " + notes("2026-02-04T20:48:08Z") + "; a startup log in testdata/vllm-logs prints 0.15.1"},
	{"0.16.0", "2026-02-25", DateShown, "", tag("0.16.0") + "; " + notes("2026-02-25T19:58:49Z") + " (\"branch cut on Feb 8\")"},
	{"0.17.0", "2026-03-07", DateShown, "", tag("0.17.0") + "; " + notes("2026-03-07T00:46:41Z") + " (the first release with Qwen3.5, #34110)"},
	{"0.17.1", "2026-03-11", DateShown, "", tag("0.17.1") + "; " + notes("2026-03-11T10:24:34Z") + "; vllm==0.17.1 pins"},
	{"0.18.0", "2026-03-20", DateShown, "", tag("0.18.0") + "; " + notes("2026-03-20T21:31:36Z")},
	{"0.18.1", "2026-03-31", DateShown, "", tag("0.18.1") + "; " + notes("2026-03-31T00:53:26Z")},
	{"0.19.0", "2026-04-03", DateShown, "", tag("0.19.0") + "; " + notes("2026-04-03T02:19:12Z") + " (Gemma 4, #38826); startup logs in testdata/vllm-logs print 0.19.0"},
	{"0.19.1", "2026-04-18", DateShown, "", tag("0.19.1") + "; " + notes("2026-04-18T05:44:42Z") + "; startup logs in testdata/vllm-logs print 0.19.1"},
	{"0.20.0", "2026-04-27", DateShown, "", tag("0.20.0") + "; " + notes("2026-04-27T21:20:28Z") + "; startup logs in testdata/vllm-logs print 0.20.0"},
	{"0.20.1", "2026-05-04", DateShown, "", tag("0.20.1") + "; " + notes("2026-05-04T10:36:26Z") + "; vllm==0.20.1 pins"},
	{"0.20.2", "2026-05-10", DateShown, "", tag("0.20.2") + "; " + notes("2026-05-10T07:37:57Z") + "; startup logs in testdata/vllm-logs print 0.20.2"},
	{"0.21.0", "2026-05-15", DateShown, "", tag("0.21.0") + "; " + notes("2026-05-15T08:44:26Z")},
	{"0.22.0", "2026-05-29", DateShown, "", tag("0.22.0") + "; " + notes("2026-05-29T10:28:13Z") + " (a feed dates it 2026-06-02); a startup log in testdata/vllm-logs prints 0.22.0"},
	{"0.22.1", "2026-06-05", DateShown, "", tag("0.22.1") + "; " + notes("2026-06-05T10:10:00Z") + "; vllm==0.22.1 pins"},
	{"0.23.0", "2026-06-15", DateShown, "", tag("0.23.0") + "; " + notes("2026-06-15T05:27:20Z")},
	{"0.24.0", "2026-06-29", DateShown, "", tag("0.24.0") + "; " + notes("2026-06-29T19:41:59Z") + "; vllm==0.24.0 pins; club-3090#612 prints v0.24.0"},
	{"0.25.0", "2026-07-11", DateShown, "", tag("0.25.0") + "; " + notes("2026-07-11T20:06:44Z")},
	{"0.25.1", "2026-07-14", DateShown, "", tag("0.25.1") + "; " + notes("2026-07-14T08:51:20Z") + "; a startup log in testdata/vllm-logs prints 0.25.1"},
	{"0.26.0", "2026-07-25", DateShown, "", tag("0.26.0") + "; on PyPI 2026-07-25, its release notes published 2026-07-27T01:06:58Z; vllm#49878 and vllm#51041 (image v0.26.0-cu129) run it"},
	{"0.27.0", "2026-08-10", DateShown, "", tag("0.27.0") + "; " + notes("2026-08-10T21:18:11Z")},
	{"0.27.1", "2026-08-11", DateShown, "", tag("0.27.1") + "; published 2026-08-11T10:47:49Z; vllm==0.27.1 pins"},
	{"0.28.0", "2026-08-26", DateShown, "", tag("0.28.0") + "; its release feed entry of 2026-08-26T10:17:05Z and PyPI 2026-08-26; club-3090#1120 runs 0.28.0 (no 0.28.1 release is shown)"},
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
