package hub

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/model"
)

func TestParseID(t *testing.T) {
	for _, tc := range []struct {
		ref  string
		want ID
		bad  bool
	}{
		{ref: "Qwen/Qwen3-8B", want: ID{"Qwen", "Qwen3-8B", "main"}},
		{ref: "org/name@v1.0", want: ID{"org", "name", "v1.0"}},
		{ref: "org/name@refs/pr/1", want: ID{"org", "name", "refs/pr/1"}},
		{ref: "org/name@" + mainCommit, want: ID{"org", "name", mainCommit}},
		{ref: "models/org__name.json", bad: true},
		{ref: "name", bad: true},
		{ref: "a/b/c", bad: true},
		{ref: "../etc/passwd", bad: true},
		{ref: "org/name@../../x", bad: true},
		{ref: "org/name@", bad: true},
		{ref: "0/0@.", bad: true},
		{ref: "org/name@v1/./x", bad: true},
	} {
		got, err := ParseID(tc.ref)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseID(%q) = %+v, want an error", tc.ref, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseID(%q) = %+v, %v; want %+v", tc.ref, got, err, tc.want)
		}
	}
}

// TestFetchFromTheHub asks the loopback Hub for each kind of model and
// checks the config, the commit and the error, which must say what to do.
func TestFetchFromTheHub(t *testing.T) {
	h := newFakeHub(t)
	qwen, llama := bundledConfig(t, "Qwen/Qwen3-8B"), bundledConfig(t, "meta-llama/Llama-3.1-8B")
	for _, tc := range []struct {
		name   string
		ref    string
		token  string
		want   []byte
		commit string
		errs   []string // the error says each of these
	}{
		{name: "a public model answers with its config and commit", ref: "testorg/public", want: qwen, commit: mainCommit},
		{name: "a tag resolves to its own commit", ref: "testorg/public@v1", want: llama, commit: v1Commit},
		{name: "a commit revision is fetched at that commit", ref: "testorg/public@" + mainCommit, want: qwen, commit: mainCommit},
		{name: "a gated model without a token says to set HF_TOKEN", ref: "testorg/gated", errs: []string{"HTTP 401", "gated or private", "set HF_TOKEN", "/testorg/gated/resolve/main/config.json"}},
		{name: "a gated model with the token answers", ref: "testorg/gated", token: testToken, want: llama, commit: mainCommit},
		{name: "a gated model with a wrong token says the token has no access", ref: "testorg/gated", token: "hf_other", errs: []string{"HTTP 401", "HF_TOKEN has no access"}},
		{name: "a missing revision is no such model or revision", ref: "testorg/public@nope", errs: []string{"HTTP 404", "no such model or revision", "/resolve/nope/"}},
		{name: "a missing model is no such model or revision", ref: "testorg/absent", errs: []string{"HTTP 404", "no such model or revision"}},
		{name: "a slow answer times out naming the URL", ref: "testorg/slow", errs: []string{"no answer within", "/testorg/slow/resolve/main/config.json", "kvscope models"}},
		{name: "a redirect to the CDN is followed, the commit read from the redirect", ref: "testorg/cdn", token: testToken, want: qwen, commit: mainCommit},
		{name: "a 50 MB answer is refused naming the URL", ref: "testorg/huge", errs: []string{"/testorg/huge/resolve/main/config.json", "byte limit"}},
		{name: "invalid JSON is refused naming the URL", ref: "testorg/garbage", errs: []string{"/testorg/garbage/resolve/main/config.json", "not valid JSON"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := resolver(t, map[string]string{"HF_ENDPOINT": h.URL, "HF_HUB_CACHE": t.TempDir(), "HF_TOKEN": tc.token})
			if tc.ref == "testorg/slow" {
				r.Timeout = 300 * time.Millisecond // the others keep resolver's 2 s, room on a loaded machine
			}
			data, src, err := r.Config(context.Background(), tc.ref)
			if tc.errs != nil {
				mustContain(t, err, tc.errs...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, tc.want) {
				t.Errorf("got %d bytes, not the served config (%d bytes)", len(data), len(tc.want))
			}
			if src.Commit != tc.commit || !strings.HasPrefix(src.URL, h.URL+"/") || src.Path == "" {
				t.Errorf("source %+v: want commit %s, a URL on %s and a cache path", src, tc.commit, h.URL)
			}
			if _, err := model.Parse(data); err != nil {
				t.Errorf("the fetched config does not parse: %v", err)
			}
		})
	}
}

// TestFetchWritesTheCacheLayout fetches once and checks the files
// huggingface_hub would have written, then that a second resolve reads
// them without asking the Hub.
func TestFetchWritesTheCacheLayout(t *testing.T) {
	h := newFakeHub(t)
	cache := t.TempDir()
	r := resolver(t, map[string]string{"HF_ENDPOINT": h.URL, "HF_HUB_CACHE": cache})
	for _, ref := range []string{"testorg/public", "testorg/public@v1"} {
		if _, _, err := r.Config(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	repo := filepath.Join(cache, "models--testorg--public")
	for path, want := range map[string][]byte{
		filepath.Join(repo, "refs", "main"):                         []byte(mainCommit),
		filepath.Join(repo, "refs", "v1"):                           []byte(v1Commit),
		filepath.Join(repo, "snapshots", mainCommit, "config.json"): bundledConfig(t, "Qwen/Qwen3-8B"),
		filepath.Join(repo, "snapshots", v1Commit, "config.json"):   bundledConfig(t, "meta-llama/Llama-3.1-8B"),
	} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("the cache lacks %s: %v", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s holds %d bytes, want %d", path, len(got), len(want))
		}
	}
	// No temporary files are left beside them.
	filepath.WalkDir(cache, func(p string, d os.DirEntry, err error) error {
		if strings.HasSuffix(p, ".tmp") {
			t.Errorf("left behind %s", p)
		}
		return err
	})
	before := h.requests.Load()
	_, src, err := r.Config(context.Background(), "testorg/public@v1")
	if err != nil {
		t.Fatal(err)
	}
	if h.requests.Load() != before || src.URL != "" || src.Commit != v1Commit {
		t.Errorf("a warm cache asked the Hub (%d requests) or named %+v", h.requests.Load()-before, src)
	}
}

// TestReadACacheLaidOutByHuggingFaceHub builds a cache as huggingface_hub
// documents it (refs/{revision} holding the commit, snapshots/{commit}/
// holding the files) and reads it through each way the cache is named,
// with a Hub that must see no request.
func TestReadACacheLaidOutByHuggingFaceHub(t *testing.T) {
	h := newFakeHub(t)
	qwen := bundledConfig(t, "Qwen/Qwen3-8B")
	build := func(t *testing.T, cache string) {
		repo := filepath.Join(cache, "models--someorg--Some-Model")
		for path, data := range map[string][]byte{
			filepath.Join(repo, "refs", "main"):                         []byte(mainCommit + "\n"),
			filepath.Join(repo, "snapshots", mainCommit, "config.json"): qwen,
			filepath.Join(repo, "blobs", "ignored"):                     []byte("x"),
		} {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	home := t.TempDir()
	for _, tc := range []struct {
		name  string
		vars  func(dir string) map[string]string
		cache func(dir string) string
		ref   string
	}{
		{name: "HF_HUB_CACHE names the cache", ref: "someorg/Some-Model",
			vars: func(d string) map[string]string { return map[string]string{"HF_HUB_CACHE": d} }, cache: func(d string) string { return d }},
		{name: "HF_HOME/hub is the cache without HF_HUB_CACHE", ref: "someorg/Some-Model",
			vars: func(d string) map[string]string { return map[string]string{"HF_HOME": d} }, cache: func(d string) string { return filepath.Join(d, "hub") }},
		{name: "the home directory's .cache/huggingface/hub is the default", ref: "someorg/Some-Model",
			vars: func(string) map[string]string { return map[string]string{} }, cache: func(string) string { return filepath.Join(home, ".cache", "huggingface", "hub") }},
		{name: "a commit revision reads its snapshot directly", ref: "someorg/Some-Model@" + mainCommit,
			vars: func(d string) map[string]string { return map[string]string{"HF_HUB_CACHE": d} }, cache: func(d string) string { return d }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			build(t, tc.cache(dir))
			vars := tc.vars(dir)
			vars["HF_ENDPOINT"] = h.URL
			r := resolver(t, vars)
			r.Home = home
			data, src, err := r.Config(context.Background(), tc.ref)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, qwen) || src.Commit != mainCommit || src.URL != "" ||
				src.Path != filepath.Join(tc.cache(dir), "models--someorg--Some-Model", "snapshots", mainCommit, "config.json") {
				t.Errorf("got %d bytes from %+v", len(data), src)
			}
			if n := h.requests.Load(); n != 0 {
				t.Errorf("the Hub saw %d requests for a cached model", n)
			}
			os.RemoveAll(filepath.Join(home, ".cache"))
		})
	}
}

// TestOfflineNeverTouchesTheNetwork: HF_HUB_OFFLINE=1 with a cold cache is
// an error naming the cache and what it holds, and the Hub sees nothing.
func TestOfflineNeverTouchesTheNetwork(t *testing.T) {
	h := newFakeHub(t)
	cache := t.TempDir()
	warm := resolver(t, map[string]string{"HF_ENDPOINT": h.URL, "HF_HUB_CACHE": cache})
	if _, _, err := warm.Config(context.Background(), "testorg/public"); err != nil {
		t.Fatal(err)
	}
	before := h.requests.Load()
	r := resolver(t, map[string]string{"HF_ENDPOINT": h.URL, "HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"})
	_, _, err := r.Config(context.Background(), "testorg/gated")
	mustContain(t, err, "HF_HUB_OFFLINE", cache, "testorg/public", "kvscope models")
	if _, src, err := r.Config(context.Background(), "testorg/public"); err != nil || src.Commit != mainCommit {
		t.Errorf("offline with a warm cache: %+v, %v", src, err)
	}
	if n := h.requests.Load() - before; n != 0 {
		t.Errorf("offline, the Hub saw %d requests", n)
	}
}

// TestNoNetworkListsTheCache: a Hub that cannot be reached is an error
// that says so and lists what the cache holds.
func TestNoNetworkListsTheCache(t *testing.T) {
	h := newFakeHub(t)
	cache := t.TempDir()
	warm := resolver(t, map[string]string{"HF_ENDPOINT": h.URL, "HF_HUB_CACHE": cache})
	if _, _, err := warm.Config(context.Background(), "testorg/public"); err != nil {
		t.Fatal(err)
	}
	h.Close()
	r := resolver(t, map[string]string{"HF_ENDPOINT": h.URL, "HF_HUB_CACHE": cache})
	_, _, err := r.Config(context.Background(), "testorg/other")
	mustContain(t, err, "offline", "testorg/public", "kvscope models", h.URL+"/testorg/other/resolve/main/config.json")
}

// TestBundledNamesStayLocal: a bundled name never reaches the resolver,
// and an id that is not bundled does.
func TestBundledNamesStayLocal(t *testing.T) {
	h := newFakeHub(t)
	r := resolver(t, map[string]string{"HF_ENDPOINT": h.URL, "HF_HUB_CACHE": t.TempDir()})
	m := Models{Catalog: bundledCatalog(), Hub: &r}
	for _, ref := range []string{"Qwen/Qwen3-8B", "gpt-oss-20b", "openai__gpt-oss-20b"} {
		name, _, src, err := m.Lookup(context.Background(), ref)
		if err != nil || src != nil {
			t.Errorf("%s: %s %+v %v, want the bundled config", ref, name, src, err)
		}
	}
	if n := h.requests.Load(); n != 0 {
		t.Errorf("bundled names made %d requests", n)
	}
	name, _, src, err := m.Lookup(context.Background(), "testorg/public@v1")
	if err != nil || src == nil || name != "testorg/public@v1" || src.Commit != v1Commit {
		t.Errorf("testorg/public@v1: %s %+v %v", name, src, err)
	}
	_, _, _, err = m.Lookup(context.Background(), "no-such-bundled-name")
	mustContain(t, err, "no bundled model")
}
