package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestDeadLettersOfOneMessage: GET /v1/dlq?message_id= lists the entries
// of one outbox message. The dashboard's "replay head" of a blocked
// stream looked for the head's entry among the first 1,000 pending
// entries of the stream, and said there was none when the stream held
// more: it asks for the message's own entries now. A message_id that is
// not text is a 400 naming the field.
func TestDeadLettersOfOneMessage(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		ctx := context.Background()
		var ids []string
		for range 5 {
			m := &outbox.Message{Destination: "billing", Stream: "s", Type: "order.created", Payload: []byte(`{}`)}
			if err := st.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
			if _, err := a.op.MessageAction(ctx, m.ID.String(), "dead-letter", admin.ActionRequest{Notes: "test"}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, m.ID.String())
		}
		for _, id := range []string{ids[0], ids[3]} {
			page, err := a.rd.DeadLetters(ctx, url.Values{"message_id": {id}, "status": {"pending"}, "limit": {"1"}})
			if err != nil || len(page.Items) != 1 || page.Items[0].MessageID != id {
				t.Fatalf("entries of %s: %+v, %v; want its one entry", id, page, err)
			}
		}
		if page, err := a.rd.DeadLetters(ctx, url.Values{"message_id": {"00000000-0000-0000-0000-00000000000f"}}); err != nil || len(page.Items) != 0 {
			t.Fatalf("entries of a message never dead-lettered: %+v, %v", page, err)
		}
		resp, body, _ := a.send(http.MethodGet, "/v1/dlq?message_id=a%00b", "")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "message_id") {
			t.Fatalf("message_id with a NUL: %d %s, want a 400 naming message_id", resp.StatusCode, body)
		}
	})
}
