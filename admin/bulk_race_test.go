package admin_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// listHookQueue lets a test act between a bulk action's listing of a page
// and its change of it, as another operator would.
type listHookQueue struct {
	dlq.Operator
	afterList func(ctx context.Context, es []*dlq.Entry)
}

func (q *listHookQueue) List(ctx context.Context, f *dlq.Filters) ([]*dlq.Entry, error) {
	es, err := q.Operator.List(ctx, f)
	if err == nil && len(es) > 0 && q.afterList != nil {
		hook := q.afterList
		q.afterList = nil // once
		hook(ctx, es)
	}
	return es, err
}

type listHookStore struct {
	store.Store
	store.Admin
	q *listHookQueue
}

func (h *listHookStore) DLQ() dlq.Operator { return h.q }

// TestBulkResolveLeavesWhatAnotherOperatorDid: between a bulk resolve's
// listing of a page and its change, alice resolves one entry with her
// notes and bob replays another. The bulk resolve leaves both as they were
// (it used to overwrite alice's resolution and mark bob's replayed entry
// resolved) and counts only what it resolved; a bulk delete likewise.
func TestBulkResolveLeavesWhatAnotherOperatorDid(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		w := &listHookStore{Store: st, Admin: st.(store.Admin), q: &listHookQueue{Operator: st.DLQ()}}
		a := newAPI(t, st, func(c *admin.Config) {
			c.Store = w
			c.BulkPage = 3
		})
		for i := range 5 {
			deadLettered(t, a, "billing", fmt.Sprintf("s%d", i))
		}
		var alice, bob string
		w.q.afterList = func(ctx context.Context, es []*dlq.Entry) {
			alice, bob = es[0].ID, es[1].ID
			if err := st.DLQ().ResolveAs(ctx, alice, dlq.Action{Actor: "alice", Notes: "sent by hand"}); err != nil {
				t.Error(err)
			}
			if err := st.DLQ().Replay(ctx, bob); err != nil {
				t.Error(err)
			}
		}
		res, err := a.op.Bulk(a.ctx, "resolve", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}, Notes: "bulk"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Count != 3 {
			t.Errorf("bulk resolve counted %d, want the 3 entries it resolved (5 pending, 2 changed by others meanwhile)", res.Count)
		}
		for _, s := range res.Sample {
			if s.ID == alice || s.ID == bob {
				t.Errorf("the bulk result's sample shows %s, which another operator changed", s.ID)
			}
		}
		got, err := st.DLQ().Get(a.ctx, alice)
		if err != nil || got.ResolvedBy != "alice" || got.ResolutionNotes != "sent by hand" {
			t.Errorf("alice's entry after the bulk resolve: %+v, %v; want her resolution kept", got, err)
		}
		got, err = st.DLQ().Get(a.ctx, bob)
		if err != nil || got.Status != dlq.StatusReplayed {
			t.Errorf("bob's replayed entry after the bulk resolve: %+v, %v; want it replayed still", got, err)
		}

		// A bulk delete of the replayed entries, while carol resolves
		// one of them: hers stays.
		var carol string
		w.q.afterList = func(ctx context.Context, es []*dlq.Entry) {
			carol = es[0].ID
			if err := st.DLQ().ResolveAs(ctx, carol, dlq.Action{Actor: "carol"}); err != nil {
				t.Error(err)
			}
		}
		// (No relay runs: bob's is the only replayed entry.)
		res, err = a.op.Bulk(a.ctx, "delete", admin.BulkRequest{Filter: admin.Filter{Status: "replayed"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Count != 0 || carol != bob {
			t.Errorf("bulk delete of replayed entries: count %d (carol resolved %s, bob's was %s); want 0 deleted", res.Count, carol, bob)
		}
		if _, err := st.DLQ().Get(a.ctx, bob); err != nil {
			t.Errorf("the entry carol resolved was deleted: %v", err)
		}
	})
}
