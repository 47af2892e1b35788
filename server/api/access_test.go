package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testToken is a token as long as kvscope serve takes.
const testToken = "access-test-token-0123"

// clock is a fake time the tests move by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// testAccess is a server's rules on every interface with testToken, on a
// fake clock, in front of a handler that answers 200 (and, on /ws/agent,
// checks the bearer as live.Hub's AgentHandler does: 401 when wrong, 101
// when right).
func testAccess(t *testing.T) (*Access, http.Handler, *clock) {
	t.Helper()
	a := NewAccess("0.0.0.0:8080", testToken, nil)
	c := &clock{t: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)}
	a.now = c.now
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws/agent" {
			if r.Header.Get("Authorization") != "Bearer "+testToken {
				http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusSwitchingProtocols)
			return
		}
		w.Write([]byte("ok"))
	})
	return a, a.Wrap(inner), c
}

// attempt is one request of a test: a login, a bearer, an agent or a
// cookie, from a client address.
type attempt struct {
	kind   string // login, bearer (a script's), agent or cookie (a browser's)
	from   string // the client's address (RemoteAddr)
	token  string // the token, or the cookie's value
	target string // /login's next, or the page (default /metrics)
}

func (at attempt) send(h http.Handler) *httptest.ResponseRecorder {
	target := at.target
	var r *http.Request
	switch at.kind {
	case "login":
		if target == "" {
			target = "/login"
		}
		r = httptest.NewRequest("POST", target, strings.NewReader(url.Values{"token": {at.token}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", "http://kvscope.lan:8080")
	case "agent":
		r = httptest.NewRequest("GET", "/ws/agent?agent=a", nil)
		r.Header.Set("Authorization", "Bearer "+at.token)
	default:
		if target == "" {
			target = "/metrics"
		}
		r = httptest.NewRequest("GET", target, nil)
		switch at.kind {
		case "bearer": // a script
			r.Header.Set("Authorization", "Bearer "+at.token)
		case "cookie": // a browser
			r.Header.Set("Accept", "text/html")
			r.AddCookie(&http.Cookie{Name: SessionCookie, Value: at.token})
		}
	}
	r.Host = "kvscope.lan:8080"
	r.RemoteAddr = at.from
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestLoginRedirect: /login sends a browser only to a path on this server
// (issue 24: next=/%5Cevil.example and /%09/evil.example went to
// //evil.example), whatever encoding next arrives in.
func TestLoginRedirect(t *testing.T) {
	_, h, _ := testAccess(t)
	tests := []struct {
		name, rawNext, want string
	}{
		{"a path", "/metrics", "/metrics"},
		{"the app with its settings", url.QueryEscape("/?model=Qwen%2FQwen3-0.6B&p-tensor-parallel-size=2"), "/?model=Qwen%2FQwen3-0.6B&p-tensor-parallel-size=2"},
		{"a path named like a URL", "/https://evil.example", "/https:/evil.example"},
		{"no next", "", "/"},
		{"an encoded backslash (the probe's first)", "/%5Cevil.example", "/"},
		{"an encoded tab (the probe's second)", "/%09/evil.example", "/"},
		{"two slashes", "//evil.example", "/"},
		{"two encoded slashes", "/%2F%2Fevil.example", "/"},
		{"two slashes encoded twice", "/%252F%252Fevil.example", "/"},
		{"a backslash", `/\evil.example`, "/"},
		{"a backslash encoded twice", "/%255Cevil.example", "/"},
		{"a newline", "/%0A/evil.example", "/"},
		{"a carriage return", "/%0D/evil.example", "/"},
		{"a NUL", "/%00evil", "/"},
		{"a DEL", "/%7Fevil", "/"},
		{"a C1 control (NEL)", "/%C2%85/evil.example", "/"},
		{"invalid UTF-8", "/%FF/evil.example", "/"},
		{"an absolute URL", "https://evil.example/", "/"},
		{"a scheme-relative URL with a scheme-less host", "evil.example", "/"},
		{"a javascript: URL", "javascript:alert(1)", "/"},
		{"a leading space", "%20//evil.example", "/"},
		{"a backslash later in the path", `/a\evil`, "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := "/login"
			if tt.rawNext != "" {
				target += "?next=" + tt.rawNext
			}
			w := attempt{kind: "login", from: "192.0.2.1:1000", token: testToken, target: target}.send(h)
			if loc := w.Header().Get("Location"); w.Code != http.StatusSeeOther || loc != tt.want {
				t.Errorf("login with next=%s: %d to %q, want 303 to %q", tt.rawNext, w.Code, loc, tt.want)
			}
			if localPath(tt.want) != tt.want {
				t.Errorf("localPath refuses its own answer %q", tt.want)
			}
		})
	}
}

// TestLoginGuessStorm: wrong tokens from one address are answered at
// once for the first few, then only after a wait that doubles (429 with a
// growing Retry-After, the token not even checked, the right one neither),
// up to the cap; login, bearer and agent guesses count together; another
// address, a live cookie and a right token after the wait are never held
// back, and the right token clears the address.
func TestLoginGuessStorm(t *testing.T) {
	a, h, c := testAccess(t)
	const storm = "198.51.100.7:4242"
	check := func(what string, at attempt, code int, retry string) {
		t.Helper()
		w := at.send(h)
		if w.Code != code || w.Header().Get("Retry-After") != retry {
			t.Fatalf("%s: %d, Retry-After %q; want %d, %q", what, w.Code, w.Header().Get("Retry-After"), code, retry)
		}
	}
	good := attempt{kind: "login", from: "203.0.113.9:5000", token: testToken}
	check("a login before the storm", good, 303, "")
	cookie := strings.SplitN(strings.SplitN(good.send(h).Header().Get("Set-Cookie"), ";", 2)[0], "=", 2)[1]

	kinds := []string{"login", "bearer", "agent"}
	for i := range defaultFreeGuesses {
		check(fmt.Sprintf("free guess %d", i+1), attempt{kind: kinds[i%3], from: storm, token: "guess" + strconv.Itoa(i)}, 401, "")
	}
	check("the guess past the free ones", attempt{kind: "login", from: storm, token: "guess"}, 401, "1")
	var waits []int
	for round := range 12 {
		w := attempt{kind: kinds[round%3], from: storm, token: "guess"}.send(h)
		secs, _ := strconv.Atoi(w.Header().Get("Retry-After"))
		if w.Code != 429 || secs == 0 {
			t.Fatalf("round %d: a guess during the wait: %d, Retry-After %q, want 429", round, w.Code, w.Header().Get("Retry-After"))
		}
		waits = append(waits, secs)
		check("the right token during the wait", attempt{kind: kinds[(round+1)%3], from: storm, token: testToken}, 429, strconv.Itoa(secs))
		check("another address during the storm", good, 303, "")
		check("a live cookie from the storming address", attempt{kind: "cookie", from: storm, token: cookie}, 200, "")
		c.advance(time.Duration(secs) * time.Second)
		check("a wrong guess once the wait is over", attempt{kind: kinds[(round+2)%3], from: storm, token: "guess"}, 401, strconv.Itoa(min(2*secs, 300)))
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] != min(2*waits[i-1], int(defaultMaxWait/time.Second)) {
			t.Fatalf("waits %v: each should double up to %v", waits, defaultMaxWait)
		}
	}
	if waits[len(waits)-1] != 300 {
		t.Errorf("waits %v: the cap is 5 minutes", waits)
	}
	c.advance(300 * time.Second)
	check("the right login after the wait", attempt{kind: "login", from: storm, token: testToken}, 303, "")
	if n := a.guesses.remembered(); n != 0 {
		t.Errorf("the right token left %d addresses remembered", n)
	}
	check("a typo after the right login: free again", attempt{kind: "bearer", from: storm, token: "typo"}, 401, "")
	check("the agent's right token", attempt{kind: "agent", from: storm, token: testToken}, 101, "")
	if n := a.guesses.remembered(); n != 0 {
		t.Errorf("an agent's right token left %d addresses remembered", n)
	}
}

// TestThrottleMemory: the throttle remembers a bounded number of
// addresses, forgetting the one whose last wrong token is oldest; an
// address quiet past the forget time starts afresh; an IPv6 host is
// counted by its /64 and X-Forwarded-For is never read.
func TestThrottleMemory(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	th := newThrottle()
	th.capacity, th.free = 3, 0
	for i := range 5 {
		th.fail(fmt.Sprintf("192.0.2.%d", i), now.Add(time.Duration(i)*time.Millisecond))
	}
	th.fail("192.0.2.2", now.Add(time.Second)) // touched again: newest
	th.fail("192.0.2.5", now.Add(time.Second))
	tests := []struct {
		addr    string
		waiting bool
	}{
		{"192.0.2.0", false}, {"192.0.2.1", false}, {"192.0.2.3", false}, {"192.0.2.2", true}, {"192.0.2.4", true}, {"192.0.2.5", true},
	}
	for _, tt := range tests {
		if got := th.wait(tt.addr, now.Add(time.Second)) > 0; got != tt.waiting {
			t.Errorf("%s waiting %v, want %v", tt.addr, got, tt.waiting)
		}
	}
	if n := th.remembered(); n != 3 {
		t.Errorf("%d addresses remembered, want the capacity 3", n)
	}

	full := newThrottle()
	for i := range 3 * defaultAddrs {
		full.fail(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), now)
	}
	if n := full.remembered(); n != defaultAddrs {
		t.Errorf("after %d addresses, %d remembered, want %d", 3*defaultAddrs, n, defaultAddrs)
	}

	quiet := newThrottle()
	for range defaultFreeGuesses + 4 {
		quiet.fail("192.0.2.9", now)
	}
	if d := quiet.fail("192.0.2.9", now.Add(defaultForget+time.Second)); d != 0 {
		t.Errorf("a guess after an hour's quiet waits %v, want none (forgotten)", d)
	}

	addrs := []struct{ remote, forwarded, want string }{
		{"192.0.2.1:1234", "", "192.0.2.1"},
		{"192.0.2.1:1234", "203.0.113.1", "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:80", "", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:81", "", "2001:db8:1:2::/64"},
		{"[::ffff:192.0.2.1]:1", "", "192.0.2.1"},
		{"pipe", "", "pipe"},
	}
	for _, tt := range addrs {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		if tt.forwarded != "" {
			r.Header.Set("X-Forwarded-For", tt.forwarded)
			r.Header.Set("X-Real-IP", tt.forwarded)
		}
		if got := clientAddr(r); got != tt.want {
			t.Errorf("clientAddr(%s, X-Forwarded-For %q) = %q, want %q", tt.remote, tt.forwarded, got, tt.want)
		}
	}
}

// TestSessionCookie: the cookie is an expiry and its HMAC under this
// process's key: one forged, expired or made by another process (the
// server before a restart) sends the browser to /login, and clears
// itself; the token and the old sha256 cookie are no cookie at all.
func TestSessionCookie(t *testing.T) {
	a, h, c := testAccess(t)
	login := attempt{kind: "login", from: "192.0.2.1:1", token: testToken}.send(h)
	set := login.Header().Get("Set-Cookie")
	if !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") || !strings.Contains(set, "Max-Age=43200") || strings.Contains(set, testToken) {
		t.Fatalf("Set-Cookie %q: want HttpOnly, SameSite=Strict, Max-Age=43200, and not the token", set)
	}
	value := strings.SplitN(strings.SplitN(set, ";", 2)[0], "=", 2)[1]
	stamp, sig, _ := strings.Cut(value, ".")
	exp, _ := strconv.ParseInt(stamp, 10, 64)
	if got := time.Unix(exp, 0); !got.Equal(c.now().Add(SessionTTL)) {
		t.Fatalf("the cookie expires at %v, want %v", got, c.now().Add(SessionTTL))
	}

	previous, _, _ := testAccess(t) // the same token, another process
	old := sha256.Sum256([]byte("kvscope-session\x00" + testToken))
	otherKey := hmac.New(sha256.New, []byte("not the key"))
	otherKey.Write([]byte("kvscope-session\x00" + stamp))
	tests := []struct {
		name, value string
		after       time.Duration
		ok          bool
	}{
		{"the cookie /login set", value, 0, true},
		{"the cookie a second before it expires", value, SessionTTL - time.Second, true},
		{"the cookie when it expires", value, SessionTTL, false},
		{"the cookie a day later", value, 24 * time.Hour, false},
		{"a cookie from the server before a restart", previous.session(c.now().Add(SessionTTL)), 0, false},
		{"the expiry moved a year on, the HMAC kept", strconv.FormatInt(exp+365*24*3600, 10) + "." + sig, 0, false},
		{"an HMAC under another key", stamp + "." + base64.RawURLEncoding.EncodeToString(otherKey.Sum(nil)), 0, false},
		{"the HMAC with a bit flipped", stamp + "." + flipLast(sig), 0, false},
		{"the HMAC cut short", stamp + "." + sig[:20], 0, false},
		{"no HMAC", stamp + ".", 0, false},
		{"no expiry", "." + sig, 0, false},
		{"a negative expiry", "-1." + sig, 0, false},
		{"the old unsalted sha256 of the token", hex.EncodeToString(old[:]), 0, false},
		{"the token itself", testToken, 0, false},
		{"empty", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a.now = func() time.Time { return c.now().Add(tt.after) }
			w := attempt{kind: "cookie", from: "192.0.2.2:2", token: tt.value}.send(h)
			switch {
			case tt.ok && w.Code != 200:
				t.Errorf("%d, want 200", w.Code)
			case !tt.ok && (w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/login?next=")):
				t.Errorf("%d to %q, want a redirect to /login", w.Code, w.Header().Get("Location"))
			case !tt.ok && tt.value != "" && !strings.Contains(w.Header().Get("Set-Cookie"), "Max-Age=0"):
				t.Errorf("the refused cookie is not cleared: Set-Cookie %q", w.Header().Get("Set-Cookie"))
			}
		})
	}
	a.now = c.now
	// Forged cookies are no guesses at the token: they never hold back a login.
	for range 3 * defaultFreeGuesses {
		attempt{kind: "cookie", from: "192.0.2.3:3", token: "1." + sig}.send(h)
	}
	if w := (attempt{kind: "login", from: "192.0.2.3:3", token: testToken}).send(h); w.Code != 303 {
		t.Errorf("a login after forged cookies: %d, want 303", w.Code)
	}
}

// flipLast changes the last character of a base64url string.
func flipLast(s string) string {
	last := s[len(s)-1]
	if last == 'A' {
		return s[:len(s)-1] + "B"
	}
	return s[:len(s)-1] + "A"
}
