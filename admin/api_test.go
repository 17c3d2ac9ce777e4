package admin_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/store"
)

// wantProblem checks that err is a problem with the status and, when
// field is set, naming the field.
func wantProblem(t *testing.T, err error, status int, field string) *admin.Problem {
	t.Helper()
	var p *admin.Problem
	if !errors.As(err, &p) {
		t.Fatalf("error %v (%T), want a problem with status %d", err, err, status)
	}
	if p.Status != status || (field != "" && p.Field != field) {
		t.Fatalf("problem %+v, want status %d field %q", p, status, field)
	}
	return p
}

func TestAuth(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		_, err := a.anon.Stats(a.ctx)
		wantProblem(t, err, 401, "")
		bad := *a.rd
		bad.Token = readToken + "x"
		_, err = bad.Stats(a.ctx)
		wantProblem(t, err, 401, "")
		if _, err := a.rd.Stats(a.ctx); err != nil {
			t.Fatalf("read token, GET: %v", err)
		}
		_, err = a.rd.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "billing", Type: "t"})
		wantProblem(t, err, 403, "")
		_, err = a.rd.Bulk(a.ctx, "replay", admin.BulkRequest{})
		wantProblem(t, err, 403, "")
		var doc map[string]any
		if _, err := a.rd.Do(a.ctx, http.MethodGet, "/v1/openapi.json", nil, nil, &doc); err != nil || doc["openapi"] != "3.1.0" {
			t.Errorf("openapi.json: %v %v", doc["openapi"], err)
		}
		_, err = a.rd.Do(a.ctx, http.MethodGet, "/v1/nothing", nil, nil, nil)
		wantProblem(t, err, 404, "")
		_, err = a.op.Do(a.ctx, http.MethodPut, "/v1/stats", nil, nil, nil)
		wantProblem(t, err, 405, "")
		// A route's path with a method it does not take: 405, and Allow
		// names the methods it takes.
		req, _ := http.NewRequest(http.MethodPatch, a.srv.URL+"/v1/dlq/"+uuid.NewString(), nil)
		req.Header.Set("Authorization", "Bearer "+operateToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, DELETE" {
			t.Errorf("PATCH /v1/dlq/{id}: %d, Allow %q; want 405, Allow \"GET, DELETE\"", resp.StatusCode, resp.Header.Get("Allow"))
		}
	})
}

func TestEnqueue(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		req := admin.EnqueueRequest{Destination: "billing", Type: "order.created", Stream: "order-42",
			Payload: []byte(`{"order": 42}`), Headers: map[string]string{"X-Trace": "abc"}, IdempotencyKey: "order-42-created"}
		first, err := a.op.Enqueue(a.ctx, req)
		if err != nil || first.Duplicate || len(first.IDs) != 1 {
			t.Fatalf("enqueue: %+v %v", first, err)
		}
		var status int
		var again admin.EnqueueResponse
		status, err = a.op.Do(a.ctx, http.MethodPost, "/v1/messages", nil, req, &again)
		if err != nil || status != 200 || !again.Duplicate || again.ID != first.ID {
			t.Fatalf("duplicate: status %d %+v %v, want 200 with id %s", status, again, err, first.ID)
		}
		m, err := a.op.Message(a.ctx, first.ID)
		if err != nil || string(m.Payload) != `{"order":42}` || m.Stream != "order-42" || m.Headers["X-Trace"] != "abc" {
			t.Fatalf("message: %+v %v", m, err)
		}
		list, _ := a.op.Messages(a.ctx, nil)
		if len(list.Items) != 1 {
			t.Errorf("%d messages after a duplicate", len(list.Items))
		}
		// Binary payloads go in and come out in base64.
		bin, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "audit", Type: "blob", PayloadBase64: "AAH/"})
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := a.op.Message(a.ctx, bin.ID); m.PayloadBase64 != "AAH/" || m.Payload != nil {
			t.Errorf("binary payload shown as %+v", m)
		}
		// A topic fans out to every routed destination.
		fan, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Topic: "order.shipped", Type: "order.shipped", Stream: "order-42"})
		if err != nil || len(fan.IDs) != 2 {
			t.Fatalf("fan-out: %+v %v", fan, err)
		}
		for i, d := range []string{"billing", "audit"} {
			if m, _ := a.op.Message(a.ctx, fan.IDs[i]); m.Destination != d {
				t.Errorf("fan-out message %d went to %q, want %q", i, m.Destination, d)
			}
		}
		sched := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		later, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "billing", Type: "t", ScheduledFor: &sched})
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := a.op.Message(a.ctx, later.ID); m.ScheduledFor == nil || !m.ScheduledFor.Equal(sched) {
			t.Errorf("scheduled_for %v, want %v", m.ScheduledFor, sched)
		}
	})
}

