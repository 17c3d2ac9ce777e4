// Package admin is Backstop's admin HTTP API (under /v1) and its Go
// client: messages, streams, the dead-letter queue with bulk actions by
// filter, stats, breakers and the audit log, with named bearer tokens,
// RFC 9457 problem details and an OpenAPI 3.1 document at
// /v1/openapi.json.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
)

// Roles a token can carry.
const (
	RoleRead    = "read"    // GET requests only
	RoleOperate = "operate" // everything
)

// Token is a named bearer token.
type Token struct {
	Name   string
	Secret string
	Role   string
}

// Breaker is one destination's circuit breaker as the API reports it.
type Breaker struct {
	Destination string `json:"destination"`
	State       string `json:"state"`
	Openings    int64  `json:"openings"`
	Delivered   int64  `json:"delivered"`
	Released    int64  `json:"released"`
	Failed      int64  `json:"failed"`
	// DeadLettered counts the messages the relay dead-lettered; nil when
	// the source of the breakers does not know.
	DeadLettered *int64 `json:"dead_lettered,omitempty"`
	// InFlight is how many of the destination's messages this process's
	// relay holds claimed and not yet recorded; nil when unknown (the
	// dashboard then counts leased messages through the store).
	InFlight *int64 `json:"in_flight,omitempty"`
	// PausedUntil is the end of a pause asked for by a Retry-After hint;
	// nil when the destination is not paused.
	PausedUntil *time.Time `json:"paused_until,omitempty"`
}

// Config configures a Server.
type Config struct {
	// Store is the store operated on; it must implement store.Admin.
	Store store.Store
	// Tokens are the accepted bearer tokens. Every /v1 route needs one.
	Tokens []Token
	// Destinations are the configured destination names; a message for
	// another is refused with 422. Nil accepts any.
	Destinations []string
	// Route returns the destinations of a topic; nil refuses topics.
	Route func(topic string) []string
	// Breakers reports the relay's breakers; nil reports none.
	Breakers func() []Breaker
	// MaxBodyBytes bounds request bodies. Zero means DefaultMaxBodyBytes
	// (2 MiB).
	MaxBodyBytes int64
	// RequestTimeout bounds the store work of one request: a request the
	// store has not answered by then (a row another transaction holds
	// locked, a database that stopped answering) gets 503 "store did not
	// answer in time" and gives its connection back, so that requests
	// left waiting cannot take every connection of a pool the relay
	// shares. A bulk action gets it for each page, however many pages it
	// takes. Zero means DefaultRequestTimeout; negative means none.
	RequestTimeout time.Duration
	// ProgressInterval is how often a bulk action or a purge still running
	// tells a client that asked for it (ProgressHeader) that it is: an
	// informational 102 Processing answer, which starts Client.Timeout's
	// wait again. Zero means DefaultProgressInterval (5 s); negative means
	// never.
	ProgressInterval time.Duration
	// BulkPage is how many entries a bulk action handles per transaction.
	// Zero means 500.
	BulkPage int
	// Logger receives errors the API hides from clients. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Workflows, when set, serves the workflow runs (GET
	// /v1/workflows/runs); nil answers those routes with 404.
	Workflows *Workflows
}

// DefaultMaxBodyBytes is Config.MaxBodyBytes's default: room for a
// payload at the outbox's default limit (1 MiB) sent in base64, which
// makes it 1.33 MiB, with its headers. At 1 MiB, the limit itself, such a
// payload could not be enqueued through the API.
const DefaultMaxBodyBytes = 2 << 20

// DefaultRequestTimeout is Config.RequestTimeout's default.
const DefaultRequestTimeout = 30 * time.Second

// Server serves the admin API.
type Server struct {
	cfg Config
	st  store.Store
	adm store.Admin
	// statsCache holds GET /v1/stats' last answer (cachedStats).
	statsCache statsCache
	known      map[string]bool
	mux        *http.ServeMux
	wf         *workflows
}

