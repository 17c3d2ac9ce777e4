package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// FuzzWorkflowRuns asks for arbitrary run IDs and list queries: the API
// never answers a 5xx to what the client sent, and every answer matches
// the OpenAPI document.
func FuzzWorkflowRuns(f *testing.F) {
	for _, s := range [][2]string{
		{"run-1", "dag_id=etl&state=failed"},
		{"no-such-run", "cursor=run-1&limit=1"},
		{"a\x00b", "dag_id=%00&cursor=%ff"},
		{"\xff", "state=sleeping&limit=99999999999999999999"},
		{"", "cursor=no-such-run"},
	} {
		f.Add(s[0], s[1])
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(f.TempDir(), "fuzz.db"), store.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	srv, err := admin.New(admin.Config{Store: st, Workflows: workflowsOn(f, st),
		Tokens: []admin.Token{{Name: "dash", Secret: readToken, Role: admin.RoleRead}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, id, query string) {
		var targets []string
		if id != "." && id != ".." { // path cleaning redirects these before routing, as on every route
			targets = append(targets, "/v1/workflows/runs/"+url.PathEscape(id))
		}
		if q, err := url.ParseQuery(query); err == nil {
			targets = append(targets, "/v1/workflows/runs?"+q.Encode())
		}
		for _, target := range targets {
			req := httptest.NewRequest(http.MethodGet, target, nil)
			req.Header.Set("Authorization", "Bearer "+readToken)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("GET %s: %d %s", target, rec.Code, rec.Body)
			}
			if msg := spec().check(http.MethodGet, req.URL.EscapedPath(), rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()); msg != "" {
				t.Fatalf("GET %s: %s\n%s", target, msg, rec.Body)
			}
		}
	})
}
