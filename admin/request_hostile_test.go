package admin_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// A bulk replay filtered on a status other than pending is refused naming
// status: it used to take the filter as "pending" and replay the entries
// the operator's filter had left out (the dashboard sends the page's
// status filter with its "Replay…" button).
func TestBulkReplayRefusesAStatusOtherThanPending(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		_, pending := deadLettered(t, a, "billing", "s1")
		_, done := deadLettered(t, a, "billing", "s2")
		if _, err := a.op.EntryAction(a.ctx, done, "resolve", "sent by hand"); err != nil {
			t.Fatal(err)
		}
		for _, status := range []string{"replayed", "resolved"} {
			for _, dry := range []bool{true, false} {
				_, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing", Status: status}, DryRun: dry})
				wantProblem(t, err, 400, "status")
			}
		}
		if e, err := a.rd.DeadLetter(a.ctx, pending); err != nil || e.Status != "pending" {
			t.Fatalf("the pending entry after the refused replays: %+v %v", e, err)
		}
		res, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing", Status: "pending"}})
		if err != nil || res.Count != 1 || res.Sample[0].ID != pending {
			t.Fatalf("replay of status pending: %+v %v, want the pending entry", res, err)
		}
	})
}

// Texts PostgreSQL's columns cannot hold are a 400 naming the field on
// both stores, never a 500.
func TestEnqueueRefusesNULInIdempotencyKeyAndTopic(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		for _, c := range []struct{ body, field string }{
			{`{"destination":"billing","type":"t","idempotency_key":"k\u0000"}`, "idempotency_key"},
			{`{"topic":"orders\u0000","type":"t"}`, "topic"},
		} {
			status, body := checkedSend(t, a, "POST", "/v1/messages", c.body)
			if status != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) {
				t.Errorf("%s: %d %s, want 400 naming %s", c.body, status, body, c.field)
			}
		}
	})
}

// Anything after the JSON body is refused, a stray closing bracket too.
func TestBodyWithTrailingBracketsIsRefused(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	for _, body := range []string{`{"dry_run":true}]`, `{"dry_run":true}}`, `{"dry_run":true} {}`, `{"dry_run":true} x`} {
		status, resp := checkedSend(t, a, "POST", "/v1/dlq/replay", body)
		if status != 400 || !strings.Contains(resp, "trailing data") {
			t.Errorf("%q: %d %s, want 400 trailing data", body, status, resp)
		}
	}
	if status, resp := checkedSend(t, a, "POST", "/v1/dlq/replay", "{\"dry_run\":true}\n\t "); status != 200 {
		t.Errorf("trailing white space: %d %s, want 200", status, resp)
	}
}

// An action whose body is optional takes an empty chunked body (no
// Content-Length) as no body.
func TestEmptyChunkedBodyIsNoBody(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	_, id := deadLettered(t, a, "billing", "s")
	req, err := http.NewRequest("POST", a.srv.URL+"/v1/dlq/"+id+"/resolve", io.NopCloser(strings.NewReader("")))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // unknown: sent chunked
	req.Header.Set("Authorization", "Bearer "+operateToken)
	resp, err := a.op.HTTPClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("empty chunked body: %d %s, want 200 (the body is optional)", resp.StatusCode, b)
	}
}

// The bearer scheme is case-insensitive (RFC 9110 11.1).
func TestBearerSchemeInAnyCase(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		req, err := http.NewRequest("GET", a.srv.URL+"/v1/stats", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", scheme+" "+operateToken)
		resp, err := a.op.HTTPClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("scheme %q: %d, X-Content-Type-Options %q; want 200, nosniff", scheme, resp.StatusCode, resp.Header.Get("X-Content-Type-Options"))
		}
	}
	for _, h := range []string{"Basic " + operateToken, "Bearer", "Bearer ", operateToken} {
		req, _ := http.NewRequest("GET", a.srv.URL+"/v1/stats", nil)
		req.Header.Set("Authorization", h)
		resp, err := a.op.HTTPClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("Authorization %q: %d, want 401", h, resp.StatusCode)
		}
	}
}