// New returns a Server, or an error naming the bad field.
func New(cfg Config) (*Server, error) {
	adm, ok := cfg.Store.(store.Admin)
	if !ok {
		return nil, errors.New("admin: Config.Store does not implement store.Admin")
	}
	names := map[string]bool{}
	for i, t := range cfg.Tokens {
		if t.Name == "" || t.Secret == "" {
			return nil, errors.New("admin: Config.Tokens: every token needs a name and a secret")
		}
		if names[t.Name] {
			// the audit log names the actor by its token's name
			return nil, errors.New("admin: Config.Tokens[" + itoa(i) + "].Name " + strconv.Quote(t.Name) + " is the name of another token")
		}
		names[t.Name] = true
		if why := TokenProblem(t.Secret); why != "" {
			return nil, errors.New("admin: Config.Tokens[" + itoa(i) + "].Secret " + why)
		}
		if t.Role != RoleRead && t.Role != RoleOperate {
			return nil, errors.New("admin: Config.Tokens[" + itoa(i) + "].Role must be read or operate")
		}
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.BulkPage == 0 {
		cfg.BulkPage = 500
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, st: cfg.Store, adm: adm, mux: http.NewServeMux()}
	if cfg.Workflows != nil {
		wf, err := newWorkflows(cfg.Workflows)
		if err != nil {
			return nil, err
		}
		s.wf = wf
	}
	if cfg.Destinations != nil {
		s.known = map[string]bool{}
		for _, d := range cfg.Destinations {
			s.known[d] = true
		}
	}
	s.routes()
	return s, nil
}

// Handler returns the API's handler: every /v1 route behind the tokens. A
// path or method the API does not have is a 404 problem, and so is a path
// with an empty segment: the router cleans /v1/dlq//replay (an action on
// an entry whose ID was empty, an unset variable) into the bulk route
// /v1/dlq/replay, and an empty filter replayed every pending dead letter.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.EscapedPath(), "//") {
			w.Header().Set("Cache-Control", "no-store")
			problem(w, http.StatusNotFound, "empty path segment",
				r.URL.EscapedPath()+" has an empty segment where a name or an ID goes (an empty ID?); nothing was done", "")
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

type ctxKey struct{}

// caller is the token a request came with.
type caller struct{ name, role string }

func actor(ctx context.Context) string {
	if c, ok := ctx.Value(ctxKey{}).(caller); ok {
		return c.name
	}
	return ""
}

// auth checks the bearer token (in constant time, over hashes so that the
// lengths leak nothing either) and the role the route needs, and bounds the
// request by RequestTimeout. Every answer says Cache-Control: no-store: it
// holds payloads, headers and error texts that no browser cache or proxy
// may keep.
func (s *Server) auth(role string, h http.HandlerFunc) http.HandlerFunc {
	return s.authPaged(role, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := s.bounded(r.Context())
		defer cancel()
		h(w, r.WithContext(ctx))
	})
}

