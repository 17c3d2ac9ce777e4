package admin_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// An audit cursor is a record id, a bigint: one past the int4 range (a
// forged or mistyped cursor, or a long-lived database's) is a page like
// any other on both stores. PostgreSQL typed the parameter of "$3 = 0" as
// int4 and answered 500.
func TestAuditCursorBeyondInt32(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		_, id := deadLettered(t, a, "billing", "s")
		if _, err := a.op.EntryAction(a.ctx, id, "resolve", "by hand"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []int64{1 << 31, 1<<63 - 1} {
			status, body := checkedSend(t, a, "GET", "/v1/audit?cursor="+strconv.FormatInt(c, 10), "")
			if status != 200 || !strings.Contains(body, `"action":"resolve"`) {
				t.Errorf("cursor %d: %d %s, want 200 with the resolve (its id is below the cursor)", c, status, body)
			}
		}
	})
}
