package admin_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestEmptyIDNeverReachesABulkAction: an action on one entry or message
// whose ID is empty (an unset variable: `backstop dlq replay "$ID"`) made
// the path /v1/dlq//replay, which the router cleaned into the bulk route
// /v1/dlq/replay with an empty filter: every pending dead letter was
// replayed. The client refuses an empty ID, and the server answers a path
// with an empty segment with a 404 that says so, changing nothing.
func TestEmptyIDNeverReachesABulkAction(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		ctx := context.Background()
		for i := 0; i < 3; i++ {
			m := &outbox.Message{Destination: "billing", Stream: "s", Type: "order.created", Payload: []byte(`{}`)}
			if err := st.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
			if _, err := a.op.MessageAction(ctx, m.ID.String(), "dead-letter", admin.ActionRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, action := range []string{"replay", "resolve", "delete"} {
			if _, err := a.op.EntryAction(ctx, "", action, ""); err == nil {
				t.Errorf("EntryAction(%q) with an empty ID: no error", action)
			}
		}
		if _, err := a.op.MessageAction(ctx, "", "retry-now", admin.ActionRequest{}); err == nil {
			t.Error("MessageAction with an empty ID: no error")
		}
		for _, path := range []string{"/v1/dlq//replay", "/v1/dlq//resolve", "/v1/messages//retry-now", "//v1/dlq/replay"} {
			resp, _, p := a.send(http.MethodPost, path, "{}")
			if resp.StatusCode != http.StatusNotFound || p.Title != "empty path segment" {
				t.Errorf("POST %s: %d %+v, want 404 empty path segment", path, resp.StatusCode, p)
			}
		}
		es, err := st.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusPending})
		if err != nil || len(es) != 3 {
			t.Fatalf("pending entries after the empty IDs: %d, %v; want all 3", len(es), err)
		}
	})
}
