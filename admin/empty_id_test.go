package admin_test

import (
	"context"
	"net/http"
	"strings"
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

// TestEmptyFilterNeedsAll: a bulk replay, resolve or delete whose filter is
// empty ({} or {"destination":""}: a script whose $DESTINATION was unset)
// is refused naming all, and changes nothing; with "all": true, or as a
// dry run, it takes every entry.
func TestEmptyFilterNeedsAll(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		ctx := context.Background()
		for _, dest := range []string{"billing", "billing", "orders"} {
			m := &outbox.Message{Destination: dest, Stream: "s", Type: "order.created", Payload: []byte(`{}`)}
			if err := st.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
			if _, err := a.op.MessageAction(ctx, m.ID.String(), "dead-letter", admin.ActionRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, action := range []string{"replay", "resolve", "delete"} {
			for _, body := range []string{`{}`, `{"destination":""}`, `{"destination":"","notes":"x"}`, `{"all":false}`} {
				status, resp := checkedSend(t, a, "POST", "/v1/dlq/"+action, body)
				if status != 400 || !strings.Contains(resp, `"field":"all"`) {
					t.Errorf("%s %s: %d %s, want 400 naming all", action, body, status, resp)
				}
			}
			if status, resp := checkedSend(t, a, "POST", "/v1/dlq/"+action, `{"dry_run":true}`); status != 200 || !strings.Contains(resp, `"count":3`) {
				t.Errorf("%s, a dry run with no filter: %d %s, want the 3 entries counted", action, status, resp)
			}
		}
		list, err := a.op.DeadLetters(ctx, nil)
		if err != nil || len(list.Items) != 3 {
			t.Fatalf("after the refused actions: %d entries, %v", len(list.Items), err)
		}
		for _, e := range list.Items {
			if e.Status != string(dlq.StatusPending) {
				t.Errorf("entry %s is %s after refused actions", e.ID, e.Status)
			}
		}
		res, err := a.op.Bulk(ctx, "resolve", admin.BulkRequest{All: true, Notes: "all of them"})
		if err != nil || res.Count != 3 {
			t.Fatalf("resolve with all: %+v %v, want the 3 entries", res, err)
		}
	})
}
