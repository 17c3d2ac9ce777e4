package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
)

// An answer that is not the admin API's JSON (a proxy's HTML error page, a
// login page answered 200, an empty body) is reported as such, briefly
// and printable: the client quoted a 5xx page whole (up to 64 MiB, its
// terminal escapes included, on the operator's terminal) and a 200 page as
// "invalid character '<' looking for beginning of value".
func TestClientReportsAnswersThatAreNotJSON(t *testing.T) {
	page := "<html><body>\x1b]0;owned\x07\x1b[2J Bad gateway " + strings.Repeat("x", 1<<20) + "</body></html>"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/bad/v1/stats":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(page))
		case "/problem/v1/stats":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"title":"conflict \u001b[2J","status":409,"detail":"held \u001b]0;x\u0007"}`))
		default:
			_, _ = w.Write([]byte("<html><body>please log in</body></html>"))
		}
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct{ base, want string }{
		{"/bad", "502 Bad Gateway"},
		{"/problem", "conflict"},
		{"/login", "text/html"},
	} {
		_, err := (&admin.Client{BaseURL: srv.URL + c.base}).Stats(context.Background())
		if err == nil {
			t.Errorf("%s: no error", c.base)
			continue
		}
		msg := err.Error()
		if len(msg) > 1000 {
			t.Errorf("%s: error of %d bytes: %.200q", c.base, len(msg), msg)
		}
		if strings.ContainsAny(msg, "\x1b\x07") {
			t.Errorf("%s: error holds terminal escapes: %.200q", c.base, msg)
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %.300q does not say %q", c.base, msg, c.want)
		}
		if c.base != "/problem" && !strings.Contains(msg, "not JSON") {
			t.Errorf("%s: error %.300q does not say the answer is not JSON", c.base, msg)
		}
	}
}
