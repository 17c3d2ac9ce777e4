package admin_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// TestReplayToADestinationNotConfiguredIsRefused: a replay of an entry
// whose destination this server does not deliver (a destination taken out
// of the configuration since) answered 200 and put the message back in the
// outbox, where no relay of the server ever claims it, while the entry
// said it was replayed. It is now a 422 naming the destination, and the
// entry stays pending; resolving or deleting it still works.
func TestReplayToADestinationNotConfiguredIsRefused(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st) // delivers billing and audit
		mid, gone := deadLettered(t, a, "retired", "s1")
		_, kept := deadLettered(t, a, "billing", "s1")

		for _, c := range []struct{ path, body string }{
			{"/v1/dlq/" + gone + "/replay", ""},
			{"/v1/dlq/replay", `{"destination":"retired"}`},
			{"/v1/dlq/recover", `{"destination":"retired","since":"2000-01-01T00:00:00Z"}`},
		} {
			resp, body, p := a.send("POST", c.path, c.body)
			if resp.StatusCode != 422 || !strings.Contains(p.Detail, `"retired"`) {
				t.Errorf("POST %s %s: %d %s, want 422 naming the destination", c.path, c.body, resp.StatusCode, body)
			}
		}
		e, err := st.DLQ().Get(a.ctx, gone)
		if err != nil || e.Status != dlq.StatusPending {
			t.Fatalf("entry of the refused replays: %+v, %v; want pending", e, err)
		}
		if m, err := st.Get(a.ctx, mid); err != nil || m.DeadLetteredAt.IsZero() {
			t.Errorf("message of the refused replays: %+v, %v; want still dead-lettered", m, err)
		}

		// a destination the server delivers replays as before
		if resp, body, _ := a.send("POST", "/v1/dlq/"+kept+"/replay", ""); resp.StatusCode != 200 {
			t.Errorf("replay of a billing entry: %d %s", resp.StatusCode, body)
		}
		// and the retired one can still be resolved
		if resp, body, _ := a.send("POST", "/v1/dlq/"+gone+"/resolve", `{"notes":"destination retired"}`); resp.StatusCode != 200 {
			t.Errorf("resolve of the retired entry: %d %s", resp.StatusCode, body)
		}
	})
}
