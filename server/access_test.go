package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/kvscope/kvscope/server/api"
)

// do sends one request and returns its status and Location.
func do(t *testing.T, h http.Handler, method, target, body string, header map[string]string) (int, http.Header) {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for k, v := range header {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Header()
}

const planBody = `{"model":"Qwen/Qwen3-0.6B"}`

// TestAccessRules: the Host, method, CSRF and asset rules of a loopback
// server without a token (issue 10).
func TestAccessRules(t *testing.T) {
	h := newMux(catalog(), serveOptions{Addr: "127.0.0.1:8080", Agent: "none", Logf: t.Logf})
	json := map[string]string{"Content-Type": "application/json", "Host": "127.0.0.1:8080"}
	tests := []struct {
		name           string
		method, target string
		body           string
		header         map[string]string
		want           int
	}{
		{"a plan from a script", "POST", "/api/plan", planBody, json, 200},
		{"a plan from this server's page", "POST", "/api/plan", planBody, map[string]string{"Content-Type": "application/json", "Host": "127.0.0.1:8080", "Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}, 200},
		{"localhost by name", "POST", "/api/plan", planBody, map[string]string{"Content-Type": "application/json; charset=utf-8", "Host": "localhost:8080"}, 200},
		{"text/plain from another page (no preflight)", "POST", "/api/plan", planBody, map[string]string{"Content-Type": "text/plain", "Host": "127.0.0.1:8080", "Origin": "http://evil.example"}, 415},
		{"a form post", "POST", "/api/oracle", "model=x", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Host": "127.0.0.1:8080"}, 415},
		{"JSON from another origin", "POST", "/api/plan", planBody, map[string]string{"Content-Type": "application/json", "Host": "127.0.0.1:8080", "Origin": "http://evil.example"}, 403},
		{"a cross-site fetch", "POST", "/api/pd", planBody, map[string]string{"Content-Type": "application/json", "Host": "127.0.0.1:8080", "Sec-Fetch-Site": "cross-site"}, 403},
		{"DNS rebinding: a foreign Host with its own Origin", "POST", "/api/plan", planBody, map[string]string{"Content-Type": "application/json", "Host": "evil.example:8080", "Origin": "http://evil.example:8080"}, 421},
		{"DNS rebinding on the live feed", "GET", "/ws/live", "", map[string]string{"Host": "evil.example"}, 421},
		{"PUT on a static file", "PUT", "/web/kvscope.css", "x", map[string]string{"Host": "127.0.0.1:8080"}, 405},
		{"DELETE on /metrics", "DELETE", "/metrics", "", map[string]string{"Host": "127.0.0.1:8080"}, 405},
		{"TRACE on /api/models", "TRACE", "/api/models", "", map[string]string{"Host": "127.0.0.1:8080"}, 405},
		{"GET on the API", "GET", "/api/plan", "", map[string]string{"Host": "127.0.0.1:8080"}, 405},
		{"the web root's Go file", "GET", "/web/embed.go", "", map[string]string{"Host": "127.0.0.1:8080"}, 404},
		{"the web root's README", "GET", "/web/README.md", "", map[string]string{"Host": "127.0.0.1:8080"}, 404},
		{"an asset", "GET", "/web/kvscope.css", "", map[string]string{"Host": "127.0.0.1:8080"}, 200},
		{"HEAD on an asset", "HEAD", "/web/kvscope.css", "", map[string]string{"Host": "127.0.0.1:8080"}, 200},
		{"the metrics", "GET", "/metrics", "", map[string]string{"Host": "127.0.0.1:8080"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _ := do(t, h, tt.method, tt.target, tt.body, tt.header); code != tt.want {
				t.Errorf("%s %s: %d, want %d", tt.method, tt.target, code, tt.want)
			}
		})
	}
}

// TestAccessToken: with --token every route but /ws/agent needs it, as a
// bearer header or the cookie /login sets; the Host may be any name when
// the server listens on every interface.
func TestAccessToken(t *testing.T) {
	h := newMux(catalog(), serveOptions{Addr: "0.0.0.0:8080", Token: "s3cret-s3cret-s3cret", RequireToken: true, Agent: "none", Logf: t.Logf})
	host := map[string]string{"Host": "kvscope.lan:8080"}
	if code, hdr := do(t, h, "GET", "/", "", map[string]string{"Host": "kvscope.lan:8080", "Accept": "text/html"}); code != 303 || !strings.HasPrefix(hdr.Get("Location"), "/login?next=") {
		t.Errorf("the app without the token: %d to %q, want a redirect to /login", code, hdr.Get("Location"))
	}
	for _, target := range []string{"/metrics", "/api/models", "/ws/live", "/web/kvscope.css"} {
		if code, _ := do(t, h, "GET", target, "", host); code != 401 {
			t.Errorf("GET %s without the token: %d, want 401", target, code)
		}
	}
	if code, _ := do(t, h, "POST", "/api/plan", planBody, map[string]string{"Host": "kvscope.lan:8080", "Content-Type": "application/json"}); code != 401 {
		t.Errorf("a plan without the token: %d, want 401", code)
	}
	if code, _ := do(t, h, "POST", "/api/plan", planBody, map[string]string{"Host": "kvscope.lan:8080", "Content-Type": "application/json", "Authorization": "Bearer s3cret-s3cret-s3cret"}); code != 200 {
		t.Errorf("a plan with the bearer: %d, want 200", code)
	}
	if code, _ := do(t, h, "GET", "/metrics", "", map[string]string{"Host": "kvscope.lan:8080", "Authorization": "Bearer wrong"}); code != 401 {
		t.Errorf("a wrong bearer: %d, want 401", code)
	}
	form := map[string]string{"Host": "kvscope.lan:8080", "Content-Type": "application/x-www-form-urlencoded", "Origin": "http://kvscope.lan:8080"}
	if code, _ := do(t, h, "POST", "/login", url.Values{"token": {"nope"}}.Encode(), form); code != 401 {
		t.Errorf("a wrong login: %d, want 401", code)
	}
	if code, _ := do(t, h, "POST", "/login", url.Values{"token": {"s3cret-s3cret-s3cret"}}.Encode(), map[string]string{"Host": "kvscope.lan:8080", "Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}); code != 403 {
		t.Errorf("a login from another site: %d, want 403", code)
	}
	code, hdr := do(t, h, "POST", "/login?next=/metrics", url.Values{"token": {"s3cret-s3cret-s3cret"}}.Encode(), form)
	cookie := hdr.Get("Set-Cookie")
	if code != 303 || hdr.Get("Location") != "/metrics" || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || strings.Contains(cookie, "s3cret-s3cret-s3cret") {
		t.Fatalf("login: %d to %q, cookie %q", code, hdr.Get("Location"), cookie)
	}
	value := strings.SplitN(strings.SplitN(cookie, ";", 2)[0], "=", 2)[1]
	if code, _ := do(t, h, "GET", "/metrics", "", map[string]string{"Host": "kvscope.lan:8080", "Cookie": api.SessionCookie + "=" + value}); code != 200 {
		t.Errorf("/metrics with the cookie: %d, want 200", code)
	}
	if code, hdr := do(t, h, "POST", "/login?next=//evil.example", url.Values{"token": {"s3cret-s3cret-s3cret"}}.Encode(), form); code != 303 || hdr.Get("Location") != "/" {
		t.Errorf("a login sending elsewhere: %d to %q, want /", code, hdr.Get("Location"))
	}
}

// TestReplayFollowsServesListenRules: replay beyond loopback needs a token.
func TestReplayFollowsServesListenRules(t *testing.T) {
	code, _, errs := runCLI(t, "replay", "--addr", "0.0.0.0:0", "../testdata/events/gpt-oss-20b-p2-d4.jsonl")
	if code != 2 || !strings.Contains(errs, "listens beyond loopback: give --token") {
		t.Errorf("replay on every interface without a token: exit %d, %q", code, errs)
	}
}

// TestServeRefusesShortTokens: kvscope serve (and replay, which follows
// its rules) refuses at start a token shorter than 16 characters, naming
// --token and the length (issue 24: a 1-character token was accepted).
func TestServeRefusesShortTokens(t *testing.T) {
	tests := []struct {
		name, token string
		err         string // "" when accepted
	}{
		{"no token on loopback", "", ""},
		{"one character", "T", "--token: 1 characters, want at least 16"},
		{"the old soak token", "soak-token", "--token: 10 characters, want at least 16"},
		{"fifteen characters", strings.Repeat("x", 15), "--token: 15 characters, want at least 16"},
		{"fifteen two-byte characters (30 bytes)", strings.Repeat("é", 15), "--token: 15 characters, want at least 16"},
		{"sixteen characters", strings.Repeat("x", 16), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := serveOptions{Addr: "127.0.0.1:8080", Token: tt.token, Agent: "none"}.check()
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("check: %v, want %q", err, tt.err)
			}
		})
	}
	prev := debug.SetMemoryLimit(-1) // runServe sets the process's; keep the test binary's
	defer debug.SetMemoryLimit(prev)
	for _, cmd := range []string{"serve", "replay"} {
		args := []string{cmd, "--addr", "127.0.0.1:0", "--token", "short"}
		if cmd == "replay" {
			args = append(args, "../testdata/events/gpt-oss-20b-p2-d4.jsonl")
		} else {
			args = append(args, "--agent", "none")
		}
		if code, _, errs := runCLI(t, args...); code != 2 || !strings.Contains(errs, "--token: 5 characters, want at least 16") {
			t.Errorf("%s --token short: exit %d, %q", cmd, code, errs)
		}
	}
}

// TestAgentTokenGuessesAreThrottled: wrong bearers on /ws/agent, answered 401
// by the hub's own check, count against the client's address like wrong
// logins: past the free ones the address waits (429, Retry-After) and
// another address does not.
func TestAgentTokenGuessesAreThrottled(t *testing.T) {
	const tok = "agent-guess-test-token"
	h := newMux(catalog(), serveOptions{Addr: "0.0.0.0:8080", Token: tok, RequireToken: true, Agent: "none", Logf: t.Logf})
	dial := func(from, bearer string) (int, string) {
		r := httptest.NewRequest("GET", "/ws/agent?agent=guesser", nil)
		r.RemoteAddr, r.Host = from, "kvscope.lan:8080"
		r.Header.Set("Authorization", "Bearer "+bearer)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Header().Get("Retry-After")
	}
	want := []struct {
		code  int
		retry string
	}{{401, ""}, {401, ""}, {401, ""}, {401, ""}, {401, ""}, {401, "1"}, {429, "1"}, {429, "1"}}
	for i, w := range want {
		if code, retry := dial("198.51.100.7:999", "guess"); code != w.code || retry != w.retry {
			t.Errorf("guess %d: %d, Retry-After %q; want %d, %q", i+1, code, retry, w.code, w.retry)
		}
	}
	if code, _ := dial("198.51.100.8:999", "guess"); code != 401 {
		t.Errorf("a guess from another address: %d, want 401 (checked at once)", code)
	}
}
