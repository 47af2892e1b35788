package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/core/model/modeltest"
)

// TestParseHubID reads the ids kvscope's --model takes as Hub ids and
// refuses file names and paths, as server/internal/hub.ParseID does.
func TestParseHubID(t *testing.T) {
	for _, tt := range []struct {
		ref  string
		want string // the id as the settings keep it, "" for refused
		url  string
	}{
		{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B", "https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json"},
		{"org/name@v1.0", "org/name@v1.0", "https://huggingface.co/org/name/resolve/v1.0/config.json"},
		{"org/name@main", "org/name", "https://huggingface.co/org/name/resolve/main/config.json"},
		{"org/name@refs/pr/1", "org/name@refs/pr/1", "https://huggingface.co/org/name/resolve/refs%2Fpr%2F1/config.json"},
		{"org/my_model-2.5", "org/my_model-2.5", "https://huggingface.co/org/my_model-2.5/resolve/main/config.json"},
		{"gpt-oss-20b", "", ""},
		{"config.json", "", ""},
		{"org/config.json", "", ""},
		{"../x", "", ""},
		{"a/b@../../c", "", ""},
		{"a/b@", "", ""},
		{"a/b@x//y", "", ""},
		{"/etc/passwd", "", ""},
		{"a/b/c", "", ""},
		{"-a/b", "", ""},
		{"a/b c", "", ""},
	} {
		t.Run(tt.ref, func(t *testing.T) {
			id, ok := parseHubID(tt.ref)
			if got := map[bool]string{true: id.String()}[ok]; got != tt.want {
				t.Fatalf("parseHubID(%q) = %q, %v; want %q", tt.ref, got, ok, tt.want)
			}
			if ok && id.configURL(DefaultHubEndpoint+"/") != tt.url {
				t.Errorf("URL %s, want %s", id.configURL(DefaultHubEndpoint), tt.url)
			}
		})
	}
}

// TestHubModels: a bundled name never reaches the Hub; a Hub id the page
// fetched plans as the same config bundled does; one on its way, one that
// failed and one the server forbids to fetch say so in the model field.
func TestHubModels(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(modeltest.Dir(), "Qwen__Qwen3-0.6B.json"))
	if err != nil {
		t.Fatal(err)
	}
	fetched := map[string]*hubConfig{
		"someone/tiny@v2": {URL: "https://huggingface.co/someone/tiny/resolve/v2/config.json", Data: data},
		"someone/gated":   {URL: "u", Err: hubError(hubID{"someone", "gated", "main"}, "u", 401, 0, "", nil)},
		"someone/slow":    {URL: "https://hub.example/someone/slow/resolve/main/config.json", Pending: true},
	}
	h := hubModels{Catalog: testCatalog(), fetched: fetched, endpoint: DefaultHubEndpoint}
	s := blankSettings()
	s.P.TensorParallelSize, s.D.TensorParallelSize = 1, 2
	s.Model = "Qwen/Qwen3-0.6B"
	want := Compute(s, testCatalog(), nil)
	for _, tt := range []struct {
		model, offline, err string
	}{
		{model: "Qwen/Qwen3-0.6B"},
		{model: "Qwen/Qwen3-0.6B", offline: "HF_HUB_OFFLINE is set on the server"},
		{model: "someone/tiny@v2"},
		{model: "someone/gated", err: "HTTP 401: the model is gated or private, and the browser sends no token: download its config.json"},
		{model: "someone/slow", err: "fetching config.json from https://hub.example/someone/slow/resolve/main/config.json…"},
		{model: "someone/other", offline: "HF_HUB_OFFLINE is set on the server", err: "someone/other is not bundled, and HF_HUB_OFFLINE is set on the server: nothing is fetched; bundled models: "},
		{model: "someone/new", err: "fetching config.json from https://huggingface.co/someone/new/resolve/main/config.json…"},
		{model: "no-such-model", err: "no bundled model"},
	} {
		t.Run(tt.model+" "+tt.offline, func(t *testing.T) {
			h.offline = tt.offline
			s.Model = tt.model
			r := Compute(s, h, nil)
			if tt.err != "" {
				if !strings.Contains(r.Errors["model"], tt.err) || r.OK() {
					t.Errorf("model error %q, want %q", r.Errors["model"], tt.err)
				}
				return
			}
			if !r.OK() {
				t.Fatalf("errors %v", r.Errors)
			}
			p, d := r.Plans()
			wp, wd := want.Plans()
			if p.KVCacheTokens != wp.KVCacheTokens || d.KVCacheTokens != wd.KVCacheTokens || r.Model.Name != tt.model {
				t.Errorf("%s: %d/%d KV tokens as %q, the bundled config %d/%d", tt.model, p.KVCacheTokens, d.KVCacheTokens, r.Model.Name, wp.KVCacheTokens, wd.KVCacheTokens)
			}
		})
	}
}

// TestHubErrors: each answer of the Hub says what it means.
func TestHubErrors(t *testing.T) {
	id := hubID{"org", "name", "main"}
	for _, tt := range []struct {
		name          string
		status, size  int
		failure, want string
	}{
		{"a config", 200, 100, "", ""},
		{"gated", 403, 0, "", "HTTP 403: the model is gated or private, and the browser sends no token: download its config.json from the Hub (with access) and choose custom to paste, drop or pick it"},
		{"no such model", 404, 0, "", "HTTP 404: no such model or revision"},
		{"no answer", 0, 0, "TypeError: Failed to fetch", "no answer (TypeError: Failed to fetch): offline? Bundled models: a/b, c/d"},
		{"a server error", 502, 0, "", "HTTP 502"},
		{"too large", 200, maxConfigBytes + 1, "", "more than the 4194304-byte limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := hubError(id, "https://h/org/name/resolve/main/config.json", tt.status, tt.size, tt.failure, []string{"a/b", "c/d"})
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) || tt.want != "" && !strings.HasPrefix(got, "org/name: https://h/org/name/resolve/main/config.json: ") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
