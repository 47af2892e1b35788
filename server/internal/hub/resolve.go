package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// MaxConfigBytes caps a config.json from the Hub or the cache: the largest
// real config is tens of KiB.
const MaxConfigBytes = 4 << 20

// DefaultEndpoint is the Hub, when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// DefaultTimeout bounds one fetch from the Hub, redirects included.
const DefaultTimeout = 10 * time.Second

// Source says where a config.json came from.
type Source struct {
	ID       string `json:"id"`       // "org/name"
	Revision string `json:"revision"` // as asked, "main" by default
	Commit   string `json:"commit,omitempty"`
	// Path is the file in the hub cache (read, or written after a fetch).
	Path string `json:"path,omitempty"`
	// URL is the resolve URL, when the config was fetched.
	URL string `json:"url,omitempty"`
}

// Where is the source in one phrase: "hub cache PATH (commit C)", or
// "URL (commit C), stored as PATH" when it was fetched.
func (s Source) Where() string {
	var b strings.Builder
	if s.URL != "" {
		b.WriteString(s.URL)
	} else {
		b.WriteString("hub cache " + s.Path)
	}
	if s.Commit != "" {
		b.WriteString(" (commit " + s.Commit + ")")
	}
	if s.URL != "" && s.Path != "" {
		b.WriteString(", stored as " + s.Path)
	}
	return b.String()
}

// Resolver finds Hub ids' configs. Its zero value, with Getenv set, is
// ready: the environment is read through Getenv on every call, so tests
// pass their own.
type Resolver struct {
	// Getenv reads HF_HUB_CACHE, HF_HOME, HF_ENDPOINT, HF_TOKEN and
	// HF_HUB_OFFLINE; nil reads nothing (every default holds).
	Getenv func(string) string
	// Client makes the requests; nil is http.DefaultClient's transport.
	// Its redirect policy is replaced, its timeout kept when shorter.
	Client *http.Client
	// Timeout bounds one fetch; 0 is DefaultTimeout.
	Timeout time.Duration
	// Home is the user's home directory for the default cache; "" asks
	// os.UserHomeDir.
	Home string
}

func (r Resolver) env(k string) string {
	if r.Getenv == nil {
		return ""
	}
	return r.Getenv(k)
}

// CacheDir is the hub cache the resolver reads and writes.
func (r Resolver) CacheDir() (string, error) {
	if d := r.env("HF_HUB_CACHE"); d != "" {
		return d, nil
	}
	if d := r.env("HF_HOME"); d != "" {
		return filepath.Join(d, "hub"), nil
	}
	home := r.Home
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", fmt.Errorf("hub cache: no HF_HUB_CACHE or HF_HOME, and %w", err)
		}
	}
	return filepath.Join(home, ".cache", "huggingface", "hub"), nil
}

