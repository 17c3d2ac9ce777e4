package admin_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// retry-now and reset on a dead-lettered message: the stores leave it
// dead-lettered (RetryNow "does not revive a dead-lettered message"), yet
// the API answered 200 "count 1" and audited an action that did nothing,
// where cancel and dead-letter of the same message are a 409 pointing at
// its entry. An operator following "a message stuck in a retry loop:
// messages retry-now ID" was told it was retried.
func TestRetryNowOfADeadLetteredMessageIsAConflict(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		mid, _ := deadLettered(t, a, "billing", "s1")
		for _, act := range []string{"retry-now", "reset"} {
			resp, body, p := a.send("POST", "/v1/messages/"+mid.String()+"/"+act, "")
			if resp.StatusCode != 409 || !strings.Contains(p.Detail, "dead-letter queue") {
				t.Errorf("%s of a dead-lettered message: %d %s, want 409 pointing at its entry", act, resp.StatusCode, body)
			}
		}
		recs, err := st.(store.Admin).AuditLog(a.ctx, store.AuditFilter{Target: mid.String()})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 0 {
			t.Errorf("%d audit records of actions that did nothing, want none", len(recs))
		}
	})
}