// bounded is ctx bounded by RequestTimeout, when there is one.
func (s *Server) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.RequestTimeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// authPaged is auth for a route that bounds each of its pages itself (a
// bulk action), not the whole request.
func (s *Server) authPaged(role string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		found, given := s.token(r)
		if !given {
			w.Header().Set("WWW-Authenticate", `Bearer realm="backstop"`)
			problem(w, http.StatusUnauthorized, "missing bearer token", "send Authorization: Bearer <token>", "")
			return
		}
		if found == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="backstop", error="invalid_token"`)
			problem(w, http.StatusUnauthorized, "unknown token", "the bearer token matches no configured token", "")
			return
		}
		if role == RoleOperate && found.Role != RoleOperate {
			problem(w, http.StatusForbidden, "read-only token", "token "+found.Name+" has the read role; this action needs operate", "")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		ctx := context.WithValue(r.Context(), ctxKey{}, caller{found.Name, found.Role})
		h(w, r.WithContext(ctx))
	}
}

// token is the configured token r's Authorization header carries, nil
// when it carries none (given false) or an unknown one (given true).
func (s *Server) token(r *http.Request) (found *Token, given bool) {
	// the scheme is case-insensitive (RFC 9110 11.1)
	scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return nil, false
	}
	gh := sha256.Sum256([]byte(secret))
	for i := range s.cfg.Tokens {
		th := sha256.Sum256([]byte(s.cfg.Tokens[i].Secret))
		if subtle.ConstantTimeCompare(gh[:], th[:]) == 1 && found == nil {
			found = &s.cfg.Tokens[i]
		}
	}
	return found, true
}

// Authorized says whether r carries one of the configured tokens, of
// either role. Routes outside the API that answer without a token (serve's
// /readyz) use it to say more to a caller who has one.
func (s *Server) Authorized(r *http.Request) bool {
	found, _ := s.token(r)
	return found != nil
}

func (s *Server) routes() {
	read := func(pattern string, h http.HandlerFunc) { s.mux.HandleFunc(pattern, s.auth(RoleRead, h)) }
	op := func(pattern string, h http.HandlerFunc) { s.mux.HandleFunc(pattern, s.auth(RoleOperate, h)) }
	paged := func(pattern string, h http.HandlerFunc) {
		s.mux.HandleFunc(pattern, s.authPaged(RoleOperate, s.reporting(h)))
	}
	read("GET /v1/openapi.json", serveOpenAPI)
	op("POST /v1/messages", s.postMessage)
	read("GET /v1/messages", s.listMessages)
	read("GET /v1/messages/{id}", s.getMessage)
	op("POST /v1/messages/{id}/retry-now", s.messageAction("retry_now"))
	op("POST /v1/messages/{id}/reset", s.messageAction("reset"))
	op("POST /v1/messages/{id}/cancel", s.messageAction("cancel"))
	op("POST /v1/messages/{id}/dead-letter", s.messageAction("dead_letter"))
	read("GET /v1/streams/{destination}/{stream}", s.getStream)
	op("POST /v1/streams/{destination}/{stream}/release", s.releaseStream)
	read("GET /v1/stream", s.getStream)
	op("POST /v1/stream/release", s.releaseStream)
	read("GET /v1/dlq", s.listDLQ)
	read("GET /v1/dlq/{id}", s.getEntry)
	op("POST /v1/dlq/{id}/replay", s.entryAction("replay"))
	op("POST /v1/dlq/{id}/resolve", s.entryAction("resolve"))
	op("DELETE /v1/dlq/{id}", s.entryAction("delete"))
	paged("POST /v1/dlq/replay", s.bulk("replay"))
	paged("POST /v1/dlq/resolve", s.bulk("resolve"))
	paged("POST /v1/dlq/delete", s.bulk("delete"))
	paged("POST /v1/dlq/recover", s.recover)
	paged("POST /v1/dlq/purge", s.purge)
	read("GET /v1/stats", s.stats)
	read("GET /v1/breakers", s.breakers)
	read("GET /v1/audit", s.audit)
	read("GET /v1/workflows/runs", s.listRuns)
	read("GET /v1/workflows/runs/{id}", s.getRun)
	read("GET /v1/workflows/run", s.getRun)
	s.mux.HandleFunc("/v1/", s.auth(RoleRead, func(w http.ResponseWriter, r *http.Request) {
		if allowed := s.allowedMethods(r); len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			problem(w, http.StatusMethodNotAllowed, "method not allowed",
				r.Method+" is not allowed on "+r.URL.Path+"; it takes "+strings.Join(allowed, ", "), "")
			return
		}
		problem(w, http.StatusNotFound, "no such route", r.Method+" "+r.URL.Path+" is not part of the API (see /v1/openapi.json)", "")
	}))
}

// allowedMethods lists the methods some route of the API takes on r's
// path, for a request that matched none: a 405 with Allow, not a 404.
func (s *Server) allowedMethods(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/v1/" {
			out = append(out, m)
		}
	}
	return out
}

// TokenProblem says why no request can carry secret as its bearer
// token, or "" when one can: a server trims the white space around a
// header's value, so a secret ending in it (one read from a file with its
// newline) never matched and every request got 401, and a client refuses
// to send a control character other than a tab. New refuses such a token;
// the binary's configuration check uses the same rule.
func TokenProblem(secret string) string {
	if strings.TrimRight(secret, " \t\r\n") != secret {
		return "ends in white space (a newline?), which a server trims from the Authorization header: no request could match it"
	}
	for _, r := range secret {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return fmt.Sprintf("holds control character %U, which no request can carry", r)
		}
	}
	return ""
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
