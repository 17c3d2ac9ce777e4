package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
)

// TestRequestWaitingOnALockTimesOut: an admin request whose store call
// waits on a row another transaction holds (an application's transaction
// left open, a psql session) gets 503 "store did not answer in time" at
// RequestTimeout and gives its connection back. Before, it waited for as
// long as the client did, holding a connection of the pool the relay
// shares: a few such requests took every connection, and the relay
// claimed nothing. A bulk action is bounded page by page.
func TestRequestWaitingOnALockTimesOut(t *testing.T) {
	// Two connections: the lock holder takes one, so any request that
	// succeeds while it holds it proves the timed-out ones gave theirs
	// back.
	st := openPostgres(t, "pool_max_conns=2")
	ctx := context.Background()
	a := newAPI(t, st, func(c *admin.Config) { c.RequestTimeout = 200 * time.Millisecond })

	m := &outbox.Message{Destination: "billing", Stream: "s", Type: "order.created", Payload: []byte(`{}`)}
	dead := &outbox.Message{Destination: "billing", Stream: "t", Type: "order.created", Payload: []byte(`{}`)}
	for _, msg := range []*outbox.Message{m, dead} {
		if err := st.Enqueue(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.op.MessageAction(ctx, dead.ID.String(), "dead-letter", admin.ActionRequest{Notes: "parked by the test"}); err != nil {
		t.Fatal(err)
	}

	lock, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "SELECT 1 FROM backstop_outbox WHERE id = $1 FOR UPDATE", m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "SELECT 1 FROM backstop_dead_letters FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	post := func(path, body string) (*http.Response, admin.Problem) {
		t.Helper()
		resp, _, p := a.send(http.MethodPost, path, body)
		return resp, p
	}
	// More requests than the pool has connections.
	for i := 0; i < 3; i++ {
		resp, p := post("/v1/messages/"+m.ID.String()+"/reset", "{}")
		if resp.StatusCode != http.StatusServiceUnavailable || p.Title != "store did not answer in time" {
			t.Fatalf("reset %d of a locked message: %d %+v, want 503 store did not answer in time", i, resp.StatusCode, p)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "5" {
			t.Errorf("reset %d: Retry-After %q, want 5", i, ra)
		}
	}
	resp, p := post("/v1/dlq/resolve", `{"destination": "billing"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || p.Title != "store did not answer in time" {
		t.Fatalf("bulk resolve of a locked entry: %d %+v, want 503 store did not answer in time", resp.StatusCode, p)
	}
	// The lock still held: a request that does not wait on it is served.
	got, err := a.op.Message(ctx, m.ID.String())
	if err != nil {
		t.Fatalf("a read beside the lock, after the timed-out requests: %v", err)
	}
	if got.ID != m.ID.String() {
		t.Fatalf("read message %s, want %s", got.ID, m.ID)
	}
	if !strings.Contains(a.logs.String(), "did not answer in time") {
		t.Errorf("no warning logged for the timed-out requests:\n%s", a.logs.String())
	}

	// The lock gone, the same actions go through.
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, p := post("/v1/messages/"+m.ID.String()+"/reset", "{}"); resp.StatusCode != http.StatusOK {
		t.Fatalf("reset once the lock is gone: %d %+v", resp.StatusCode, p)
	}
	res, err := a.op.Bulk(ctx, "resolve", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 1 {
		t.Fatalf("resolved %d entries, want 1", res.Count)
	}
	es, err := st.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusResolved})
	if err != nil || len(es) != 1 {
		t.Fatalf("resolved entries: %v, %v", es, err)
	}
}
