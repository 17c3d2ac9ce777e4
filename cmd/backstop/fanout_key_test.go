package main

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The topics' fan-out writes its copies under the idempotency key
// fanout:<topic message id>, the table client keys use too. A key another
// writer took must not make the fan-out count the topic message delivered
// with no copy written (it returned nil, and the message was gone); a
// delivery of the message again must still fan out once.
func TestFanOutKeyTakenByAnotherWriter(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		fanOutKeyTaken(t, "sqlite:"+filepath.Join(t.TempDir(), "b.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		testenv.PostgresAdmin(t)
		fanOutKeyTaken(t, withSearchPath(testenv.PostgresURL(), testenv.NewSchema(t, "fanout_")))
	})
}

func fanOutKeyTaken(t *testing.T, db string) {
	ctx := context.Background()
	st, err := openStore(ctx, db, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	adm := st.(store.Admin)
	f := &fanOut{adm: adm, route: func(string) []string { return []string{"orders", "billing"} }}
	count := func(typ string) int {
		t.Helper()
		l, err := adm.ListMessages(ctx, store.MessageFilter{Type: typ, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}

	// Delivered twice (at least once): fanned out once.
	topic := &outbox.Message{Destination: config.TopicDestination, Type: "order.created", Payload: []byte(`{}`)}
	if err := st.Enqueue(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := f.Deliver(ctx, topic); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if n := count("order.created"); n != 3 { // the topic message and its two copies
		t.Fatalf("%d order.created rows after two deliveries, want the topic message and 2 copies", n)
	}

	// Another writer took the key first: the fan-out fails for good,
	// naming the key, and writes nothing.
	paid := &outbox.Message{Destination: config.TopicDestination, Type: "order.paid", Payload: []byte(`{}`)}
	if err := st.Enqueue(ctx, paid); err != nil {
		t.Fatal(err)
	}
	other := &outbox.Message{Destination: "orders", Type: "client.b", Payload: []byte(`{}`)}
	if _, created, err := adm.EnqueueIdempotent(ctx, store.FanOutKeyPrefix+paid.ID.String(), other); err != nil || !created {
		t.Fatalf("the other writer's enqueue: created %v, %v", created, err)
	}
	err = f.Deliver(ctx, paid)
	if reason, _ := errorhandling.ReasonOf(err); !errorhandling.IsPermanent(err) ||
		reason != errorhandling.ReasonValidationFailure || !strings.Contains(err.Error(), store.FanOutKeyPrefix+paid.ID.String()) {
		t.Fatalf("fan-out under a key another writer took: %v; want a permanent ValidationFailure naming the key", err)
	}
	if n := count("order.paid"); n != 1 {
		t.Fatalf("%d order.paid rows, want only the topic message (no copy)", n)
	}
}

// TestAPIRefusesFanOutKeys: a client key beginning with fanout: is the
// fan-out's own, refused with a 400 naming idempotency_key.
func TestAPIRefusesFanOutKeys(t *testing.T) {
	cfg := `listen: 127.0.0.1:0
db: sqlite:` + filepath.Join(t.TempDir(), "b.db") + `
destinations:
  - {name: orders, type: webhook, url: http://127.0.0.1:1/orders}
tokens:
  - {name: ops, token: operate-token-0123456789, role: operate}
`
	cl, _ := startServe(t, cfg)
	status, err := cl.Do(context.Background(), http.MethodPost, "/v1/messages", nil,
		admin.EnqueueRequest{Destination: "orders", Type: "t", IdempotencyKey: "fanout:0192d1a4-0000-7000-8000-000000000000"}, nil)
	var p *admin.Problem
	if status != http.StatusBadRequest || !errors.As(err, &p) || p.Field != "idempotency_key" {
		t.Fatalf("POST with a fanout: key: %d %v, want 400 naming idempotency_key", status, err)
	}
}
