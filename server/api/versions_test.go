package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvscope/kvscope/core/catalog"
)

// TestVersionsEndpoint: GET /api/versions lists only releases with
// evidence, each with its date, where it is shown and the handshake
// version it speaks, and defaults to the newest (0.31.0, released
// 2026-10-05, handshake version 12).
func TestVersionsEndpoint(t *testing.T) {
	s := New(catalog.Bundled(), Limits{MaxMemory: 1 << 30, MaxPairs: 1 << 20, MaxResponse: 1 << 20, QueueWait: time.Second, MaxQueue: 1})
	mux := http.NewServeMux()
	s.Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/versions", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got struct {
		Default  string `json:"default"`
		Profiles []struct {
			Name     string `json:"name"`
			Released string `json:"released"`
			Evidence string `json:"evidence"`
			Kind     string `json:"kind"`
			Nixl     int    `json:"nixl_connector_version"`
		} `json:"profiles"`
		Handshakes []struct {
			Version int `json:"version"`
		} `json:"handshake_versions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	var newest struct {
		released string
		nixl     int
	}
	for _, p := range got.Profiles {
		if p.Kind == "release" && p.Evidence == "" {
			t.Errorf("%s: no evidence", p.Name)
		}
		if p.Name == "0.32.0" || p.Name == "0.33.0" {
			t.Errorf("a profile for %s, which no public source shows", p.Name)
		}
		if p.Name == got.Default {
			newest.released, newest.nixl = p.Released, p.Nixl
		}
	}
	if got.Default != "0.31.0" || newest.released != "2026-10-05" || newest.nixl != 12 || len(got.Handshakes) < 12 {
		t.Errorf("default %s released %q handshake v%d, %d handshake versions", got.Default, newest.released, newest.nixl, len(got.Handshakes))
	}
}
