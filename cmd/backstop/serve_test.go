package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/testenv"
)

// receiver is a webhook endpoint that records the types it accepted.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []string
	fail map[string]int // type -> status to answer
	hit  chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{fail: map[string]int{}, hit: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		typ := req.Header.Get("Backstop-Type")
		r.mu.Lock()
		status := r.fail[typ]
		if status == 0 {
			r.got = append(r.got, typ)
			status = http.StatusNoContent
		}
		r.mu.Unlock()
		w.WriteHeader(status)
		r.hit <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) accepted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// startServe runs serve on cfgText in the background and returns the
// admin client and the base URL; the server stops when the test ends.
func startServe(t *testing.T, cfgText string) (*admin.Client, string) {
	t.Helper()
	c, err := config.Parse([]byte(cfgText), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a string) { addr <- a })
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve ended with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30 s of its context")
		}
	})
	return &admin.Client{BaseURL: base, Token: "operate-token-0123456789"}, base
}

func serveConfig(db, hookURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
db: %s
relay: {poll_interval: 20ms}
destinations:
  - name: orders
    type: webhook
    url: %s
    retry: {base: 50ms, max: 200ms, max_attempts: 3}
    inner_retry: {attempts: 1}
routes:
  - {topic: "order.*", to: [orders]}
tokens:
  - {name: ops, token: operate-token-0123456789, role: operate}
`, db, hookURL)
}

// waitFor polls cond every 10 ms for up to 20 s: the relay gives no
// signal outside its process.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeSQLite(t *testing.T) {
	testServe(t, "sqlite:"+filepath.Join(t.TempDir(), "b.db"))
}

func TestServePostgres(t *testing.T) {
	testenv.PostgresAdmin(t)
	schema := testenv.NewSchema(t, "srv_")
	testServe(t, withSearchPath(testenv.PostgresURL(), schema))
}

// withSearchPath puts schema first on the URL's search_path.
func withSearchPath(u, schema string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "search_path=" + schema
}

func testServe(t *testing.T, db string) {
	rcv := newReceiver(t)
	rcv.fail["order.bad"] = http.StatusUnprocessableEntity
	cl, base := startServe(t, serveConfig(db, rcv.srv.URL+"/hook"))
	ctx := context.Background()
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/"} {
		resp, err := http.Get(base + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, resp, err)
		}
		resp.Body.Close()
	}
	if _, err := cl.Enqueue(ctx, admin.EnqueueRequest{Topic: "order.created", Type: "order.created", Stream: "o-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(ctx, admin.EnqueueRequest{Destination: "orders", Type: "order.bad", Stream: "o-2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery", func() bool { return len(rcv.accepted()) == 1 })
	// A row written with plain SQL to the topic destination fans out by the
	// routes, and a topic no route matches is dead-lettered.
	plainInsert(t, db, "topic", "order.shipped")
	waitFor(t, "the fanned-out delivery", func() bool { return len(rcv.accepted()) == 2 })
	if got := rcv.accepted()[1]; got != "order.shipped" {
		t.Errorf("fanned out %q", got)
	}
	var entries admin.List[admin.Entry]
	waitFor(t, "the dead letter", func() bool {
		entries, _ = cl.DeadLetters(ctx, nil)
		return len(entries.Items) == 1
	})
	if e := entries.Items[0]; e.Type != "order.bad" || e.Reason != "ValidationFailure" {
		t.Errorf("dead letter %+v", e)
	}
	plainInsert(t, db, "topic", "invoice.paid")
	waitFor(t, "the unrouted topic's dead letter", func() bool {
		l, _ := cl.DeadLetters(ctx, url.Values{"destination": {"topic"}})
		return len(l.Items) == 1 && strings.Contains(l.Items[0].Error, "no route matches")
	})
	// Fixed on the receiver's side: replay, and it arrives.
	rcv.mu.Lock()
	delete(rcv.fail, "order.bad")
	rcv.mu.Unlock()
	if _, err := cl.EntryAction(ctx, entries.Items[0].ID, "replay", "receiver fixed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replayed delivery", func() bool { return len(rcv.accepted()) == 3 })
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "backstop_delivered_total") {
		t.Errorf("metrics lack backstop_delivered_total")
	}
	waitFor(t, "the breakers to count both deliveries", func() bool {
		b, err := cl.Breakers(ctx)
		return err == nil && len(b.Items) == 2 && b.Items[0].Destination == "orders" && b.Items[0].Delivered == 3
	})
}

// plainInsert writes an outbox row with plain SQL, as another language would.
func plainInsert(t *testing.T, db, destination, typ string) {
	t.Helper()
	ctx := context.Background()
	if path, ok := strings.CutPrefix(db, "sqlite:"); ok {
		conn, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `INSERT INTO backstop_outbox (destination, type, payload) VALUES (?, ?, '{}')`, destination, typ); err != nil {
			t.Fatal(err)
		}
		return
	}
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO backstop_outbox (destination, type, payload) VALUES ($1, $2, '{}')`, destination, typ); err != nil {
		t.Fatal(err)
	}
}

func TestServeRefusesOpenListenWithoutToken(t *testing.T) {
	t.Setenv("BACKSTOP_ADMIN_TOKEN", "")
	c, err := config.Parse([]byte("listen: 0.0.0.0:0\ndestinations:\n  - {name: a, type: webhook, url: 'http://127.0.0.1:1/'}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.DB = "sqlite:" + filepath.Join(t.TempDir(), "b.db")
	err = serve(context.Background(), c, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), "beyond loopback") {
		t.Fatalf("serve on 0.0.0.0 without a token: %v", err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "[::1]:80": true, "localhost:1": true, "0.0.0.0:1": false, ":8080": false, "10.0.0.1:1": false} {
		if loopback(addr) != want {
			t.Errorf("loopback(%q) = %v", addr, !want)
		}
	}
}
