package api

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"html"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Access is who may reach the server, applied before any route:
//
//   - Host: a loopback server answers only to loopback host names (a DNS
//     name an attacker points at 127.0.0.1 is refused: DNS rebinding); a
//     server on a named address answers to that name and --allowed-host.
//   - Methods: the JSON API takes POST, /login GET and POST, every other
//     route (the app, its assets, /api/models, /api/families, /metrics,
//     the websockets)
//     GET and HEAD only.
//   - CSRF: a POST must carry application/json (a form or text/plain from
//     another page is refused) and, when the browser says where it comes
//     from, come from this server's own origin.
//   - Token: with --token, everything but /ws/agent (which checks the
//     agents' bearer itself) needs the token: an Authorization: Bearer
//     header for scripts, or the HttpOnly, SameSite=Strict cookie /login
//     sets for browsers. The cookie is not the token: it is an expiry and
//     its HMAC under a key this process drew at random, so it lasts
//     SessionTTL and no longer than the process.
//   - Guesses: wrong tokens (a POST /login, a bearer, an agent's bearer on
//     /ws/agent) are counted per client address; past a few, the address
//     waits, doubling each time, before its next token is checked (429
//     with Retry-After). A right token clears the address.
type Access struct {
	token   string // "" when the server needs none (loopback without --token)
	key     []byte // the session cookie's HMAC key: random per process, so a restart logs every browser out
	hosts   map[string]bool
	anyHost bool             // listening on every interface with a token: any Host
	guesses *throttle        // wrong tokens per client address
	now     func() time.Time // the clock (time.Now; tests move it)
}

// SessionCookie is the name of the browser's login cookie.
const SessionCookie = "kvscope_session"

// SessionTTL is how long a login lasts: a working day, after which the
// browser logs in again (a stolen cookie is worth half a day at most, and
// nothing once the server restarts).
const SessionTTL = 12 * time.Hour

// MinTokenLen is the shortest token kvscope serve accepts, in characters:
// with guesses throttled to about 300 a day per address, 16 random
// characters are out of reach; a 1-character token never is.
const MinTokenLen = 16

// NewAccess builds the rules for a server listening on addr (its resolved
// listen address), with token required when not "".
func NewAccess(addr, token string, allowed []string) *Access {
	a := &Access{token: token, key: make([]byte, sha256.Size), guesses: newThrottle(), now: time.Now,
		hosts: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	rand.Read(a.key) // never fails (crypto/rand)
	if host, _, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			a.anyHost = token != ""
		} else {
			a.hosts[strings.ToLower(host)] = true
		}
	}
	for _, h := range allowed {
		a.hosts[strings.ToLower(h)] = true
	}
	return a
}

// hostOK reports whether the request's Host is one this server serves.
func (a *Access) hostOK(r *http.Request) bool {
	if a.anyHost {
		return true
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return a.hosts[strings.ToLower(strings.Trim(host, "[]"))]
}

// auth is what a request's credentials came to.
type auth int

const (
	authOK      auth = iota // the token, or a live session cookie (or none needed)
	authNone                // no bearer, and no live cookie
	authWrong               // a wrong bearer: counted against its address
	authWaiting             // a bearer from an address that must wait: not checked
)

// authenticate checks the request's session cookie, then its bearer: a
// wrong bearer counts against the client's address, and one from an
// address that owes a wait is not checked at all (the wait is returned).
// A cookie is never counted: guessing one is guessing an HMAC, and a
// browser's cookie from before a restart is no attack.
func (a *Access) authenticate(r *http.Request) (auth, time.Duration) {
	if a.token == "" {
		return authOK, 0
	}
	now := a.now()
	if c, err := r.Cookie(SessionCookie); err == nil && a.sessionOK(c.Value, now) {
		return authOK, 0
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return authNone, 0
	}
	addr := clientAddr(r)
	if d := a.guesses.wait(addr, now); d > 0 {
		return authWaiting, d
	}
	if subtle.ConstantTimeCompare([]byte(bearer), []byte(a.token)) != 1 {
		return authWrong, a.guesses.fail(addr, now)
	}
	a.guesses.succeed(addr)
	return authOK, 0
}

// session is a new session cookie's value, expiring at exp: the expiry in
// Unix seconds, a dot, and the HMAC-SHA256 of it under the process's key.
func (a *Access) session(exp time.Time) string {
	stamp := strconv.FormatInt(exp.Unix(), 10)
	return stamp + "." + base64.RawURLEncoding.EncodeToString(a.mac(stamp))
}

func (a *Access) mac(stamp string) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("kvscope-session\x00" + stamp))
	return m.Sum(nil)
}

