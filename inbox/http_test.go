package inbox

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport/webhook"
)

const (
	secret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	oldSecret = "whsec_dGhlIG9sZCBrZXkgb2YgdGhlIHNlbmRlcg=="
)

// TestHTTPFromWebhook feeds the inbox from Backstop's own webhook
// transport: what one Backstop sends at least once (here, one message
// sent twice) another handles once.
func TestHTTPFromWebhook(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
			if msg.Source != "http" || msg.Headers["Content-Type"] != "application/json" {
				t.Errorf("message source %q, headers %v", msg.Source, msg.Headers)
			}
			return e.record(ctx, tx, msg)
		})
		h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		tr, err := webhook.New(webhook.Config{URL: srv.URL, Secret: []byte(secret), Clock: e.clk,
			Headers: map[string]string{"Content-Type": "application/json"}})
		if err != nil {
			t.Fatal(err)
		}
		var sent []*outbox.Message
		for i := range 3 {
			m := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Destination: "partner", Type: "order.created",
				Stream: "order-7", Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
			sent = append(sent, m)
			if err := tr.Deliver(e.ctx, m); err != nil {
				t.Fatalf("Deliver %d: %v", i, err)
			}
		}
		if err := tr.Deliver(e.ctx, sent[1]); err != nil { // a re-send after a lost answer
			t.Fatalf("re-send: %v", err)
		}
		e.run(in)
		e.waitFor("three handled", func() bool { return in.Relay().Stats().Delivered == 3 })
		var want []string
		for _, m := range sent {
			want = append(want, m.ID.String()+"@1")
		}
		if got := e.handled()["order-7"]; !slices.Equal(got, want) {
			t.Errorf("handled %v, want %v", got, want)
		}
		if n := counter(t, e.reg, "backstop_inbox_duplicates_total", "inbox", "orders", "source", "http"); n != 1 {
			t.Errorf("duplicates_total = %d, want 1", n)
		}
	})
}

// signed returns a POST signed as the webhook transport signs, sent at
// the time at.
func signed(t *testing.T, key, id string, at time.Time, body []byte, hdr map[string]string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/inbox", bytes.NewReader(body))
	ts := strconv.FormatInt(at.Unix(), 10)
	if key != "" {
		sig, err := webhook.Sign([]byte(key), id, ts, body)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set(webhook.HeaderSignature, sig)
	}
	r.Header.Set(webhook.HeaderMessageID, id)
	r.Header.Set(webhook.HeaderTimestamp, ts)
	for k, v := range hdr {
		r.Header[k] = []string{v} // as sent, unchecked
	}
	return r
}

// TestHTTPAnswers checks what the receiver answers to good and bad
// requests, and that the bad ones write nothing.
func TestHTTPAnswers(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret), []byte(oldSecret)}, MaxBody: 64})
		if err != nil {
			t.Fatal(err)
		}
		now := e.clk.Now()
		typed := map[string]string{webhook.HeaderType: "order.created"}
		cases := []struct {
			name string
			req  *http.Request
			want int
		}{
			{"stored", signed(t, secret, "msg_1", now, []byte(`{}`), typed), StatusStored},
			{"again", signed(t, secret, "msg_1", now.Add(time.Second), []byte(`{}`), typed), StatusDuplicate},
			{"its id for another body", signed(t, secret, "msg_1", now, []byte(`{"n":2}`), typed), http.StatusUnprocessableEntity},
			{"old key while rotating", signed(t, oldSecret, "msg_2", now, []byte(`{}`), typed), StatusStored},
			{"type from a JSON body", signed(t, secret, "msg_3", now, []byte(`{"type":"order.paid"}`), nil), StatusStored},
			{"unsigned", signed(t, "", "msg_4", now, []byte(`{}`), typed), http.StatusUnauthorized},
			{"another key", signed(t, "whsec_c29tZW9uZSBlbHNlJ3Mga2V5", "msg_5", now, []byte(`{}`), typed), http.StatusUnauthorized},
			{"stale", signed(t, secret, "msg_6", now.Add(-10*time.Minute), []byte(`{}`), typed), http.StatusUnauthorized},
			{"no type", signed(t, secret, "msg_7", now, []byte(`not json`), nil), http.StatusBadRequest},
			{"control character in the stream", signed(t, secret, "msg_8", now, []byte(`{}`),
				map[string]string{webhook.HeaderType: "a", webhook.HeaderStream: "o\x01"}), http.StatusBadRequest},
			{"NUL in the id", signed(t, secret, "msg\x00_9", now, []byte(`{}`), typed), http.StatusBadRequest},
			{"invalid UTF-8 type", signed(t, secret, "msg_10", now, []byte(`{}`),
				map[string]string{webhook.HeaderType: "\xff\xfe"}), http.StatusBadRequest},
			{"id too long", signed(t, secret, strings.Repeat("x", MaxIDLen+1), now, []byte(`{}`), typed), http.StatusBadRequest},
			{"body too large", signed(t, secret, "msg_11", now, bytes.Repeat([]byte("x"), 65), typed), http.StatusRequestEntityTooLarge},
			{"GET", httptest.NewRequest(http.MethodGet, "/inbox", nil), http.StatusMethodNotAllowed},
		}
		for _, c := range cases {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, c.req)
			if w.Code != c.want {
				t.Errorf("%s: answered %d (%s), want %d", c.name, w.Code, strings.TrimSpace(w.Body.String()), c.want)
			}
		}
		if n := e.count(`SELECT count(*) FROM ` + k.outbox(e.spec)); n != 3 {
			t.Errorf("%d rows written, want 3 (the stored requests only)", n)
		}
		if n := counter(t, e.reg, "backstop_inbox_received_total", "inbox", "orders", "source", "http"); n != 3 {
			t.Errorf("received_total = %d, want 3", n)
		}
		if _, err := in.HTTPHandler(HTTPConfig{}); err == nil {
			t.Error("HTTPHandler without secrets: no error")
		}
		if _, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte("whsec_!!")}}); err == nil {
			t.Error("HTTPHandler with a secret that is not base64: no error")
		}
	})
}

// TestHTTPLeavesOutHeadersTheMessageCannotCarry: a correctly signed
// request whose kept header the message cannot carry (invalid UTF-8, which
// net/http lets through; a value over the inbox's header limit) is stored
// without that header, not answered 400: the signature does not cover
// headers, and a 400 makes the sender dead-letter the message.
func TestHTTPLeavesOutHeadersTheMessageCannotCarry(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}, Headers: []string{"Content-Type", "X-Tenant"}})
		if err != nil {
			t.Fatal(err)
		}
		now := e.clk.Now()
		for i, ct := range []string{"application/json; charset=\xff", strings.Repeat("x", 20<<10)} {
			id := fmt.Sprintf("msg_%d", i)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, signed(t, secret, id, now, []byte(`{}`),
				map[string]string{webhook.HeaderType: "order.created", "Content-Type": ct, "X-Tenant": "acme"}))
			if w.Code != StatusStored {
				t.Fatalf("%s: answered %d (%s), want %d", id, w.Code, strings.TrimSpace(w.Body.String()), StatusStored)
			}
		}
		msgs, err := e.s.(store.Admin).ListMessages(e.ctx, store.MessageFilter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 {
			t.Fatalf("%d messages stored, want 2", len(msgs))
		}
		for _, m := range msgs {
			if _, ok := m.Headers["Content-Type"]; ok || m.Headers["X-Tenant"] != "acme" {
				t.Errorf("message %s headers %q: want Content-Type left out and X-Tenant kept", m.Headers[HeaderID], m.Headers)
			}
		}
	})
}
