package inbox

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport/webhook"
)

// FuzzHTTPReceiver sends the HTTP receiver correctly signed requests whose
// id, type, stream, body and headers are anything a sender (or a proxy on
// its path) could put there, on SQLite and on PostgreSQL. A healthy store
// never answers 503: whatever the receiver takes, the store must keep,
// and whatever the store would refuse, the receiver must answer 400 (which
// the sender dead-letters) rather than 503 (which it retries for ever).
// A 202 stores the message as sent, and the same request again is a
// duplicate; a 400 or 413 stores nothing, and says so again the next time.
func FuzzHTTPReceiver(f *testing.F) {
	type target struct {
		name string
		h    http.Handler
		s    store.Store
		last int64 // the seq of the last message stored
	}
	clk := clock.NewFake(epoch)
	open := func(name string, s store.Store) target {
		f.Cleanup(func() { s.Close() })
		in, err := New(s, Config{Name: "orders", Metrics: prometheus.NewRegistry(),
			Relay: relay.Config{Clock: clk, Logger: quiet}})
		if err != nil {
			f.Fatal(err)
		}
		h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)},
			Headers: []string{"Content-Type", "X-Trace", "X-Other"}})
		if err != nil {
			f.Fatal(err)
		}
		return target{name: name, h: h, s: s}
	}
	ctx := context.Background()
	lite, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "fuzz.db"), store.Config{Clock: clk})
	if err != nil {
		f.Fatal(err)
	}
	targets := []*target{ptr(open("sqlite", lite))}
	if pg, err := postgres.Open(ctx, testenv.PostgresURL(), store.Config{Clock: clk},
		postgres.WithSchema(testenv.NewSchema(f, "inbox_fuzz_"))); err != nil {
		testenv.Unreachable(f, "PostgreSQL", testenv.PostgresEnv, err)
	} else {
		if err := pg.Migrate(ctx); err != nil {
			f.Fatal(err)
		}
		targets = append(targets, ptr(open("postgres", pg)))
	}

	f.Add("msg_1", "order.created", "order-7", []byte(`{"n":1}`), "application/json", "X-Trace", "abc")
	f.Add("msg_2", "", "", []byte(`{"type":"order.paid"}`), "", "", "")
	f.Add("msg\x00_3", "t", "s\x01", []byte(`{}`), "text/plain; charset=\xe9", "X-Other", "a\nb")
	f.Add("msg_4", "\xff", "", []byte("\x00\xff"), "", "X-Trace", "\xff")
	f.Add("msg_5", "t", "", []byte(`{"type":"\u0000"}`), "", "Backstop-Inbox-Id", "forged")
	f.Add(" msg_6 ", "t\u2028", "\u202e", []byte(`{"type":1}`), "a\u0085b", "x-other", "")
	n := 0
	f.Fuzz(func(t *testing.T, id, typ, stream string, body []byte, ctype, hname, hvalue string) {
		n++
		for _, tg := range targets {
			// Each input gets an id of its own on each run, so a stored
			// message is never a duplicate of an earlier input's.
			mid := id + "#" + strconv.Itoa(n)
			send := func() *httptest.ResponseRecorder {
				ts := strconv.FormatInt(clk.Now().Unix(), 10)
				sig, err := webhook.Sign([]byte(secret), mid, ts, body)
				if err != nil {
					t.Skip("the signer refuses this id:", err)
				}
				r := httptest.NewRequest(http.MethodPost, "/inbox", bytes.NewReader(body))
				r.Header[webhook.HeaderSignature] = []string{sig}
				r.Header[webhook.HeaderMessageID] = []string{mid}
				r.Header[webhook.HeaderTimestamp] = []string{ts}
				set := func(k, v string) {
					if v != "" {
						r.Header[k] = []string{v} // as a raw sender puts it, unchecked
					}
				}
				set(webhook.HeaderType, typ)
				set(webhook.HeaderStream, stream)
				set("Content-Type", ctype)
				if hname != "" {
					set(hname, hvalue)
				}
				w := httptest.NewRecorder()
				tg.h.ServeHTTP(w, r)
				return w
			}
			first := send()
			switch first.Code {
			case StatusStored:
				m := newMessage(t, tg.s, &tg.last)
				if m == nil || m.Headers[HeaderID] != mid {
					t.Fatalf("%s: answered 202 for %q and stored %v", tg.name, mid, m)
				}
				if !bytes.Equal(m.Payload, body) || m.Stream != stream {
					t.Fatalf("%s: stored payload %q stream %q, sent %q stream %q", tg.name, m.Payload, m.Stream, body, stream)
				}
				if typ != "" && m.Type != typ {
					t.Fatalf("%s: stored type %q, sent %q", tg.name, m.Type, typ)
				}
				if again := send(); again.Code != StatusDuplicate {
					t.Fatalf("%s: the same request again answered %d (%s), want %d", tg.name, again.Code, again.Body, StatusDuplicate)
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
				if again := send(); again.Code != first.Code {
					t.Fatalf("%s: answered %d, then %d to the same request", tg.name, first.Code, again.Code)
				}
				if m := newMessage(t, tg.s, &tg.last); m != nil {
					t.Fatalf("%s: answered %d and stored %v", tg.name, first.Code, m)
				}
			default:
				t.Fatalf("%s: a correctly signed request to a healthy store answered %d (%s)", tg.name, first.Code, first.Body)
			}
		}
	})
}

func ptr[T any](v T) *T { return &v }

// newMessage is the one message stored after seq *last, or nil when there
// is none; *last moves to it.
func newMessage(t *testing.T, s store.Store, last *int64) *outbox.Message {
	t.Helper()
	ms, err := s.(store.Admin).ListMessages(context.Background(), store.MessageFilter{Destination: Destination("orders"), AfterSeq: *last})
	if err != nil {
		t.Fatal(err)
	}
	switch len(ms) {
	case 0:
		return nil
	case 1:
		*last = ms[0].Seq
		return ms[0]
	}
	t.Fatalf("%d messages stored by one request", len(ms))
	return nil
}