// checkedSend sends a request with the operate token through the client
// that checks every answer against the OpenAPI document.
func checkedSend(t *testing.T, a *api, method, path, body string) (int, string) {
	t.Helper()
	status, b := sendWith(t, a, a.op.HTTPClient, method, path, body)
	return status, string(b)
}

// A time the body gets wrong is a 400 naming its field (time.Time's own
// errors name none).
func TestBadTimeInBodyNamesItsField(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	for _, c := range []struct{ path, body, field string }{
		{"/v1/messages", `{"destination":"billing","type":"t","scheduled_for":"tomorrow"}`, "scheduled_for"},
		{"/v1/messages", `{"destination":"billing","type":"t","scheduled_for":1764000000}`, "scheduled_for"},
		{"/v1/messages", `{"destination":"billing","type":"t","Scheduled_For":"2026-13-01T00:00:00Z"}`, "scheduled_for"},
		{"/v1/dlq/recover", `{"destination":"billing","since":"yesterday"}`, "since"},
		{"/v1/dlq/replay", `{"dry_run":true,"after":"2026-11-24T00:00:00Z","before":"noon"}`, "before"},
	} {
		status, body := checkedSend(t, a, "POST", c.path, c.body)
		if status != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) || !strings.Contains(body, "RFC 3339") {
			t.Errorf("%s %s: %d %s, want 400 naming %s", c.path, c.body, status, body, c.field)
		}
	}
}

// An idempotency key over store.MaxIdempotencyKeyLen bytes is a 400 naming
// it on both stores: PostgreSQL answered a 10 KB key with a 500 (its index
// entry limit) while SQLite took it.
func TestLongIdempotencyKeyIsRefused(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		body := func(key string) string {
			return `{"destination":"billing","type":"t","idempotency_key":"` + key + `"}`
		}
		for _, n := range []int{256, 10 << 10} {
			status, resp := checkedSend(t, a, "POST", "/v1/messages", body(strings.Repeat("k", n)))
			if status != 400 || !strings.Contains(resp, `"field":"idempotency_key"`) {
				t.Errorf("a %d-byte key: %d %s, want 400 naming idempotency_key", n, status, resp)
			}
		}
		if status, resp := checkedSend(t, a, "POST", "/v1/messages", body(strings.Repeat("k", 255))); status != 202 {
			t.Errorf("a 255-byte key: %d %s, want 202", status, resp)
		}
		if _, _, err := st.(store.Admin).EnqueueIdempotent(a.ctx, strings.Repeat("k", 256), &outbox.Message{Destination: "billing", Type: "t"}); err == nil {
			t.Error("the store took a 256-byte key")
		}
	})
}

// Text encoding/json would change is a 400 naming the field: bytes that
// are not UTF-8 and lone surrogate escapes were taken as U+FFFD, so two
// idempotency keys (or streams) that differed only there became one, and
// the second message was dropped as a duplicate of the first. A payload
// sent as JSON is kept byte for byte, and is not refused for it.
func TestEnqueueRefusesTextJSONWouldChange(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		for _, c := range []struct{ body, field string }{
			{`{"destination":"billing","type":"t","idempotency_key":"k\ud800"}`, "idempotency_key"},
			{`{"destination":"billing","type":"t","idempotency_key":"k\udfff"}`, "idempotency_key"},
			{`{"destination":"billing","type":"t","idempotency_key":"k\uD800\u0041"}`, "idempotency_key"},
			{"{\"destination\":\"billing\",\"type\":\"t\",\"stream\":\"a\xffb\"}", "stream"},
			{"{\"destination\":\"billing\",\"type\":\"t\",\"headers\":{\"X-A\":\"\xfe\"}}", "headers"},
			{"{\"destination\":\"billing\",\"Type\":\"t\xc3\"}", "Type"},
		} {
			status, body := checkedSend(t, a, "POST", "/v1/messages", c.body)
			if status != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) || !strings.Contains(body, "UTF-8") {
				t.Errorf("%q: %d %s, want 400 naming %s", c.body, status, body, c.field)
			}
		}
		for _, body := range []string{
			`{"destination":"billing","type":"t","idempotency_key":"k\ud83d\ude00"}`,
			`{"destination":"billing","type":"t","idempotency_key":"k\ufffd"}`,
			"{\"destination\":\"billing\",\"type\":\"t\",\"stream\":\"a\xef\xbf\xbdb\"}",
			`{"destination":"billing","type":"t","payload":{"p":"\ud800"}}`,
			"{\"destination\":\"billing\",\"type\":\"t\",\"Payload\":{\"p\":\"\xff\"}}",
		} {
			if status, resp := checkedSend(t, a, "POST", "/v1/messages", body); status != 202 {
				t.Errorf("%q: %d %s, want 202", body, status, resp)
			}
		}
	})
}