// sessionOK reports whether value is a session cookie this process made
// (its HMAC checked in constant time) that has not expired at now.
func (a *Access) sessionOK(value string, now time.Time) bool {
	stamp, sig, ok := strings.Cut(value, ".")
	if !ok || len(stamp) == 0 || len(stamp) > 12 || len(sig) > 64 {
		return false
	}
	exp, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return false
	}
	want := base64.RawURLEncoding.EncodeToString(a.mac(stamp)) // compared encoded: one spelling only
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1 && now.Before(time.Unix(exp, 0))
}

// waiting answers a token not checked because its address owes a wait.
func waiting(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", retryAfter(d))
	http.Error(w, "too many wrong tokens from this address: try again in "+retryAfter(d)+" s", http.StatusTooManyRequests)
}

// sameOrigin reports whether a browser request comes from this server's
// pages: its Origin (when sent) is this host, and Sec-Fetch-Site (when
// sent) says same-origin. Scripts send neither.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host && (u.Scheme == "http" || u.Scheme == "https")
}

// apiPaths are the JSON API's POST routes.
var apiPaths = map[string]bool{"/api/plan": true, "/api/pd": true, "/api/oracle": true, "/api/tune": true, "/api/check": true, "/api/live/run": true}

// Wrap applies the rules in front of h.
func (a *Access) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.hostOK(r) {
			http.Error(w, fmt.Sprintf("Host %s is not one this server serves (give --allowed-host to add it)", Clip(r.Host)), http.StatusMisdirectedRequest)
			return
		}
		switch p := r.URL.Path; {
		case p == "/ws/agent":
			if r.Method != http.MethodGet {
				methodNotAllowed(w, "GET")
				return
			}
			addr := clientAddr(r)
			if d := a.guesses.wait(addr, a.now()); d > 0 {
				waiting(w, d)
				return
			}
			h.ServeHTTP(&agentAuth{ResponseWriter: w, a: a, addr: addr}, r)
			return
		case p == "/login":
			a.login(w, r)
			return
		case apiPaths[p]:
			if r.Method != http.MethodPost {
				methodNotAllowed(w, "POST")
				return
			}
			if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
				http.Error(w, fmt.Sprintf("Content-Type %s: the API takes application/json", Clip(r.Header.Get("Content-Type"))), http.StatusUnsupportedMediaType)
				return
			}
			if !sameOrigin(r) {
				http.Error(w, fmt.Sprintf("a POST from %s: the API answers this server's own pages and scripts only", Clip(r.Header.Get("Origin"))), http.StatusForbidden)
				return
			}
			if a.deny(w, r, false) {
				return
			}
		default:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				methodNotAllowed(w, "GET, HEAD")
				return
			}
			if a.deny(w, r, strings.Contains(r.Header.Get("Accept"), "text/html")) {
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deny answers a request without the token, and reports whether it did:
// 429 from an address that owes a wait, else a browser (page) is sent to
// /login (its dead cookie, expired or from a server since restarted,
// cleared) and a script gets 401, with the wait its wrong bearer earned.
func (a *Access) deny(w http.ResponseWriter, r *http.Request, page bool) bool {
	got, d := a.authenticate(r)
	switch {
	case got == authOK:
		return false
	case got == authWaiting:
		waiting(w, d)
		return true
	case d > 0:
		w.Header().Set("Retry-After", retryAfter(d))
	}
	if !page {
		http.Error(w, "this server needs its token: log in at /login, or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
		return true
	}
	if _, err := r.Cookie(SessionCookie); err == nil {
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	return true
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	http.Error(w, "method not allowed here: use "+allow, http.StatusMethodNotAllowed)
}

// agentAuth watches /ws/agent's answer, whose handler checks the agents'
// bearer: a 401 (a wrong or missing bearer) counts against the client's
// address, a 101 (the websocket accepted) clears it. Unwrap lets the
// websocket hijack the connection beneath.
type agentAuth struct {
	http.ResponseWriter
	a    *Access
	addr string
}

func (w *agentAuth) WriteHeader(code int) {
	switch code {
	case http.StatusUnauthorized:
		if d := w.a.guesses.fail(w.addr, w.a.now()); d > 0 {
			w.Header().Set("Retry-After", retryAfter(d))
		}
	case http.StatusSwitchingProtocols:
		w.a.guesses.succeed(w.addr)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *agentAuth) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// localPath is next when it is a path on this server, and "/" otherwise:
// one leading slash, not "//" or "/\" (which browsers read as another
// host), no backslash or control character anywhere (browsers drop tabs
// and newlines, so "/\t/x" is "//x" to them), judged both as given and
// percent-decoded once more (so "/%2F%2Fx" is "//x" too).
func localPath(next string) string {
	ok := func(p string) bool {
		if !strings.HasPrefix(p, "/") || len(p) > 1 && (p[1] == '/' || p[1] == '\\') || !utf8.ValidString(p) {
			return false
		}
		for _, c := range p {
			if c < 0x20 || c == 0x7f || c == '\\' || c >= 0x80 && c < 0xa0 {
				return false
			}
		}
		return true
	}
	decoded, err := url.PathUnescape(next)
	if err != nil || !ok(next) || !ok(decoded) {
		return "/"
	}
	return next
}

// login is /login: a form for the token (GET), and the cookie when the
// token is right (a same-origin POST from an address that owes no wait).
func (a *Access) login(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		loginPage(w, next, "", http.StatusOK)
	case http.MethodPost:
		if !sameOrigin(r) {
			http.Error(w, "a login from another site", http.StatusForbidden)
			return
		}
		addr, now := clientAddr(r), a.now()
		if d := a.guesses.wait(addr, now); d > 0 {
			w.Header().Set("Retry-After", retryAfter(d))
			loginPage(w, next, "too many wrong tokens from this address: try again in "+retryAfter(d)+" s", http.StatusTooManyRequests)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if err := r.ParseForm(); err != nil {
			loginPage(w, next, "the form could not be read", http.StatusBadRequest)
			return
		}
		if a.token == "" || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(a.token)) != 1 {
			if d := a.guesses.fail(addr, now); d > 0 {
				w.Header().Set("Retry-After", retryAfter(d))
			}
			loginPage(w, next, "wrong token", http.StatusUnauthorized)
			return
		}
		a.guesses.succeed(addr)
		exp := now.Add(SessionTTL)
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: a.session(exp), Path: "/", Expires: exp, MaxAge: int(SessionTTL / time.Second),
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		http.Redirect(w, r, next, http.StatusSeeOther)
	default:
		methodNotAllowed(w, "GET, POST")
	}
}

func loginPage(w http.ResponseWriter, next, problem string, status int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	msg := ""
	if problem != "" {
		msg = `<p role="alert">` + html.EscapeString(problem) + `</p>`
	}
	fmt.Fprintf(w, `<!doctype html><html><head><meta charset="utf-8"><title>kvscope: log in</title></head><body>
<h1>kvscope</h1><p>This server needs its token (the one given to <code>kvscope serve --token</code>).</p>%s
<form method="post" action="/login?next=%s"><label>Token <input type="password" name="token" autocomplete="current-password" autofocus></label>
<button type="submit">Log in</button></form></body></html>`, msg, html.EscapeString(url.QueryEscape(next)))
}
