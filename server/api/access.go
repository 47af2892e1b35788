package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"html"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Access is who may reach the server, applied before any route:
//
//   - Host: a loopback server answers only to loopback host names (a DNS
//     name an attacker points at 127.0.0.1 is refused: DNS rebinding); a
//     server on a named address answers to that name and --allowed-host.
//   - Methods: the JSON API takes POST, /login GET and POST, every other
//     route (the app, its assets, /api/models, /metrics, the websockets)
//     GET and HEAD only.
//   - CSRF: a POST must carry application/json (a form or text/plain from
//     another page is refused) and, when the browser says where it comes
//     from, come from this server's own origin.
//   - Token: with --token, everything but /ws/agent (which checks the
//     agents' bearer itself) needs the token: an Authorization: Bearer
//     header for scripts, or the HttpOnly, SameSite=Strict cookie /login
//     sets for browsers.
type Access struct {
	token   string // "" when the server needs none (loopback without --token)
	session string // the cookie's value: derived from the token, not the token
	hosts   map[string]bool
	anyHost bool // listening on every interface with a token: any Host
}

// SessionCookie is the name of the browser's login cookie.
const SessionCookie = "kvscope_session"

// NewAccess builds the rules for a server listening on addr (its resolved
// listen address), with token required when not "".
func NewAccess(addr, token string, allowed []string) *Access {
	a := &Access{token: token, hosts: map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}}
	if token != "" {
		sum := sha256.Sum256([]byte("kvscope-session\x00" + token))
		a.session = hex.EncodeToString(sum[:])
	}
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

// authed reports whether the request carries the token (or its cookie).
func (a *Access) authed(r *http.Request) bool {
	if a.token == "" {
		return true
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
		subtle.ConstantTimeCompare([]byte(bearer), []byte(a.token)) == 1 {
		return true
	}
	c, err := r.Cookie(SessionCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(a.session)) == 1
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
			http.Error(w, fmt.Sprintf("Host %q is not one this server serves (give --allowed-host to add it)", r.Host), http.StatusMisdirectedRequest)
			return
		}
		switch p := r.URL.Path; {
		case p == "/ws/agent":
			if r.Method != http.MethodGet {
				methodNotAllowed(w, "GET")
				return
			}
		case p == "/login":
			a.login(w, r)
			return
		case apiPaths[p]:
			if r.Method != http.MethodPost {
				methodNotAllowed(w, "POST")
				return
			}
			if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
				http.Error(w, fmt.Sprintf("Content-Type %q: the API takes application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
				return
			}
			if !sameOrigin(r) {
				http.Error(w, fmt.Sprintf("a POST from %q: the API answers this server's own pages and scripts only", r.Header.Get("Origin")), http.StatusForbidden)
				return
			}
			if !a.authed(r) {
				http.Error(w, "this server needs its token: Authorization: Bearer TOKEN", http.StatusUnauthorized)
				return
			}
		default:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				methodNotAllowed(w, "GET, HEAD")
				return
			}
			if !a.authed(r) {
				if strings.Contains(r.Header.Get("Accept"), "text/html") {
					http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
					return
				}
				http.Error(w, "this server needs its token: log in at /login, or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	http.Error(w, "method not allowed here: use "+allow, http.StatusMethodNotAllowed)
}

// login is /login: a form for the token (GET), and the cookie when the
// token is right (a same-origin POST).
func (a *Access) login(w http.ResponseWriter, r *http.Request) {
	next := r.URL.Query().Get("next")
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		next = "/" // only a path on this server
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		loginPage(w, next, "", http.StatusOK)
	case http.MethodPost:
		if !sameOrigin(r) {
			http.Error(w, "a login from another site", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		if err := r.ParseForm(); err != nil {
			loginPage(w, next, "the form could not be read", http.StatusBadRequest)
			return
		}
		if a.token == "" || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(a.token)) != 1 {
			loginPage(w, next, "wrong token", http.StatusUnauthorized)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: a.session, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
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
