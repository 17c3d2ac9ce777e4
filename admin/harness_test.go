package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

const (
	operateToken = "operate-token-0123456789"
	readToken    = "read-token-0123456789ab"
)

// stores runs fn once per store: SQLite in a temp dir, and PostgreSQL in a
// fresh schema.
func stores(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		fn(t, openSQLite(t))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		fn(t, openPostgres(t))
	})
}

// openSQLite opens a SQLite store in a temp dir, closed with the test.
func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t *testing.T, params ...string) *postgres.Store {
	t.Helper()
	testenv.PostgresAdmin(t)
	schema := testenv.NewSchema(t, "adm_")
	// The schema first on the search_path, so that plain SQL finds the tables too.
	u := testenv.PostgresURL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	st, err := postgres.Open(context.Background(), u+sep+strings.Join(append([]string{"search_path=" + schema}, params...), "&"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// api is a server on a store and clients whose every answer is checked
// against the OpenAPI document.
type api struct {
	t       *testing.T
	st      store.Store
	srv     *httptest.Server
	op, rd  *admin.Client
	anon    *admin.Client
	logs    *strings.Builder
	ctx     context.Context
	checked *int
}

func newAPI(t *testing.T, st store.Store, mod ...func(*admin.Config)) *api {
	t.Helper()
	logs := &strings.Builder{}
	cfg := admin.Config{
		Store:        st,
		Tokens:       []admin.Token{{Name: "ops", Secret: operateToken, Role: admin.RoleOperate}, {Name: "dashboards", Secret: readToken, Role: admin.RoleRead}},
		Destinations: []string{"billing", "audit"},
		Route: func(topic string) []string {
			if strings.HasPrefix(topic, "order.") {
				return []string{"billing", "audit"}
			}
			return nil
		},
		Breakers: func() []admin.Breaker {
			return []admin.Breaker{{Destination: "billing", State: "closed"}}
		},
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: logs}, nil)),
	}
	for _, m := range mod {
		m(&cfg)
	}
	s, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	n := 0
	hc := &http.Client{Transport: &validating{t: t, next: http.DefaultTransport, n: &n}}
	a := &api{t: t, st: st, srv: srv, logs: logs, ctx: context.Background(), checked: &n,
		op:   &admin.Client{BaseURL: srv.URL, Token: operateToken, HTTPClient: hc},
		rd:   &admin.Client{BaseURL: srv.URL, Token: readToken, HTTPClient: hc},
		anon: &admin.Client{BaseURL: srv.URL, HTTPClient: hc}}
	t.Cleanup(func() {
		if n == 0 {
			t.Error("no response was checked against the OpenAPI document")
		}
	})
	return a
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// validating checks every response against the OpenAPI document: the
// route and method exist, the status is documented, the content type is
// the documented one and the body matches its schema.
type validating struct {
	t    *testing.T
	next http.RoundTripper
	n    *int
	mu   sync.Mutex
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	if msg := spec().check(req.Method, req.URL.EscapedPath(), resp.StatusCode, resp.Header.Get("Content-Type"), body); msg != "" {
		v.t.Errorf("%s %s: response does not match the OpenAPI document: %s\nbody: %.500s", req.Method, req.URL.Path, msg, body)
	}
	v.mu.Lock()
	*v.n++
	v.mu.Unlock()
	return resp, nil
}

type specDoc struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	compiled map[string]*jsonschema.Schema
	paths    []specPath
}

type specPath struct {
	template string
	re       *regexp.Regexp
}

var (
	specOnce sync.Once
	theSpec  *specDoc
)

// spec loads the document the server serves, through JSON, as a client
// would see it.
func spec() *specDoc {
	specOnce.Do(func() {
		b, err := json.Marshal(admin.Document())
		if err != nil {
			panic(err)
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
		if err != nil {
			panic(err)
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.AssertFormat()
		if err := c.AddResource("openapi.json", doc); err != nil {
			panic(err)
		}
		s := &specDoc{doc: doc.(map[string]any), compiler: c, compiled: map[string]*jsonschema.Schema{}}
		for p := range s.doc["paths"].(map[string]any) {
			// QuoteMeta escapes the braces of {name}.
			re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`) + "$")
			s.paths = append(s.paths, specPath{p, re})
		}
		theSpec = s
	})
	return theSpec
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (s *specDoc) check(method, path string, status int, ctype string, body []byte) string {
	var tmpl string
	for _, p := range s.paths {
		if p.re.MatchString(path) && (tmpl == "" || strings.Count(p.template, "{") < strings.Count(tmpl, "{")) {
			tmpl = p.template
		}
	}
	if tmpl == "" { // an undocumented route: a 404 problem
		if status != http.StatusNotFound || !strings.HasPrefix(ctype, "application/problem+json") {
			return fmt.Sprintf("undocumented path %s answered %d %s", path, status, ctype)
		}
		tmpl, method, status = "/v1/messages/{id}", "GET", http.StatusNotFound
	}
	ops := s.doc["paths"].(map[string]any)[tmpl].(map[string]any)
	op, ok := ops[strings.ToLower(method)].(map[string]any)
	if !ok { // an undocumented method on a route: a 405 problem
		if status != http.StatusMethodNotAllowed || !strings.HasPrefix(ctype, "application/problem+json") {
			return fmt.Sprintf("%s is not documented on %s, and answered %d", method, tmpl, status)
		}
		return s.check("GET", "/v1/nothing", http.StatusNotFound, ctype, body) // the same problem body
	}
	resps := op["responses"].(map[string]any)
	r, ok := resps[fmt.Sprint(status)].(map[string]any)
	if !ok {
		return fmt.Sprintf("status %d is not documented for %s %s", status, method, tmpl)
	}
	content := r["content"].(map[string]any)
	mt, _, _ := strings.Cut(ctype, ";")
	if _, ok := content[mt]; !ok {
		return fmt.Sprintf("content type %q is not documented for status %d", ctype, status)
	}
	loc := fmt.Sprintf("openapi.json#/paths/%s/%s/responses/%d/content/%s/schema",
		pointerEscape(tmpl), strings.ToLower(method), status, pointerEscape(mt))
	s.mu.Lock()
	sch, ok := s.compiled[loc]
	if !ok {
		var err error
		if sch, err = s.compiler.Compile(loc); err != nil {
			s.mu.Unlock()
			return "compile " + loc + ": " + err.Error()
		}
		s.compiled[loc] = sch
	}
	s.mu.Unlock()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(body)))
	if err != nil {
		return "body is not JSON: " + err.Error()
	}
	if err := sch.Validate(v); err != nil {
		return err.Error()
	}
	return ""
}

// send makes a request with the operate token, and a JSON body unless body
// is empty, and returns the response, its body, and the problem it
// carries when its status is 400 or more.
func (a *api) send(method, path, body string) (*http.Response, []byte, admin.Problem) {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.srv.URL+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operateToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.op.HTTPClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	var p admin.Problem
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &p); err != nil {
			a.t.Fatalf("%s %s: %d with a body that is not a problem: %v", method, path, resp.StatusCode, err)
		}
	}
	return resp, b, p
}
