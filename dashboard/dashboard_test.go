package dashboard_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/backstophq/backstop/dashboard"
)

func get(t *testing.T, h http.Handler, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func TestHandlerServesTheAssets(t *testing.T) {
	h := dashboard.Handler()
	for _, c := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html; charset=utf-8", `<script type="module" src="js/app.js">`},
		{"/index.html", "text/html; charset=utf-8", "<title>Backstop</title>"},
		{"/app.css", "text/css; charset=utf-8", ":root"},
		{"/js/app.js", "text/javascript; charset=utf-8", "import"},
		{"/js/../js/api.js", "text/javascript; charset=utf-8", "Bearer"},
	} {
		resp := get(t, h, http.MethodGet, c.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.ctype || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.contains, strings.Contains(string(body), c.contains))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", c.path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", c.path)
		}
	}
	head := get(t, h, http.MethodHead, "/")
	if b, _ := io.ReadAll(head.Body); head.StatusCode != 200 || len(b) != 0 {
		t.Errorf("HEAD /: %d with %d bytes", head.StatusCode, len(b))
	}
}

func TestHandlerRefuses(t *testing.T) {
	h := dashboard.Handler()
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/nothing.js", 404},
		{http.MethodGet, "/js/", 404},
		{http.MethodGet, "/v1/stats", 404}, // the API is mounted beside, never served from here
		{http.MethodGet, "/%00", 404},
		{http.MethodGet, "/../../go.mod", 404},
		{http.MethodPost, "/", 405},
		{http.MethodDelete, "/app.css", 405},
	} {
		if resp := get(t, h, c.method, c.path); resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
	under := http.StripPrefix("/ui", h)
	if resp := get(t, under, http.MethodGet, "/ui/app.css"); resp.StatusCode != 200 {
		t.Errorf("under /ui: GET /ui/app.css: %d", resp.StatusCode)
	}
}

// TestAssetsStayOnTheServer checks that nothing in the assets reaches
// beyond the server (no CDN, no font or script from elsewhere) and that
// text from the API never goes in as markup.
func TestAssetsStayOnTheServer(t *testing.T) {
	absolute := regexp.MustCompile(`(?i)\b(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	n := 0
	err := fs.WalkDir(dashboard.Assets(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := fs.ReadFile(dashboard.Assets(), path)
		if err != nil {
			return err
		}
		s := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "")
		if m := absolute.FindString(s); m != "" {
			t.Errorf("%s refers to %s: the dashboard must work without any network beyond the server", path, m)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(s, bad) {
				t.Errorf("%s uses %s: text from the API must go in as text", path, bad)
			}
		}
		return nil
	})
	if err != nil || n < 5 {
		t.Fatalf("walked %d assets: %v", n, err)
	}
}
