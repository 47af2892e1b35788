package hub

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	modelcatalog "github.com/kvscope/kvscope/core/catalog"
	"github.com/kvscope/kvscope/core/model"
)

// Commits the fake Hub answers with.
const (
	mainCommit = "0123456789abcdef0123456789abcdef01234567"
	v1Commit   = "89abcdef0123456789abcdef0123456789abcdef"
	testToken  = "hf_test_token"
)

// fakeHub is a loopback server laid out as the Hub's resolve API,
// /{org}/{name}/resolve/{revision}/config.json, serving real bundled
// configs under ids that are not bundled.
type fakeHub struct {
	*httptest.Server
	cdn      *httptest.Server // another host, as the Hub's CDN is
	requests atomic.Int64
	// release unblocks the slow model's handler.
	release chan struct{}
}

// bundledConfig is a real config.json from core/catalog/models.
func bundledConfig(t testing.TB, name string) []byte {
	t.Helper()
	_, data, err := modelcatalog.Bundled().Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func newFakeHub(t testing.TB) *fakeHub {
	t.Helper()
	qwen := bundledConfig(t, "Qwen/Qwen3-8B")
	llama := bundledConfig(t, "meta-llama/Llama-3.1-8B")
	h := &fakeHub{release: make(chan struct{})}
	mux := http.NewServeMux()
	serve := func(w http.ResponseWriter, commit string, body []byte) {
		w.Header().Set("X-Repo-Commit", commit)
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}
	mux.HandleFunc("GET /{org}/{name}/resolve/{rev}/config.json", func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		repo, rev := r.PathValue("org")+"/"+r.PathValue("name"), r.PathValue("rev")
		switch repo {
		case "testorg/public":
			switch rev {
			case "main", mainCommit:
				serve(w, mainCommit, qwen)
			case "v1":
				serve(w, v1Commit, llama)
			default:
				http.Error(w, "Revision Not Found", http.StatusNotFound)
			}
		case "testorg/gated":
			if r.Header.Get("Authorization") != "Bearer "+testToken {
				http.Error(w, "Access to model testorg/gated is restricted", http.StatusUnauthorized)
				return
			}
			serve(w, mainCommit, llama)
		case "testorg/slow":
			select {
			case <-h.release:
			case <-r.Context().Done():
			}
		case "testorg/cdn":
			// The Hub answers a file on its CDN with a redirect that
			// carries the commit; the CDN answers without it.
			w.Header().Set("X-Repo-Commit", mainCommit)
			// Named localhost, it is another host than 127.0.0.1, as the
			// Hub's CDN is another host than the Hub.
			cdnURL := strings.Replace(h.cdn.URL, "127.0.0.1", "localhost", 1)
			http.Redirect(w, r, cdnURL+"/cdn/blobs/abc123?signature=x", http.StatusFound)
		case "testorg/huge":
			w.Header().Set("X-Repo-Commit", mainCommit)
			chunk := bytes.Repeat([]byte(" "), 1<<20)
			w.Write([]byte("{"))
			for range 50 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			w.Write([]byte("}"))
		case "testorg/garbage":
			serve(w, mainCommit, []byte(`{"model_type": "llama", "hidden_size": `))
		default:
			http.Error(w, "Repository Not Found", http.StatusNotFound)
		}
	})
	// The CDN is another host: the token is not sent there.
	cdn := http.NewServeMux()
	cdn.HandleFunc("GET /cdn/blobs/{blob}", func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "the CDN takes no token", http.StatusBadRequest)
			return
		}
		w.Write(qwen)
	})
	h.cdn = httptest.NewServer(cdn)
	h.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(h.release)
		h.Close()
		h.cdn.Close()
	})
	return h
}

// env is a fixed environment for a Resolver, so a test never reads the
// real one (or the real ~/.cache).
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func resolver(t testing.TB, vars map[string]string) Resolver {
	return Resolver{Getenv: env(vars), Timeout: 2 * time.Second, Home: t.TempDir()}
}

func mustContain(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

func bundledCatalog() model.Catalog { return modelcatalog.Bundled() }
