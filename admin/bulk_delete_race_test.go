package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// A bulk delete without a status in its filter: between its listing of a
// page and its delete, alice resolves one entry with her notes and bob
// replays another. Both are left as they left them and not counted, as
// operating.md promises ("only the entries still in the status they were
// listed with"); they were deleted, alice's resolution and bob's replay
// record with them.
func TestBulkDeleteWithoutStatusLeavesWhatAnotherOperatorDid(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		w := &listHookStore{Store: st, Admin: st.(store.Admin), q: &listHookQueue{Operator: st.DLQ()}}
		a := newAPI(t, st, func(c *admin.Config) { c.Store = w })
		for i := range 4 {
			deadLettered(t, a, "billing", fmt.Sprintf("s%d", i))
		}
		var alice, bob string
		w.q.afterList = func(ctx context.Context, es []*dlq.Entry) {
			alice, bob = es[0].ID, es[1].ID
			if err := st.DLQ().ResolveAs(ctx, alice, dlq.Action{Actor: "alice", Notes: "refunded by hand"}); err != nil {
				t.Error(err)
			}
			if err := st.DLQ().ReplayAs(ctx, bob, dlq.Action{Actor: "bob"}); err != nil {
				t.Error(err)
			}
		}
		res, err := a.op.Bulk(a.ctx, "delete", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Count != 2 {
			t.Errorf("bulk delete counted %d, want the 2 entries still pending (4 listed, 2 changed by others meanwhile)", res.Count)
		}
		if got, err := st.DLQ().Get(a.ctx, alice); err != nil || got.ResolvedBy != "alice" {
			t.Errorf("alice's resolved entry after the bulk delete: %+v, %v; want it kept as she left it", got, err)
		}
		if got, err := st.DLQ().Get(a.ctx, bob); err != nil || got.Status != dlq.StatusReplayed {
			t.Errorf("bob's replayed entry after the bulk delete: %+v, %v; want it kept as he left it", got, err)
		}
	})
}