// Offline reports HF_HUB_OFFLINE as huggingface_hub reads it: nothing is
// fetched.
func (r Resolver) Offline() bool {
	switch strings.ToLower(strings.TrimSpace(r.env("HF_HUB_OFFLINE"))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// Endpoint is the Hub the resolver asks: HF_ENDPOINT without a trailing
// slash, else DefaultEndpoint.
func (r Resolver) Endpoint() string {
	if e := strings.TrimRight(r.env("HF_ENDPOINT"), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Config returns the config.json of ref, "org/name[@revision]", and where
// it came from: the cache when it holds the revision, else the Hub (and
// then the cache holds it).
func (r Resolver) Config(ctx context.Context, ref string) ([]byte, Source, error) {
	id, err := ParseID(ref)
	if err != nil {
		return nil, Source{}, err
	}
	src := Source{ID: id.Repo(), Revision: id.Revision}
	cache, err := r.CacheDir()
	if err != nil {
		return nil, src, err
	}
	data, commit, path, found, err := readCache(cache, id)
	if err != nil {
		return nil, src, fmt.Errorf("%s: %w", id, err)
	}
	if found {
		src.Commit, src.Path = commit, path
		if !json.Valid(data) {
			return nil, src, fmt.Errorf("%s: %s is not valid JSON", id, path)
		}
		return data, src, nil
	}
	if r.Offline() {
		return nil, src, fmt.Errorf("%s: HF_HUB_OFFLINE is set and the hub cache %s does not hold it (%s); bundled models: kvscope models",
			id, cache, cachedList(cache))
	}
	data, commit, u, err := r.fetch(ctx, id, cache)
	src.URL = u
	if err != nil {
		return nil, src, err
	}
	src.Commit = commit
	if commit == "" {
		// The Hub always names the commit; a server that does not cannot
		// be cached under the layout, so the answer is used once.
		return data, src, nil
	}
	if src.Path, err = writeCache(cache, id, commit, data); err != nil {
		return nil, src, fmt.Errorf("%s: fetched from %s, but %w", id, u, err)
	}
	return data, src, nil
}

// cachedList names the models a cache holds, for an error message.
func cachedList(cache string) string {
	ids := cachedIDs(cache)
	if len(ids) == 0 {
		return "it holds no model configs"
	}
	return "it holds " + strings.Join(ids, ", ")
}

// fetch asks the Hub's resolve API for id's config.json.
func (r Resolver) fetch(ctx context.Context, id ID, cache string) (data []byte, commit, u string, err error) {
	u = r.Endpoint() + "/" + url.PathEscape(id.Org) + "/" + url.PathEscape(id.Name) + "/resolve/" + url.PathEscape(id.Revision) + "/" + configFile
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, "", u, fmt.Errorf("%s: %w", id, err)
	}
	token := r.env("HF_TOKEN")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("User-Agent", "kvscope")
	// The commit header may come on a redirect (a file stored on the CDN)
	// rather than on the final answer: keep the first one seen.
	client := http.Client{}
	if r.Client != nil {
		client = *r.Client
	}
	client.CheckRedirect = func(next *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return fmt.Errorf("more than 10 redirects")
		}
		if commit == "" && next.Response != nil {
			commit = next.Response.Header.Get("X-Repo-Commit")
		}
		return nil
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is named once, below
		}
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return nil, "", u, fmt.Errorf("%s: %s: no answer within %v: offline or slow? the hub cache %s: %s; bundled models: kvscope models",
				id, u, timeout, cache, cachedList(cache))
		}
		return nil, "", u, fmt.Errorf("%s: %s: %w: offline? the hub cache %s: %s; bundled models: kvscope models",
			id, u, err, cache, cachedList(cache))
	}
	defer resp.Body.Close()
	if c := resp.Header.Get("X-Repo-Commit"); c != "" {
		commit = c
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if token == "" {
			return nil, "", u, fmt.Errorf("%s: %s: HTTP %d: the model is gated or private: set HF_TOKEN to a token with access (and accept the model's terms on the Hub)", id, u, resp.StatusCode)
		}
		return nil, "", u, fmt.Errorf("%s: %s: HTTP %d: the model is gated or private and HF_TOKEN has no access to it (accept the model's terms on the Hub, or use a token that has)", id, u, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound:
		return nil, "", u, fmt.Errorf("%s: %s: HTTP 404: no such model or revision (check the id and the @revision; bundled models: kvscope models)", id, u)
	case resp.StatusCode != http.StatusOK:
		return nil, "", u, fmt.Errorf("%s: %s: HTTP %d", id, u, resp.StatusCode)
	}
	if resp.ContentLength > MaxConfigBytes {
		return nil, "", u, fmt.Errorf("%s: %s: %d bytes, more than the %d-byte limit of a config.json", id, u, resp.ContentLength, MaxConfigBytes)
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, MaxConfigBytes+1))
	if err != nil {
		return nil, "", u, fmt.Errorf("%s: %s: reading the answer: %w", id, u, err)
	}
	if len(data) > MaxConfigBytes {
		return nil, "", u, fmt.Errorf("%s: %s: more than the %d-byte limit of a config.json", id, u, MaxConfigBytes)
	}
	if !json.Valid(data) {
		return nil, "", u, fmt.Errorf("%s: %s: the answer is not valid JSON", id, u)
	}
	if commit != "" && !isCommit(commit) {
		return nil, "", u, fmt.Errorf("%s: %s: X-Repo-Commit %q is not a commit hash", id, u, commit)
	}
	if isCommit(id.Revision) && commit != "" && commit != id.Revision {
		return nil, "", u, fmt.Errorf("%s: %s: asked for commit %s, the answer is at %s", id, u, id.Revision, commit)
	}
	if commit == "" && isCommit(id.Revision) {
		commit = id.Revision
	}
	return data, commit, u, nil
}