func TestEnqueueRefuses(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st, func(c *admin.Config) { c.MaxBodyBytes = 4096 })
		post := func(body any) error {
			_, err := a.op.Do(a.ctx, http.MethodPost, "/v1/messages", nil, body, nil)
			return err
		}
		for _, tc := range []struct {
			name   string
			body   any
			status int
			field  string
		}{
			{"no destination", map[string]any{"type": "t"}, 400, "destination"},
			{"no type", map[string]any{"destination": "billing"}, 400, "type"},
			{"control character in stream", map[string]any{"destination": "billing", "type": "t", "stream": "a\nb"}, 400, "stream"},
			{"NUL in type", map[string]any{"destination": "billing", "type": "t\x00"}, 400, "type"},
			{"C1 control in stream", map[string]any{"destination": "billing", "type": "t", "stream": "a\u0085b"}, 400, "stream"},
			{"unknown field", map[string]any{"destination": "billing", "type": "t", "colour": "red"}, 400, "colour"},
			{"headers not an object", map[string]any{"destination": "billing", "type": "t", "headers": []int{1}}, 400, "headers"},
			{"type not a string", map[string]any{"destination": "billing", "type": 7}, 400, "type"},
			{"bad header name", map[string]any{"destination": "billing", "type": "t", "headers": map[string]string{"X A": "1"}}, 400, ""},
			{"both payloads", map[string]any{"destination": "billing", "type": "t", "payload": 1, "payload_base64": "AA=="}, 400, "payload_base64"},
			{"bad base64", map[string]any{"destination": "billing", "type": "t", "payload_base64": "%%%"}, 400, "payload_base64"},
			{"bad ordering", map[string]any{"destination": "billing", "type": "t", "ordering": "sorted"}, 400, "ordering"},
			{"bad time", map[string]any{"destination": "billing", "type": "t", "scheduled_for": "tomorrow"}, 400, ""},
			{"destination and topic", map[string]any{"destination": "billing", "topic": "order.x", "type": "t"}, 400, "topic"},
			{"unknown destination", map[string]any{"destination": "nowhere", "type": "t"}, 422, "destination"},
			{"unrouted topic", map[string]any{"topic": "invoice.paid", "type": "t"}, 422, "topic"},
			{"too large", map[string]any{"destination": "billing", "type": "t", "payload": strings.Repeat("x", 5000)}, 413, ""},
			{"not an object", []int{1, 2}, 400, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := wantProblem(t, post(tc.body), tc.status, tc.field)
				if strings.Contains(strings.ToLower(p.Detail), "sql") || strings.Contains(p.Detail, "goroutine") {
					t.Errorf("problem leaks internals: %+v", p)
				}
			})
		}
		// Not JSON at all, and an empty body.
		for _, raw := range []string{"{", "", "\x00\xff"} {
			resp, err := http.Post(a.srv.URL+"/v1/messages", "application/json", strings.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Errorf("unauthenticated %q: %d", raw, resp.StatusCode)
			}
			req, _ := http.NewRequest(http.MethodPost, a.srv.URL+"/v1/messages", strings.NewReader(raw))
			req.Header.Set("Authorization", "Bearer "+operateToken)
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("body %q: %d %s", raw, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
		}
		if list, _ := a.op.Messages(a.ctx, nil); len(list.Items) != 0 {
			t.Errorf("refused requests wrote %d messages", len(list.Items))
		}
	})
}

