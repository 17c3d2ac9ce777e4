package admin

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/internal/termtext"
	"github.com/backstophq/backstop/store"
)

// Problem is an RFC 9457 problem detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field names the request field at fault, when one is.
	Field string `json:"field,omitempty"`
}

// Error returns the problem in words, made printable (termtext.Escape):
// the CLI prints it on an operator's terminal, and a server or a proxy on
// the way may have put anything in it.
func (p *Problem) Error() string {
	s := p.Title
	if p.Detail != "" {
		s += ": " + p.Detail
	}
	if p.Field != "" {
		s += " (field " + p.Field + ")"
	}
	return termtext.Escape(s)
}

func problem(w http.ResponseWriter, status int, title, detail, field string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "about:blank", Title: title, Status: status, Detail: detail, Field: field})
}

// badField answers 400 naming the field.
func badField(w http.ResponseWriter, field, detail string) {
	problem(w, http.StatusBadRequest, "invalid request", detail, field)
}

// knownParams answers 400 naming the first parameter of the query q that
// is not in names, and reports whether none is: a list filtered by a
// misspelt parameter (?destinaton=billing) listed everything, and a
// script counting one destination's dead letters counted all of them.
func knownParams(w http.ResponseWriter, q url.Values, names ...string) bool {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(names, k) {
			badField(w, k, "unknown query parameter "+strconv.Quote(k)+"; this list takes "+strings.Join(names, ", "))
			return false
		}
	}
	return true
}

// textFields answers 400 naming the first of fields ({name, value}) whose
// value holds a NUL or is not valid UTF-8, and reports whether none does.
// No destination, stream or other name can hold either (PostgreSQL's text
// cannot, and Backstop refuses them on write), so such a value is a bad
// request, not a lookup that fails inside the store.
func textFields(w http.ResponseWriter, fields ...[2]string) bool {
	for _, f := range fields {
		if !utf8.ValidString(f[1]) || strings.IndexByte(f[1], 0) >= 0 {
			badField(w, f[0], f[0]+" must be UTF-8 without NUL")
			return false
		}
	}
	return true
}

// unavailableRetryAfter is the Retry-After, in seconds, of a 503 for a
// store out of reach: about what a database restart takes.
const unavailableRetryAfter = "5"

// fail answers for a store error: not found, conflicts, or 500 with nothing
// of the error itself (it is logged instead: no SQL reaches a client).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, dlq.ErrNotFound):
		problem(w, http.StatusNotFound, "not found", "no such message or entry", "")
	case errors.Is(err, store.ErrDeadLettered):
		problem(w, http.StatusConflict, "message is dead-lettered",
			"the message waits in the dead-letter queue: replay, resolve or delete its entry there", "")
	case errors.Is(err, store.ErrDelivered):
		problem(w, http.StatusConflict, "message already delivered", "a delivered message is kept only for the record", "")
	case errors.Is(err, store.ErrLeased):
		problem(w, http.StatusConflict, "message is being delivered", "a relay holds the message; try again when its attempt ends", "")
	case errors.Is(err, dlq.ErrAlreadyReplayed):
		problem(w, http.StatusConflict, "already replayed", "the entry was replayed before", "")
	case errors.Is(err, dlq.ErrInFlight):
		problem(w, http.StatusConflict, "message is being delivered",
			"a relay is still delivering the message this entry parked; replay it when that attempt ends (if it succeeds, the entry is resolved)", "")
	case errors.Is(err, dlq.ErrResolved):
		problem(w, http.StatusConflict, "entry resolved", "a resolved entry is not replayed", "")
	default:
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, "body too large", "the request body is over the server's limit", "")
			return
		}
		if timedOut(r, err) {
			s.cfg.Logger.Warn("admin API: the store did not answer in time", "method", r.Method, "path", r.URL.Path,
				"request_timeout", s.cfg.RequestTimeout, "err", err)
			w.Header().Set("Retry-After", unavailableRetryAfter)
			problem(w, http.StatusServiceUnavailable, "store did not answer in time",
				"the database did not answer within the server's request timeout ("+s.cfg.RequestTimeout.String()+
					"): a lock another transaction holds, or a database that is busy or out of reach; try again", "")
			return
		}
		if rc, ok := s.st.(store.Reachability); ok && rc.Unreachable(err) {
			// The database did not decide: the request may be made again.
			s.cfg.Logger.Warn("admin API: the store is out of reach", "method", r.Method, "path", r.URL.Path, "err", err)
			w.Header().Set("Retry-After", unavailableRetryAfter)
			problem(w, http.StatusServiceUnavailable, "store unavailable",
				"the database is out of reach or busy; try again", "")
			return
		}
		s.cfg.Logger.Error("admin API: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		problem(w, http.StatusInternalServerError, "internal error", "the server logged the cause", "")
	}
}

// timedOut reports whether err came of the server's own RequestTimeout:
// the request's context (or a page's) reached its deadline while the
// client still waited. A store's driver may report it as the context's
// error or as its own (SQLite's "interrupted").
func timedOut(r *http.Request, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(r.Context().Err(), context.DeadlineExceeded)
}

// writeJSON answers status with v as JSON. v is encoded before anything is
// written, so a value JSON cannot carry is a 500 that says so, never a
// 200 with an empty or cut body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "internal error", "the answer could not be written as JSON: "+err.Error(), "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// List is a page of items.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}
