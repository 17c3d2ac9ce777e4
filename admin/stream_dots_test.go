package admin_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/store"
)

// A stream may be named "." or "..": such a path segment is cleaned away
// by routers (and by browsers, even written %2E). The Go client sends it
// as %2E, which the API's router unescapes into the name; the query form
// /v1/stream, which the dashboard uses, names any stream.
func TestStreamsNamedDotAndDotDot(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		for _, name := range []string{".", ".."} {
			var head string
			for range 2 {
				r, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "billing", Type: "t", Stream: name})
				if err != nil {
					t.Fatal(err)
				}
				if head == "" {
					head = r.ID
				}
			}
			if _, err := a.op.MessageAction(a.ctx, head, "dead-letter", admin.ActionRequest{Reason: "by hand"}); err != nil {
				t.Fatal(err)
			}
			s, err := a.rd.Stream(a.ctx, "billing", name)
			if err != nil || s.Stream != name || !s.Blocked || s.Pending != 1 {
				t.Fatalf("stream %q through the path: %+v %v", name, s, err)
			}
			var byQuery admin.Stream
			q := url.Values{"destination": {"billing"}, "stream": {name}}
			if _, err := a.rd.Do(a.ctx, http.MethodGet, "/v1/stream", q, nil, &byQuery); err != nil || byQuery.Stream != name || !byQuery.Blocked {
				t.Fatalf("stream %q through the query: %+v %v", name, byQuery, err)
			}
			var rel admin.ActionResult
			if _, err := a.op.Do(a.ctx, http.MethodPost, "/v1/stream/release", q, nil, &rel); err != nil || rel.Count != 1 {
				t.Fatalf("release %q through the query: %+v %v", name, rel, err)
			}
			if s, err := a.rd.Stream(a.ctx, "billing", name); err != nil || s.Blocked {
				t.Errorf("stream %q after its release: %+v %v", name, s, err)
			}
			// The Go client's release goes through the path.
			if _, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "billing", Type: "t", Stream: name}); err != nil {
				t.Fatal(err)
			}
			if rel, err := a.op.ReleaseStream(a.ctx, "billing", name, ""); err != nil || rel.Target != "billing/"+name {
				t.Errorf("release %q through the path: %+v %v", name, rel, err)
			}
		}
		for field, q := range map[string]url.Values{"stream": {"destination": {"billing"}}, "destination": {"stream": {"x"}}} {
			_, err := a.rd.Do(a.ctx, http.MethodGet, "/v1/stream", q, nil, nil)
			wantProblem(t, err, 400, field)
		}
	})
}