func TestMessagesAndStreams(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		var ids []string
		for i := range 5 {
			r, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "billing", Type: "step", Stream: "order-7",
				Payload: []byte(`{"step":` + string(rune('1'+i)) + `}`)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
		// Pages by cursor.
		p1, err := a.rd.Messages(a.ctx, url.Values{"limit": {"3"}, "destination": {"billing"}})
		if err != nil || len(p1.Items) != 3 || p1.NextCursor == "" {
			t.Fatalf("page 1: %+v %v", p1, err)
		}
		p2, err := a.rd.Messages(a.ctx, url.Values{"limit": {"3"}, "cursor": {p1.NextCursor}})
		if err != nil || len(p2.Items) != 2 || p2.Items[0].ID != ids[3] || p2.NextCursor != "" {
			t.Fatalf("page 2: %+v %v", p2, err)
		}
		for _, q := range []url.Values{{"limit": {"0"}}, {"limit": {"x"}}, {"cursor": {"abc"}}, {"state": {"bogus"}}} {
			_, err := a.rd.Messages(a.ctx, q)
			wantProblem(t, err, 400, "")
		}
		_, err = a.rd.Message(a.ctx, "not-a-uuid")
		wantProblem(t, err, 400, "id")
		_, err = a.rd.Message(a.ctx, uuid.NewString())
		wantProblem(t, err, 404, "")

		// Dead-letter the head by hand: the stream is blocked, and says why.
		res, err := a.op.MessageAction(a.ctx, ids[0], "dead-letter", admin.ActionRequest{Reason: "bad address", Notes: "customer moved"})
		if err != nil || res.AuditID == 0 {
			t.Fatalf("dead-letter: %+v %v", res, err)
		}
		if m, _ := a.rd.Message(a.ctx, ids[0]); len(m.History) != 1 || m.History[0].Notes != "customer moved" {
			t.Errorf("the message's history: %+v", m.History)
		}
		s, err := a.rd.Stream(a.ctx, "billing", "order-7")
		if err != nil || !s.Blocked || !strings.Contains(s.Why, ids[0][:8]) {
			t.Fatalf("stream: %+v %v", s, err)
		}
		dead, _ := a.rd.Messages(a.ctx, url.Values{"state": {"dead_lettered"}})
		if len(dead.Items) != 1 || dead.Items[0].ID != ids[0] {
			t.Errorf("dead-lettered messages %+v", dead.Items)
		}
		rel, err := a.op.ReleaseStream(a.ctx, "billing", "order-7", "skip it")
		if err != nil || rel.Count != 1 {
			t.Fatalf("release: %+v %v", rel, err)
		}
		if s, _ := a.rd.Stream(a.ctx, "billing", "order-7"); s.Blocked {
			t.Errorf("still blocked after release: %+v", s)
		}
		// Streams with odd names travel escaped.
		odd := "a/b c?d#é"
		if _, err := a.op.Enqueue(a.ctx, admin.EnqueueRequest{Destination: "billing", Type: "t", Stream: odd}); err != nil {
			t.Fatal(err)
		}
		if s, err := a.rd.Stream(a.ctx, "billing", odd); err != nil || s.Stream != odd || s.Pending != 1 {
			t.Errorf("odd stream: %+v %v", s, err)
		}
		// Reset, retry-now and cancel.
		for _, action := range []string{"reset", "retry-now", "cancel"} {
			if _, err := a.op.MessageAction(a.ctx, ids[4], action, admin.ActionRequest{}); err != nil {
				t.Errorf("%s: %v", action, err)
			}
		}
		_, err = a.op.MessageAction(a.ctx, ids[4], "cancel", admin.ActionRequest{})
		wantProblem(t, err, 404, "")
		log, err := a.rd.Audit(a.ctx, nil)
		if err != nil || len(log.Items) != 5 || log.Items[0].Action != "cancel" || log.Items[0].Actor != "ops" {
			t.Fatalf("audit: %+v %v", log, err)
		}
		last := log.Items[len(log.Items)-1]
		if last.Action != "dead_letter" || last.Notes != "customer moved" || last.Target != ids[0] {
			t.Errorf("first record %+v", last)
		}
		if b, err := a.rd.Breakers(a.ctx); err != nil || len(b.Items) != 1 {
			t.Errorf("breakers %+v %v", b, err)
		}
	})
}

// TestNamesThatCannotExistAreBadRequests: a destination, stream or type
// holding a NUL or invalid UTF-8, in a path or a filter, is a 400 naming
// the field on both stores. On PostgreSQL such a value reached the store
// and came back as a 500 (its text cannot hold either); on SQLite a
// release of such a "stream" was recorded in the audit log. A control
// character is a valid name (plain SQL may write one) and is looked up.
func TestNamesThatCannotExistAreBadRequests(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		hc := &http.Client{Transport: &validating{t: t, next: http.DefaultTransport, n: new(int)}}
		send := func(method, path, body string) (int, problemBody) {
			t.Helper()
			status, b := sendWith(t, a, hc, method, path, body)
			var p problemBody
			_ = json.Unmarshal(b, &p)
			return status, p
		}
		for _, c := range []struct{ method, path, body, field string }{
			{"GET", "/v1/streams/billing/a%00b", "", "stream"},
			{"GET", "/v1/streams/billing/%FF", "", "stream"},
			{"GET", "/v1/streams/%00/x", "", "destination"},
			{"POST", "/v1/streams/billing/%FFx/release", "", "stream"},
			{"GET", "/v1/messages?stream=a%00", "", "stream"},
			{"GET", "/v1/messages?type=%FE", "", "type"},
			{"GET", "/v1/dlq?destination=a%00", "", "destination"},
			{"GET", "/v1/dlq?fingerprint=%FF", "", "fingerprint"},
			{"POST", "/v1/dlq/replay", `{"stream":"a\u0000b","dry_run":true}`, "stream"},
			{"POST", "/v1/dlq/recover", `{"destination":"bill\u0000ing","since":"2026-01-01T00:00:00Z","dry_run":true}`, "destination"},
		} {
			status, p := send(c.method, c.path, c.body)
			if status != http.StatusBadRequest || p.Field != c.field {
				t.Errorf("%s %s: %d, field %q; want 400 naming %q", c.method, c.path, status, p.Field, c.field)
			}
		}
		if status, _ := send("GET", "/v1/streams/billing/a%01b", ""); status != http.StatusOK {
			t.Errorf("a stream name with a control character: %d, want 200", status)
		}
		audit, err := a.rd.Audit(a.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(audit.Items) != 0 {
			t.Errorf("refused requests were audited: %+v", audit.Items)
		}
	})
}

// problemBody is the part of a problem document the tests read.
type problemBody struct {
	Field string `json:"field"`
}
