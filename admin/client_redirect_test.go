package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/admin"
)

// The client follows no redirect: the admin API answers none, and Go's
// client turned a POST answered 301, 302 or 303 (an http-to-https proxy, a
// login page) into a GET without its body, so a bulk replay came back as
// "not found" or as a page that was not JSON, and a GET went on to another
// host with the token. A redirect is an error naming where it points.
func TestClientFollowsNoRedirect(t *testing.T) {
	var followed atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/elsewhere") {
			followed.Add(1)
			_, _ = w.Write([]byte(`{}`))
			return
		}
		code := http.StatusFound
		if r.Method == http.MethodPost {
			code = http.StatusPermanentRedirect
		}
		http.Redirect(w, r, srv.URL+"/elsewhere"+r.URL.Path, code)
	}))
	t.Cleanup(srv.Close)
	c := &admin.Client{BaseURL: srv.URL, Token: "t"}
	_, err := c.Bulk(context.Background(), "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
	if err == nil || !strings.Contains(err.Error(), "redirect") || !strings.Contains(err.Error(), "/elsewhere/v1/dlq/replay") {
		t.Errorf("bulk replay answered with a redirect: %v", err)
	}
	_, err = c.Stats(context.Background())
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Errorf("stats answered with a redirect: %v", err)
	}
	if n := followed.Load(); n != 0 {
		t.Errorf("the client followed %d redirects", n)
	}
}