// A member of the wrong type in a bulk request's filter is named as the
// API names it: it was named by its Go path, "Filter.status".
func TestBulkFilterTypeErrorNamesTheMember(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	for _, c := range []struct{ body, field string }{
		{`{"status":["resolved"]}`, "status"},
		{`{"destination":5}`, "destination"},
		{`{"dry_run":"yes"}`, "dry_run"},
	} {
		status, resp := checkedSend(t, a, "POST", "/v1/dlq/delete", c.body)
		if status != 400 || !strings.Contains(resp, `"field":"`+c.field+`"`) || strings.Contains(resp, "Filter.") {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, status, resp, c.field)
		}
	}
}

// A member given twice is a 400 naming it: encoding/json kept the last,
// and {"dry_run":true,"dry_run":false} ran the action for real.
func TestDuplicateMemberIsRefused(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	_, id := deadLettered(t, a, "billing", "s")
	for _, body := range []string{
		`{"destination":"billing","dry_run":true,"dry_run":false}`,
		`{"destination":"billing","dry_run":true,"DRY_RUN":false}`,
	} {
		status, resp := checkedSend(t, a, "POST", "/v1/dlq/delete", body)
		if status != 400 || !strings.Contains(strings.ToLower(resp), `"field":"dry_run"`) {
			t.Errorf("%s: %d %s, want 400 naming dry_run", body, status, resp)
		}
	}
	if e, err := a.rd.DeadLetter(a.ctx, id); err != nil || e.Status != "pending" {
		t.Fatalf("the entry after the refused deletes: %+v %v", e, err)
	}
	if status, resp := checkedSend(t, a, "POST", "/v1/messages", `{"destination":"billing","type":"t","headers":{"X-A":"1","x-a":"2"}}`); status == 400 && strings.Contains(resp, "more than once") {
		t.Errorf("headers differing in case were taken for one member: %d %s", status, resp)
	}
}

// A list's unknown query parameter is a 400 naming it: a misspelt filter
// (?destinaton=billing) listed everything, and a script counting one
// destination's dead letters counted them all.
func TestListRefusesUnknownParameters(t *testing.T) {
	a := newAPI(t, openSQLite(t))
	for _, c := range []struct{ path, field string }{
		{"/v1/dlq?destinaton=billing", "destinaton"},
		{"/v1/dlq?destination=billing&limit=5&Status=pending", "Status"},
		{"/v1/messages?typ=order.created", "typ"},
		{"/v1/audit?actor=cli", "actor"},
	} {
		status, resp := checkedSend(t, a, "GET", c.path, "")
		if status != 400 || !strings.Contains(resp, `"field":"`+c.field+`"`) {
			t.Errorf("GET %s: %d %s, want 400 naming %s", c.path, status, resp, c.field)
		}
	}
	for _, path := range []string{"/v1/dlq?destination=billing&status=pending&limit=5&payload=false",
		"/v1/messages?destination=billing&type=t&state=ready&limit=5", "/v1/audit?action=replay&limit=5"} {
		if status, resp := checkedSend(t, a, "GET", path, ""); status != 200 {
			t.Errorf("GET %s: %d %s, want 200", path, status, resp)
		}
	}
}
