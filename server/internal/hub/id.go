// Package hub resolves a model named by its Hugging Face Hub id,
// "org/name[@revision]", to its config.json the way huggingface_hub does:
// first the local hub cache, then the Hub's resolve API, storing what it
// fetches into the cache in the cache's own layout.
//
// The cache is $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub. A model's files live under
// models--{org}--{name}: refs/{revision} holds the commit a revision
// (a branch or tag) points at, and snapshots/{commit}/config.json is the
// file at that commit. A revision that is itself a 40-hex commit is read
// from snapshots/{commit} directly.
//
// When the cache does not hold the file, the resolver asks
// {HF_ENDPOINT}/{org}/{name}/resolve/{revision}/config.json (HF_ENDPOINT
// defaults to https://huggingface.co, the revision to main), with
// HF_TOKEN as a bearer token when it is set, following redirects, under a
// timeout and a size limit. The answer's X-Repo-Commit header names the
// commit it is stored under. HF_HUB_OFFLINE=1 never touches the network.
//
// The package lives outside core, which stays standard library only and
// builds for the browser; Models puts it behind the same lookup the
// bundled catalog answers.
package hub

import (
	"fmt"
	"regexp"
	"strings"
)

// ID is a parsed Hub id: a repository and the revision asked for.
type ID struct {
	Org, Name string
	Revision  string // "main" when the id names none
}

// String is the id as "org/name@revision".
func (id ID) String() string { return id.Org + "/" + id.Name + "@" + id.Revision }

// Repo is "org/name".
func (id ID) Repo() string { return id.Org + "/" + id.Name }

// repoPart is what huggingface_hub accepts in an org or a model name.
var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// revisionRE is a branch, tag or commit: path-like, with no "." or ".."
// segment (checked beside it), so that refs/{revision} stays a file
// inside refs/.
var revisionRE = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// commitRE is a full commit hash.
var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// LooksLikeID reports whether ref has the shape of a Hub id rather than of
// a file path: "org/name" or "org/name@revision", with no ".json" suffix.
func LooksLikeID(ref string) bool {
	_, err := ParseID(ref)
	return err == nil
}

// ParseID reads "org/name[@revision]".
func ParseID(ref string) (ID, error) {
	repo, rev, hasRev := strings.Cut(ref, "@")
	if !hasRev {
		rev = "main"
	}
	org, name, ok := strings.Cut(repo, "/")
	switch {
	case !ok || !repoPart.MatchString(org) || !repoPart.MatchString(name):
		return ID{}, fmt.Errorf("hub id %q: want org/name[@revision]", ref)
	case strings.HasSuffix(name, ".json") || strings.Contains(org+name, ".."):
		return ID{}, fmt.Errorf("hub id %q: a file name, not a model id", ref)
	case !revisionRE.MatchString(rev) || strings.Contains(rev, ".."):
		return ID{}, fmt.Errorf("hub id %q: revision %q is not a branch, tag or commit", ref, rev)
	}
	for _, seg := range strings.Split(rev, "/") {
		if seg == "." {
			return ID{}, fmt.Errorf("hub id %q: revision %q is not a branch, tag or commit", ref, rev)
		}
	}
	return ID{Org: org, Name: name, Revision: rev}, nil
}

// isCommit reports whether a revision is a full commit hash.
func isCommit(rev string) bool { return commitRE.MatchString(rev) }
