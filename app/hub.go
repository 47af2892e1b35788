package app

import (
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/kvscope/kvscope/core/model"
	"github.com/maxence-charriere/go-app/v10/pkg/app"
)

// The keys of go-app's environment (app.Getenv) through which kvscope
// serve tells the page its Hub: HubEndpointEnv is the server's
// HF_ENDPOINT, HubOfflineEnv is "1" under HF_HUB_OFFLINE. Without them
// (kvscope site) the page asks DefaultHubEndpoint.
const (
	HubEndpointEnv = "KVSCOPE_HF_ENDPOINT"
	HubOfflineEnv  = "KVSCOPE_HF_HUB_OFFLINE"
)

// DefaultHubEndpoint is the Hugging Face Hub, which answers cross-origin
// requests for public files.
const DefaultHubEndpoint = "https://huggingface.co"

// maxConfigBytes caps a fetched config.json, as kvscope's CLI does.
const maxConfigBytes = 4 << 20

// hubID is a model's Hugging Face Hub id, org/name[@revision], in the
// shape kvscope's --model takes (server/internal/hub reads the same).
type hubID struct {
	Org, Name, Revision string // Revision is "main" when the id names none
}

// parseHubID reads org/name[@revision]: org and name of letters, digits
// and ._- (not first), a revision of segments of those (a branch, tag or
// commit, "refs/pr/1"), no ".." anywhere and no ".json" name.
func parseHubID(ref string) (hubID, bool) {
	repo, rev, hasRev := strings.Cut(ref, "@")
	if !hasRev {
		rev = "main"
	}
	org, name, ok := strings.Cut(repo, "/")
	if !ok || !hubName(org, true) || !hubName(name, true) || strings.HasSuffix(name, ".json") || strings.Contains(ref, "..") {
		return hubID{}, false
	}
	for _, seg := range strings.Split(rev, "/") {
		if !hubName(seg, false) || seg == "." {
			return hubID{}, false
		}
	}
	return hubID{org, name, rev}, true
}

// hubName reports whether s is a non-empty run of letters, digits and
// ._- (with alnumFirst, starting with a letter or digit).
func hubName(s string, alnumFirst bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 && alnumFirst || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return s != ""
}

// String is the id as the settings keep it: org/name, with @revision
// unless it is main.
func (id hubID) String() string {
	s := id.Org + "/" + id.Name
	if id.Revision != "main" {
		s += "@" + id.Revision
	}
	return s
}

// configURL is the Hub's resolve URL of the id's config.json.
func (id hubID) configURL(endpoint string) string {
	return strings.TrimRight(endpoint, "/") + "/" + id.Org + "/" + id.Name + "/resolve/" + url.PathEscape(id.Revision) + "/config.json"
}

// hubConfig is one Hub id's config.json as the page fetched it: kept for
// the session, fetched again by a new page.
type hubConfig struct {
	URL     string
	Commit  string // the Hub's X-Repo-Commit, when it exposes it
	Data    []byte
	Err     string
	Pending bool
}

// Source is where the config came from, in a phrase.
func (h *hubConfig) Source() string {
	s := "config.json from " + h.URL
	if h.Commit != "" {
		s += " (commit " + h.Commit + ")"
	}
	return s
}

// hubModels is the bundled catalog and the Hub ids the page fetched: the
// models Compute looks up in the browser. Bundled names never reach the
// Hub.
type hubModels struct {
	model.Catalog
	fetched map[string]*hubConfig // by hubID.String()
	// endpoint is the Hub the page asks; offline says why it asks none
	// ("" when it may).
	endpoint, offline string
}

// Lookup resolves a bundled name, else a fetched Hub id.
func (h hubModels) Lookup(ref string) (string, []byte, error) {
	name, data, err := h.Catalog.Lookup(ref)
	if err == nil {
		return name, data, nil
	}
	id, ok := parseHubID(ref)
	if !ok {
		return "", nil, err
	}
	hc := h.fetched[id.String()]
	switch {
	case hc == nil && h.offline != "":
		return "", nil, errors.New(id.String() + " is not bundled, and " + h.offline + ": nothing is fetched; bundled models: " + strings.Join(h.Names(), ", "))
	case hc == nil:
		return "", nil, &pendingError{id.configURL(h.endpoint)}
	case hc.Pending:
		return "", nil, &pendingError{hc.URL}
	case hc.Err != "":
		return "", nil, errors.New(hc.Err)
	}
	return id.String(), hc.Data, nil
}

