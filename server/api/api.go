// Package api is kvscope's JSON API: the routes POST /api/plan, /api/pd,
// /api/oracle, /api/tune and /api/check, and GET /api/models,
// /api/families, /api/flags and /api/versions; one request type per
// endpoint; one error envelope; the admission of heavy work (Limits: what one request may cost, and a queue
// for memory and cores); and the access rules in front of every route of
// the server (Access). Each endpoint answers exactly the JSON the matching
// CLI command prints with --json. The kvscope command wires the package
// into its server; it holds no state of its own but a Server's.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/kvscope/kvscope/core/model"
	"github.com/kvscope/kvscope/core/plan"
	"github.com/kvscope/kvscope/server/internal/hub"
)

// maxBody bounds an API request body: a config.json is a few KiB, a pasted
// startup log (for /api/check) a few hundred.
const maxBody = 4 << 20

// errorEnvelope is the one JSON error body of the API.
type errorEnvelope struct {
	Status    string `json:"status"`
	ErrorType string `json:"error_type"` // bad_data, refused (vLLM would not start), too_large, busy or internal
	Error     string `json:"error"`
	// EstimatedMaxModelLen is vLLM's estimate of the longest max_model_len
	// that would start, for error_type refused.
	EstimatedMaxModelLen int `json:"estimated_max_model_len,omitempty"`
	// Estimate and Limit are the request's estimated cost and the limit it
	// passed, for error_type too_large (bytes, or descriptor pairs).
	Estimate int64 `json:"estimate,omitempty"`
	Limit    int64 `json:"limit,omitempty"`
}

// badDataError marks an error in the request, as opposed to a server
// failure.
type badDataError struct{ err error }

func (e *badDataError) Error() string { return e.err.Error() }
func (e *badDataError) Unwrap() error { return e.err }

// BadData marks err as the request's fault: the envelope says bad_data
// and the status is 400 unless the caller gives another.
func BadData(err error) error { return &badDataError{err} }

// Server is what the API's endpoints share: the model catalog, the limits
// and the admission of heavy work. It is safe for concurrent use.
type Server struct {
	cat     model.Catalog
	resolve hub.Models // cat, and the Hub resolver when ResolveHubIDs set one
	lim     Limits
	adm     *admission
}

// New returns the API over a catalog, with limits (the zero Limits are
// DefaultLimits).
func New(cat model.Catalog, lim Limits) *Server {
	if lim == (Limits{}) {
		lim = DefaultLimits()
	}
	return &Server{cat: cat, resolve: hub.Models{Catalog: cat}, lim: lim, adm: newAdmission(lim)}
}

// ResolveHubIDs makes the API resolve a "model" or "draft" that is not
// bundled but has the form org/name[@revision] through r (the server's
// Hugging Face cache, then the Hub). Without it only bundled names and
// inline configs are taken. Call it before Register.
func (s *Server) ResolveHubIDs(r *hub.Resolver) { s.resolve.Hub = r }

// Limits are the limits the server admits work under.
func (s *Server) Limits() Limits { return s.lim }

// Register puts the API's routes on mux.
func (s *Server) Register(mux *http.ServeMux) {
	mux.Handle("/api/plan", handle(s, s.plan))
	mux.Handle("/api/pd", handle(s, s.pd))
	mux.Handle("/api/oracle", handle(s, s.oracle))
	mux.Handle("/api/tune", handle(s, s.tune))
	mux.Handle("/api/check", s.admitBody(handle(s, s.check)))
	mux.Handle("/api/models", s.models())
	mux.Handle("/api/families", s.families())
	mux.Handle("/api/flags", flags())
	mux.Handle("/api/versions", versions())
}

// request is an endpoint's request body: prepare gives its engines the
// request's vLLM version where they name none and refuses what vLLM's
// command line would refuse, before any planning.
type request interface{ prepare() error }

// handle wraps an endpoint: it reads and bounds the body into the
// endpoint's request type (a key that is none of its fields is an error
// naming it), and writes the result or the error envelope. fn gets the
// request's context, which ends when the client hangs up.
func handle[R any, PR interface {
	*R
	request
}](s *Server, fn func(ctx context.Context, req *R) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			WriteError(w, http.StatusMethodNotAllowed, BadData(fmt.Errorf("use POST with a JSON body")))
			return
		}
		req := new(R)
		if !ReadBody(w, r, req, "the request JSON") {
			return
		}
		if err := PR(req).prepare(); err != nil {
			WriteError(w, http.StatusBadRequest, BadData(err))
			return
		}
		res, err := fn(r.Context(), req)
		if err != nil {
			var bd *badDataError
			var big *TooBigError
			status := http.StatusInternalServerError
			switch {
			case r.Context().Err() != nil:
				return // the client hung up: nobody reads an answer
			case errors.As(err, &big):
				status = http.StatusRequestEntityTooLarge
			case errors.Is(err, ErrBusy):
				status = http.StatusTooManyRequests
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.lim.QueueWait/time.Second))))
			case errors.As(err, &bd):
				status = http.StatusBadRequest
			}
			WriteError(w, status, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	})
}

// ReadBody reads a request's JSON body (at most 4 MiB) into v, refusing
// keys that are none of v's fields, or answers the error (413 for too
// large, 400 naming what was expected) and returns false.
func ReadBody(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		WriteError(w, http.StatusRequestEntityTooLarge, BadData(fmt.Errorf("body: %w", err)))
		return false
	}
	if err := decodeStrict(body, v); err != nil {
		WriteError(w, http.StatusBadRequest, BadData(fmt.Errorf("body is not %s: %w", what, err)))
		return false
	}
	return true
}

// WriteError writes the error envelope with status: its error_type says
// whether vLLM refuses the engine (with its estimate), the request is too
// large (with the estimate and the limit), the server is busy, the
// request is at fault, or the server is. The message quotes at most
// MaxQuoted bytes of any value (clipMessage), whatever the request held.
func WriteError(w http.ResponseWriter, status int, err error) {
	e := errorEnvelope{Status: "error", ErrorType: "internal", Error: clipMessage(err.Error())}
	var bd *badDataError
	var re *plan.RefusalError
	var big *TooBigError
	switch {
	case errors.As(err, &re):
		e.ErrorType, e.EstimatedMaxModelLen = "refused", re.EstimatedMaxLen
	case errors.As(err, &big):
		e.ErrorType, e.Estimate, e.Limit = "too_large", big.Estimate, big.Limit
	case errors.Is(err, ErrBusy):
		e.ErrorType = "busy"
	case errors.As(err, &bd):
		e.ErrorType = "bad_data"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(e)
}
