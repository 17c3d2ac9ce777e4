package admin_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// An action on a message in a state it does not apply to is a 409 that
// says which state, on both stores: dead-lettering a dead-lettered message
// was a 500, and cancelling one deleted the message but left its pending
// entry, whose replay brought the message back behind the stream's later
// messages.
func TestActionsOnADeadLetteredMessageAreConflicts(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		mid, eid := deadLettered(t, a, "billing", "s1")
		for _, action := range []string{"dead-letter", "cancel"} {
			status, body := checkedSend(t, a, "POST", "/v1/messages/"+mid.String()+"/"+action, `{"reason":"again"}`)
			if status != 409 || !strings.Contains(body, "dead-lettered") {
				t.Errorf("%s of a dead-lettered message: %d %s, want 409 naming the state", action, status, body)
			}
		}
		if _, err := st.Get(a.ctx, mid); err != nil {
			t.Fatalf("the message is gone after the refused actions: %v", err)
		}
		later := &outbox.Message{Destination: "billing", Stream: "s1", Type: "t"}
		if err := st.Enqueue(a.ctx, later); err != nil {
			t.Fatal(err)
		}
		if status, body := checkedSend(t, a, "POST", "/v1/dlq/"+eid+"/replay", ""); status != 200 {
			t.Fatalf("replay: %d %s", status, body)
		}
		m, err := st.Get(a.ctx, mid)
		if err != nil {
			t.Fatal(err)
		}
		if m.Seq >= later.Seq {
			t.Errorf("the replayed message has seq %d, after the later message's %d", m.Seq, later.Seq)
		}
	})
}

// scheduled_for outside the years 1 to 9999 in UTC (valid RFC 3339 all the
// same) is a 400 naming the field on both stores: SQLite answered 500 (its
// columns keep no more), PostgreSQL took it and then could not show it.
func TestScheduledForOutsideWhatAStoreKeeps(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		for _, ts := range []string{"0000-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"} {
			status, body := checkedSend(t, a, "POST", "/v1/messages", `{"destination":"billing","type":"t","scheduled_for":"`+ts+`"}`)
			if status != 400 || !strings.Contains(body, `"field":"scheduled_for"`) {
				t.Errorf("scheduled_for %s: %d %s, want 400 naming scheduled_for", ts, status, strings.TrimSpace(body))
			}
		}
		for _, ts := range []string{"0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59+00:00"} {
			if status, body := checkedSend(t, a, "POST", "/v1/messages", `{"destination":"billing","type":"t","scheduled_for":"`+ts+`"}`); status != 202 {
				t.Errorf("scheduled_for %s: %d %s, want 202", ts, status, strings.TrimSpace(body))
			}
		}
	})
}

// A row that plain SQL scheduled past the year 9999 (PostgreSQL keeps it)
// does not break the listings: GET /v1/messages and GET /v1/stats answered
// 200 with an empty body. The row is shown with its error.
func TestARowPastTheYear9999IsShown(t *testing.T) {
	st := openPostgres(t)
	a := newAPI(t, st)
	if _, err := st.Pool().Exec(a.ctx, `INSERT INTO backstop_outbox (destination, type, scheduled_for)
		VALUES ('billing', 't', '10000-01-01T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	list, err := a.op.Messages(a.ctx, url.Values{"destination": {"billing"}})
	if err != nil {
		t.Fatalf("list messages: %v", err)
	}
	if len(list.Items) != 1 || !strings.Contains(list.Items[0].Error, "scheduled_for") {
		t.Errorf("listed %+v, want the row with an error naming scheduled_for", list.Items)
	}
	if _, err := a.op.Stats(a.ctx); err != nil {
		t.Errorf("stats: %v", err)
	}
}

// A dead-letter entry's id is taken in any form of a UUID, as a message's
// is: upper case was "not found".
func TestEntryIDInUpperCase(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		_, eid := deadLettered(t, a, "billing", "s1")
		if status, body := checkedSend(t, a, "GET", "/v1/dlq/"+strings.ToUpper(eid), ""); status != 200 {
			t.Errorf("GET of the entry in upper case: %d %s", status, body)
		}
		if status, body := checkedSend(t, a, "POST", "/v1/dlq/"+strings.ToUpper(eid)+"/resolve", ""); status != 200 {
			t.Errorf("resolve of the entry in upper case: %d %s", status, body)
		}
	})
}
