package inbox

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/webhook"
)

// An inbox whose Limits are above the defaults stores what they allow:
// the store checked messages against the defaults again, and refused them
// with an error the receivers took for "the database is down" (503, Nak,
// requeue), forever.
func TestRaisedLimitsAreTheInboxs(t *testing.T) {
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		cfg := e.config()
		cfg.Limits = outbox.Limits{MaxPayloadBytes: 4 << 20, MaxHeaders: 200}
		in := e.newInbox(cfg)
		big := received("big-1", "order.created", "s")
		big.Payload = bytes.Repeat([]byte("x"), 2<<20)
		if dup, err := in.Receive(e.ctx, big); err != nil || dup {
			t.Fatalf("2 MiB payload, MaxPayloadBytes 4 MiB: duplicate %v, %v", dup, err)
		}
		many := received("many-1", "order.created", "s")
		many.Headers = map[string]string{}
		for i := range 100 {
			many.Headers["X-H"+strconv.Itoa(i)] = "v"
		}
		if dup, err := in.Receive(e.ctx, many); err != nil || dup {
			t.Fatalf("100 headers, MaxHeaders 200: duplicate %v, %v", dup, err)
		}
		h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, signed(t, secret, "http-big", e.clk.Now(), bytes.Repeat([]byte("y"), 2<<20),
			map[string]string{webhook.HeaderType: "order.created"}))
		if w.Code != StatusStored {
			t.Fatalf("HTTP, 2 MiB body: %d %s, want %d", w.Code, w.Body, StatusStored)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.k.outbox(e.spec)); n != 3 {
			t.Fatalf("%d rows stored, want 3", n)
		}
	})
}

// A message with the 64 headers an outbox message may carry is taken: the
// inbox's own two headers do not count (Backstop's transport sent it, and
// the inbox refused it for good).
func TestHeadersAtTheOutboxsLimitAreTaken(t *testing.T) {
	e := newEnv(t, kinds[0])
	in := e.newInbox(e.config())
	r := received("h64", "order.created", "s")
	r.Headers = map[string]string{}
	for i := range outbox.DefaultMaxHeaders {
		r.Headers["X-H"+strconv.Itoa(i)] = "v"
	}
	if dup, err := in.Receive(e.ctx, r); err != nil || dup {
		t.Fatalf("%d headers: duplicate %v, %v", len(r.Headers), dup, err)
	}
	r.ID = "h65"
	r.Headers["X-One-Too-Many"] = "v"
	if _, err := in.Receive(e.ctx, r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("%d headers: %v, want ErrInvalid", len(r.Headers), err)
	}
}

// Limits above what a store keeps, less the inbox's own headers, refuse
// to start, naming the field.
func TestLimitsOverWhatAStoreKeeps(t *testing.T) {
	e := newEnv(t, kinds[0])
	for _, tc := range []struct {
		l    outbox.Limits
		want string
	}{
		{outbox.Limits{MaxStreamLen: 5000}, "Limits.MaxStreamLen"},
		{outbox.Limits{MaxHeaders: outbox.MaxLimits.MaxHeaders - 1}, "MaxHeaders"},
		{outbox.Limits{MaxHeaderBytes: outbox.MaxLimits.MaxHeaderBytes}, "MaxHeaderBytes"},
	} {
		cfg := e.config()
		cfg.Limits = tc.l
		_, err := New(e.s, cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalidConfig naming %s", tc.l, err, tc.want)
		}
	}
	cfg := e.config()
	cfg.Limits = outbox.Limits{MaxHeaders: outbox.MaxLimits.MaxHeaders - 2, MaxHeaderBytes: outbox.MaxLimits.MaxHeaderBytes - ownHeaderBytes}
	if _, err := New(e.s, cfg); err != nil {
		t.Fatalf("the most an inbox takes: %v", err)
	}
}

// Ids and source names are printable, as documented: a tab was taken.
func TestIDsAndSourcesArePrintable(t *testing.T) {
	e := newEnv(t, kinds[0])
	in := e.newInbox(e.config())
	for _, r := range []Received{
		received("a\tb", "t", ""),
		received("\t", "t", ""),
		received("a\u0085b", "t", ""),
		{ID: "ok-1", Type: "t", Source: "cust\x1bom"},
		{ID: "ok-2", Type: "t", Source: strings.Repeat("s", MaxSourceLen+1)},
		// Counted as rejected under its source, it made the metrics'
		// client panic (a label must be UTF-8).
		{ID: "ok-3", Type: "t", Source: "bad\xffsource"},
	} {
		if _, err := in.Receive(e.ctx, r); !errors.Is(err, ErrInvalid) {
			t.Errorf("id %q, source %q: %v, want ErrInvalid", r.ID, r.Source, err)
		}
	}
	if n := e.count(`SELECT count(*) FROM ` + e.k.outbox(e.spec)); n != 0 {
		t.Fatalf("%d rows stored, want none", n)
	}
	if n := counter(t, e.reg, "backstop_inbox_rejected_total", "source", "invalid"); n != 3 {
		t.Errorf("rejected_total{source=\"invalid\"} = %d, want the 3 messages with a bad source", n)
	}
}

// failingBody is a request body that breaks off, as one cut by the
// server's ReadTimeout or a dropped connection.
type failingBody struct{ sent bool }

func (b *failingBody) Read(p []byte) (int, error) {
	if b.sent {
		return 0, io.ErrUnexpectedEOF
	}
	b.sent = true
	return copy(p, `{"type":"order.cre`), nil
}

// A body that does not arrive whole is answered 408, which a sender
// retries: it was 400, a fault of the message, and Backstop's webhook
// transport dead-letters on a 400. A negative MaxBody refuses to start (it
// answered 413 to everything).
func TestHTTPBodyCutShortIsRetried(t *testing.T) {
	e := newEnv(t, kinds[0])
	in := e.newInbox(e.config())
	h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	req := signed(t, secret, "cut-1", e.clk.Now(), []byte(`{"type":"order.created"}`), nil)
	req.Body = io.NopCloser(&failingBody{})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusRequestTimeout {
		t.Fatalf("a body cut short: %d %s, want 408", w.Code, w.Body)
	}
	if _, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}, MaxBody: -1}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "MaxBody") {
		t.Fatalf("MaxBody -1: %v, want ErrInvalidConfig naming MaxBody", err)
	}
	// A MaxBody over the inbox's payload limit is refused: a body between
	// the two was answered 400 (an invalid payload), not 413.
	cfg := e.config()
	cfg.Name, cfg.Limits = "small", outbox.Limits{MaxPayloadBytes: 64}
	small := e.newInbox(cfg)
	if _, err := small.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}, MaxBody: 1000}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "MaxPayloadBytes") {
		t.Fatalf("MaxBody over the payload limit: %v, want ErrInvalidConfig naming MaxPayloadBytes", err)
	}
	h, err = small.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, signed(t, secret, "big-1", e.clk.Now(), bytes.Repeat([]byte("x"), 100), map[string]string{webhook.HeaderType: "t"}))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over the inbox's payload limit: %d %s, want 413", w.Code, w.Body)
	}
}
