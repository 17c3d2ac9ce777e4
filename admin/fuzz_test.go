package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// fuzzRoutes are the admin API's routes that read a client's JSON body
// or query string.
var fuzzRoutes = []string{
	"POST /v1/messages",
	"POST /v1/dlq/replay",
	"POST /v1/dlq/resolve",
	"POST /v1/dlq/delete",
	"POST /v1/dlq/recover",
	"POST /v1/dlq/purge",
	"POST /v1/streams/orders/o-1/release",
	"POST /v1/messages/0195a3b2-4c5d-7e6f-8a9b-0c1d2e3f4a5b/dead-letter",
	"POST /v1/dlq/entry-1/resolve",
	"GET /v1/messages",
	"GET /v1/dlq",
	"GET /v1/audit",
}

// FuzzAdminJSON sends the admin API arbitrary JSON bodies and query
// strings on every route that reads them, as an operator's tool (or an
// attacker holding a token) could: the API never answers a 5xx to what
// the client sent, every answer is JSON (a problem document unless 2xx),
// and a message it accepts can be read back.
func FuzzAdminJSON(f *testing.F) {
	seeds := []struct {
		route uint8
		body  string
		query string
	}{
		{0, `{"destination":"orders","type":"order.created","payload":{"id":1},"stream":"o-1"}`, ""},
		{0, `{"destination":"orders","type":"t","payload_base64":"AAEC","headers":{"X-A":"b"},"idempotency_key":"k1"}`, ""},
		{0, `{"topic":"order.created","type":"t","payload":"x"}`, ""},
		{0, `{"destination":"orders","type":"t\u0000","stream":"\udc00","ordering":"sideways"}`, ""},
		{0, `{"destination":"orders","type":"t","payload":{"a":1},"payload_base64":"AA=="}`, ""},
		{0, `{"destination":"orders","type":"t","scheduled_for":"9999-12-31T23:59:59Z"}`, ""},
		{0, `{"destination":"orders","type":"t","headers":{"Bad Name":"v","X":"a\r\nb"}}`, ""},
		{0, `{"destination":"orders","type":1}`, ""},
		{0, `{"destination":"orders","type":"t"} {"again":true}`, ""},
		{0, `{"unknown":1}`, ""},
		{0, `[]`, ""},
		{0, `null`, ""},
		{0, "\xff\xfe", ""},
		{1, `{"filter":{"destination":"orders"},"dry_run":true}`, ""},
		{2, `{"filter":{"reason":"PoisonMessage"},"notes":"n"}`, ""},
		{3, `{"filter":{"before":"not a time"}}`, ""},
		{4, `{"since":"2025-01-01T00:00:00Z"}`, ""},
		{5, `{"before":"2025-01-01T00:00:00Z"}`, ""},
		{6, `{}`, ""},
		{7, `{"reason":"operator says so"}`, ""},
		{8, `{"notes":"fixed"}`, ""},
		{9, "", "destination=orders&limit=-1&cursor=%00"},
		{10, "", "reason=Nope&status=weird&after=yesterday&limit=99999999999999999999"},
		{11, "", "limit=1&cursor=zz"},
	}
	for _, s := range seeds {
		f.Add(s.route, []byte(s.body), s.query)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(f.TempDir(), "fuzz.db"), store.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	srv, err := admin.New(admin.Config{
		Store:        st,
		Tokens:       []admin.Token{{Name: "ops", Secret: operateToken, Role: admin.RoleOperate}},
		Destinations: []string{"orders", "audit"},
		Route: func(topic string) []string {
			if strings.HasPrefix(topic, "order.") {
				return []string{"orders", "audit"}
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	do := func(method, target string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+operateToken)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte, query string) {
		method, path, _ := strings.Cut(fuzzRoutes[int(route)%len(fuzzRoutes)], " ")
		target := path
		if q, err := url.ParseQuery(query); err == nil && len(q) > 0 {
			target += "?" + q.Encode()
		}
		rec := do(method, target, body)
		res := rec.Result()
		got := rec.Body.Bytes()
		if res.StatusCode >= 500 {
			t.Fatalf("%s %s with %q: %d %s", method, target, body, res.StatusCode, got)
		}
		if len(got) > 0 && !json.Valid(got) {
			t.Fatalf("%s %s: %d with a body that is not JSON: %q", method, target, res.StatusCode, got)
		}
		if res.StatusCode >= 400 && !strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
			t.Fatalf("%s %s: %d with Content-Type %q, want a problem document", method, target, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if method != "POST" || path != "/v1/messages" || res.StatusCode/100 != 2 {
			return
		}
		var out admin.EnqueueResponse
		if err := json.Unmarshal(got, &out); err != nil {
			t.Fatalf("POST /v1/messages answered %d with %q: %v", res.StatusCode, got, err)
		}
		for _, id := range append([]string{out.ID}, out.IDs...) {
			if id == "" {
				continue
			}
			if rec := do("GET", "/v1/messages/"+url.PathEscape(id), nil); rec.Code != http.StatusOK {
				t.Fatalf("message %s was accepted (%q) but GET answers %d %s", id, body, rec.Code, rec.Body.Bytes())
			}
		}
	})
}
