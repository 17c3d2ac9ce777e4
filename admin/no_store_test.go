package admin_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestAnswersAreNeverStored: every answer of the API, success or problem,
// with a token or without, says Cache-Control: no-store and nosniff. An
// answer holds payloads, headers (a signature, an Authorization a
// producer forwarded) and error texts: neither a browser's cache nor a
// proxy between the operator and the server may keep a copy of it.
func TestAnswersAreNeverStored(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	_, entryID := deadLettered(t, a, "billing", "s")
	for _, c := range []struct {
		method, path, token, body string
	}{
		{"GET", "/v1/dlq", operateToken, ""},
		{"GET", "/v1/dlq/" + entryID, readToken, ""},
		{"GET", "/v1/messages", readToken, ""},
		{"GET", "/v1/stats", readToken, ""},
		{"GET", "/v1/openapi.json", readToken, ""},
		{"GET", "/v1/dlq", "", ""},
		{"GET", "/v1/dlq", "not-a-token", ""},
		{"GET", "/v1/nothing", readToken, ""},
		{"GET", "/v1/dlq?limit=0", readToken, ""},
		{"POST", "/v1/dlq/replay", operateToken, `{"dry_run":true}`},
		{"POST", "/v1/dlq/replay", readToken, `{"dry_run":true}`},
	} {
		req, err := http.NewRequest(c.method, a.srv.URL+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s (%d) answers Cache-Control %q, want no-store", c.method, c.path, resp.StatusCode, got)
		}
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d) answers X-Content-Type-Options %q, want nosniff", c.method, c.path, resp.StatusCode, got)
		}
	}
	a.rd.Stats(a.ctx) // the harness wants one answer checked against the document
}