// pendingError is a Hub id whose config.json is on its way from url.
type pendingError struct{ url string }

func (e *pendingError) Error() string { return "fetching config.json from " + e.url + "…" }

// hubEndpoint is the Hub the page asks, and why it asks none ("").
func hubEndpoint() (endpoint, offline string) {
	endpoint = app.Getenv(HubEndpointEnv)
	if endpoint == "" {
		endpoint = DefaultHubEndpoint
	}
	if app.Getenv(HubOfflineEnv) == "1" {
		offline = "HF_HUB_OFFLINE is set on the server"
	}
	return endpoint, offline
}

// models is what the settings' model names are looked up in.
func (c *Root) models() hubModels {
	endpoint, offline := hubEndpoint()
	return hubModels{Catalog: c.Catalog, fetched: c.hub, endpoint: endpoint, offline: offline}
}

// hubRef is the Hub id a settings model names, when it names one that
// is not bundled.
func (c *Root) hubRef(ref string) (hubID, bool) {
	if ref == "" || ref == "custom" || ref == "mtp" {
		return hubID{}, false
	}
	if _, _, err := c.Catalog.Lookup(ref); err == nil {
		return hubID{}, false
	}
	return parseHubID(ref)
}

// fetchModels fetches the config.json of the settings' model and draft
// when they are Hub ids the page has not fetched, then computes again.
func (c *Root) fetchModels() {
	endpoint, offline := hubEndpoint()
	if offline != "" || !app.IsClient {
		return
	}
	for _, ref := range []string{c.settings.Model, c.settings.Draft} {
		id, ok := c.hubRef(ref)
		if !ok || c.hub[id.String()] != nil {
			continue
		}
		if c.hub == nil {
			c.hub = map[string]*hubConfig{}
		}
		hc := &hubConfig{URL: id.configURL(endpoint), Pending: true}
		c.hub[id.String()] = hc
		var done app.Func
		done = app.FuncOf(func(this app.Value, args []app.Value) any {
			status, text, commit, failure := args[0].Int(), args[1].String(), args[2].String(), args[3].String()
			done.Release()
			c.ctx.Dispatch(func(ctx app.Context) {
				hc.Pending, hc.Commit = false, commit
				hc.Data, hc.Err = nil, hubError(id, hc.URL, status, len(text), failure, c.Catalog.Names())
				if hc.Err == "" {
					hc.Data = []byte(text)
				}
				c.recompute(ctx)
				c.afterCompute(ctx)
				ctx.Update()
			})
			return nil
		})
		callJS("fetchText", hc.URL, done)
	}
}

// fetching says which config.json the page is waiting for ("" when none).
func (c *Root) fetching() string {
	if len(c.hub) == 0 {
		return ""
	}
	for _, ref := range []string{c.settings.Model, c.settings.Draft} {
		if id, ok := c.hubRef(ref); ok {
			if hc := c.hub[id.String()]; hc != nil && hc.Pending {
				return (&pendingError{hc.URL}).Error()
			}
		}
	}
	return ""
}

// hubError says what a fetch's answer means ("" for a config.json):
// status 0 is no answer (failure says why).
func hubError(id hubID, u string, status, size int, failure string, bundled []string) string {
	at := id.String() + ": " + u + ": "
	switch {
	case status == 0:
		return at + "no answer (" + failure + "): offline? Bundled models: " + strings.Join(bundled, ", ")
	case status == 401 || status == 403:
		return at + "HTTP " + strconv.Itoa(status) + ": the model is gated or private, and the browser sends no token: download its config.json from the Hub (with access) and choose custom to paste, drop or pick it"
	case status == 404:
		return at + "HTTP 404: no such model or revision (check the id and the @revision)"
	case status != 200:
		return at + "HTTP " + strconv.Itoa(status)
	case failure != "":
		return at + "reading the answer: " + failure
	case size > maxConfigBytes:
		return at + "more than the " + strconv.Itoa(maxConfigBytes) + "-byte limit of a config.json"
	}
	return ""
}
