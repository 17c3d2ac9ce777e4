package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// rawSend sends a request with the operate token, no OpenAPI checking.
func rawSend(t *testing.T, a *api, method, path, body string) (int, string) {
	t.Helper()
	status, b := sendWith(t, a, http.DefaultClient, method, path, body)
	return status, string(b)
}

// sendWith sends a request with the operate token through hc and returns
// the status and the body.
func sendWith(t *testing.T, a *api, hc *http.Client, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operateToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// deadLettered enqueues a real message and dead-letters it by hand,
// returning the message id and its entry id.
func deadLettered(t *testing.T, a *api, dest, stream string) (uuid.UUID, string) {
	t.Helper()
	m := &outbox.Message{Destination: dest, Stream: stream, Type: "t", Payload: []byte(`{"x":1}`)}
	if err := a.st.Enqueue(a.ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := a.st.(store.Operations).DeadLetter(a.ctx, m.ID, "probe"); err != nil {
		t.Fatal(err)
	}
	es, err := a.st.DLQ().List(a.ctx, &dlq.Filters{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.MessageID == m.ID.String() {
			return m.ID, e.ID
		}
	}
	t.Fatalf("no entry for %s", m.ID)
	return m.ID, ""
}

// Hostile entry ids in the path: never a 500.
func TestDLQEntryIDsThatCannotExist(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		_, _ = a.rd.Stats(a.ctx) // one answer checked against the OpenAPI document, for the harness
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/dlq/a%00b"},
			{"GET", "/v1/dlq/%FF"},
			{"POST", "/v1/dlq/a%00b/replay"},
			{"POST", "/v1/dlq/%FF/replay"},
			{"POST", "/v1/dlq/a%00b/resolve"},
			{"POST", "/v1/dlq/%FF/resolve"},
			{"DELETE", "/v1/dlq/a%00b"},
			{"DELETE", "/v1/dlq/%FF"},
			{"GET", "/v1/dlq?cursor=a%00b"},
			{"GET", "/v1/dlq?cursor=%FF"},
			{"GET", "/v1/audit?target=a%00b"},
		} {
			status, body := rawSend(t, a, c.method, c.path, "")
			if status != http.StatusBadRequest {
				t.Errorf("%s %s: %d %s, want 400 naming the field", c.method, c.path, status, body)
			}
		}
		// An id with a NUL appended must not act on the entry without it.
		_, id := deadLettered(t, a, "billing", "s1")
		status, body := rawSend(t, a, "POST", "/v1/dlq/"+url.PathEscape(id+"\x00")+"/replay", "")
		e, _ := a.st.DLQ().Get(a.ctx, id)
		t.Logf("replay of id+NUL: %d %s; entry status now %s", status, body, e.Status)
		if status == 200 || e.Status != dlq.StatusPending {
			t.Errorf("replay of %q acted on entry %q: %d, status %s", id+"\x00", id, status, e.Status)
		}
		status, body = rawSend(t, a, "POST", "/v1/dlq/"+url.PathEscape(id+"\xff")+"/resolve", "")
		e, _ = a.st.DLQ().Get(a.ctx, id)
		if status != http.StatusBadRequest || e.Status != dlq.StatusPending {
			t.Errorf("resolve of %q: %d %s, entry %q now %s", id+"\xff", status, body, id, e.Status)
		}
		// The Go API: no entry by such an id, and none other acted on.
		for _, bad := range []string{id + "\x00", id + "\xff"} {
			if err := a.st.DLQ().Replay(a.ctx, bad); !errors.Is(err, dlq.ErrNotFound) {
				t.Errorf("Replay(%q) = %v, want ErrNotFound", bad, err)
			}
			if _, err := a.st.DLQ().Get(a.ctx, bad); !errors.Is(err, dlq.ErrNotFound) {
				t.Errorf("Get(%q) = %v, want ErrNotFound", bad, err)
			}
		}
	})
}

// A next_cursor whose entry was deleted (by another operator, a purge)
// between two pages.
func TestDLQCursorOutlivesItsEntry(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		ids := park(t, a, 6, "billing", errorhandling.ReasonValidationFailure, "fp", time.Now().Add(-time.Minute))
		p1, err := a.rd.DeadLetters(a.ctx, url.Values{"limit": {"3"}})
		if err != nil || len(p1.Items) != 3 || p1.Items[2].ID != ids[2] || p1.NextCursor == "" {
			t.Fatalf("page 1: %+v %v", p1, err)
		}
		// Another operator deletes the last entry of page 1.
		if _, err := a.op.EntryAction(a.ctx, ids[2], "delete", "dup"); err != nil {
			t.Fatal(err)
		}
		p2, err := a.rd.DeadLetters(a.ctx, url.Values{"limit": {"3"}, "cursor": {p1.NextCursor}})
		if err != nil {
			t.Errorf("page 2 after the cursor's entry was deleted: %v (the remaining 3 entries cannot be listed from where page 1 ended)", err)
			return
		}
		if len(p2.Items) != 3 {
			t.Errorf("page 2: %d items", len(p2.Items))
		}
	})
}

// A bulk replay whose cursor entry is deleted by someone else mid-way.
func TestBulkReplayGoesOnWhenItsCursorEntryGoes(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		var once sync.Once
		var w *hookStore
		a := newAPI(t, st, func(c *admin.Config) {
			w = newHookStore(st)
			c.Store = w
			c.BulkPage = 2
		})
		park(t, a, 6, "billing", errorhandling.ReasonTransportUnavailable, "fp", time.Now().Add(-time.Minute))
		w.q.after = func(ctx context.Context, es []*dlq.Entry) {
			once.Do(func() { // another operator deletes the last replayed entry (cleaning up replayed ones)
				if err := st.DLQ().Delete(ctx, es[len(es)-1].ID); err != nil {
					t.Error(err)
				}
			})
		}
		res, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
		left, _ := st.DLQ().List(a.ctx, &dlq.Filters{Status: dlq.StatusPending})
		t.Logf("bulk replay: %+v err=%v; pending left %d", res.Count, err, len(left))
		if err != nil || len(left) != 0 {
			t.Errorf("bulk replay stopped when its cursor entry was deleted: err=%v, %d pending entries left unreplayed", err, len(left))
		}
	})
}

// hookStore wraps a store so that a probe can act between the pages of a
// bulk action, as a relay or another operator would.
type hookStore struct {
	store.Store
	store.Admin
	q *hookQueue
}

func newHookStore(st store.Store) *hookStore {
	return &hookStore{Store: st, Admin: st.(store.Admin), q: &hookQueue{Operator: st.DLQ()}}
}

func (h *hookStore) DLQ() dlq.Operator { return h.q }

type hookQueue struct {
	dlq.Operator
	after func(ctx context.Context, replayed []*dlq.Entry)
}

func (q *hookQueue) ReplayMatchingAs(ctx context.Context, f *dlq.Filters, dryRun bool, a dlq.Action) ([]*dlq.Entry, error) {
	es, err := q.Operator.ReplayMatchingAs(ctx, f, dryRun, a)
	if err == nil && !dryRun && len(es) > 0 && q.after != nil {
		q.after(ctx, es)
	}
	return es, err
}

// A bulk replay while the replayed messages fail again at once (the
// endpoint is still broken, a relay dead-letters them again): does the
// bulk action stop, or chase the new entries it causes?
func TestBulkReplayStopsAtWhatMatchedWhenItStarted(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		var w *hookStore
		a := newAPI(t, st, func(c *admin.Config) {
			w = newHookStore(st)
			c.Store = w
			c.BulkPage = 2
		})
		for i := range 4 {
			deadLettered(t, a, "billing", fmt.Sprintf("s%d", i))
		}
		dry, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}, DryRun: true})
		if err != nil || dry.Count != 4 {
			t.Fatalf("dry run %+v %v", dry, err)
		}
		pages := 0
		w.q.after = func(ctx context.Context, es []*dlq.Entry) {
			pages++
			if pages > 50 {
				return
			}
			// The relay claims the replayed messages and they fail
			// permanently again: new entries, dead-lettered now.
			res, err := st.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "relay-probe"}, Claim: store.ClaimRequest{Limit: 100}})
			if err != nil {
				t.Error(err)
				return
			}
			var fails []store.Failure
			for _, m := range res.Claimed {
				fails = append(fails, store.Failure{ID: m.ID, Error: "422 still refused", Reason: errorhandling.ReasonValidationFailure, Permanent: true})
			}
			if len(fails) > 0 {
				if _, err := st.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "relay-probe"}, Failures: fails}); err != nil {
					t.Error(err)
				}
			}
		}
		ctx, cancel := context.WithTimeout(a.ctx, 60*time.Second)
		defer cancel()
		res, err := a.op.Bulk(ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
		t.Logf("dry run said 4; bulk replay: count=%d pages=%d err=%v", res.Count, pages, err)
		if err != nil || res.Count != 4 {
			t.Errorf("bulk replay replayed %d entries for a filter that matched 4 when it started (dry run 4): it replays the dead letters its own replays cause, page after page", res.Count)
		}
	})
}

// A bulk replay in which one entry cannot be replayed (an entry added by
// hand whose message id is not a UUID): do the others go on?
func TestBulkReplayOfAnEntryWithoutAMessageID(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		park(t, a, 3, "billing", errorhandling.ReasonTransportUnavailable, "fp", time.Now().Add(-time.Minute))
		bad := &dlq.Entry{MessageID: "order-42-created", Destination: "billing", Stream: "s", Type: "t",
			Reason: errorhandling.ReasonTransportUnavailable, FailureTime: time.Now().Add(-2 * time.Minute)}
		if err := st.DLQ().Add(a.ctx, bad); err != nil {
			t.Fatal(err)
		}
		_, err := a.op.EntryAction(a.ctx, bad.ID, "replay", "")
		t.Logf("single replay of the entry with message id %q: %v", bad.MessageID, err)
		res, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
		left, _ := st.DLQ().List(a.ctx, &dlq.Filters{Status: dlq.StatusPending})
		t.Logf("bulk: %+v %v; pending left %d", res.Count, err, len(left))
		if err != nil {
			var p *admin.Problem
			errors.As(err, &p)
			t.Errorf("one entry whose message id is not a UUID fails the whole bulk replay: %v (%d pending left)", err, len(left))
		}
	})
}

// Resolving a dead-lettered strict head: the stream stays blocked, and what
// the stream view tells the operator to do.
func TestResolvedHeadSaysHowToReleaseItsStream(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		_, id := deadLettered(t, a, "billing", "order-9")
		if err := st.Enqueue(a.ctx, &outbox.Message{Destination: "billing", Stream: "order-9", Type: "t"}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.op.EntryAction(a.ctx, id, "resolve", "refunded by hand"); err != nil {
			t.Fatal(err)
		}
		s, err := a.rd.Stream(a.ctx, "billing", "order-9")
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := a.op.EntryAction(a.ctx, id, "replay", "")
		stats, _ := a.rd.Stats(a.ctx)
		t.Logf("after resolve: blocked=%v why=%q; replay: %v; dlq depth %d", s.Blocked, s.Why, rerr, stats.DLQDepth)
		if strings.Contains(s.Why, "FailureReason(0)") || strings.Contains(s.Why, "()") {
			t.Errorf("the stream view of a message dead-lettered by hand shows a zero reason: %q", s.Why)
		}
		if !s.Blocked || rerr == nil || !strings.Contains(s.Why, "resolving the entry does not release the stream") {
			t.Errorf("after resolve: blocked %v, why %q, replay %v; want blocked, saying resolving does not release it", s.Blocked, s.Why, rerr)
		}
		if _, err := a.op.ReleaseStream(a.ctx, "billing", "order-9", "refunded by hand"); err != nil {
			t.Fatal(err)
		}
		if s, err = a.rd.Stream(a.ctx, "billing", "order-9"); err != nil || s.Blocked {
			t.Fatalf("after release: %+v %v", s, err)
		}
		_ = stats
	})
}

// An operator dead-letters a message a relay is delivering, then replays
// its entry at once: the replay is a 409 that says why (a second delivery
// would run beside the first), a bulk replay passes it over, and once the
// delivery fails the entry replays.
func TestReplayWhileTheMessageIsStillBeingDelivered(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		m := &outbox.Message{Destination: "billing", Stream: "order-7", Type: "t"}
		if err := st.Enqueue(a.ctx, m); err != nil {
			t.Fatal(err)
		}
		relay := store.Instance{ID: "relay-1"}
		res, err := st.ProcessBatch(a.ctx, &store.Batch{Instance: relay, Claim: store.ClaimRequest{Limit: 10}})
		if err != nil || len(res.Claimed) != 1 {
			t.Fatalf("claim: %v %v", res, err)
		}
		if _, err := a.op.MessageAction(a.ctx, m.ID.String(), "dead-letter", admin.ActionRequest{Reason: "looks stuck"}); err != nil {
			t.Fatal(err)
		}
		es, err := a.rd.DeadLetters(a.ctx, url.Values{"destination": {"billing"}})
		if err != nil || len(es.Items) != 1 {
			t.Fatalf("entries %+v %v", es, err)
		}
		id := es.Items[0].ID
		_, err = a.op.EntryAction(a.ctx, id, "replay", "")
		if p := wantProblem(t, err, 409, ""); !strings.Contains(p.Title, "being delivered") {
			t.Errorf("409 title %q, want it to say the message is being delivered", p.Title)
		}
		// The dry runs say what the real replay then does: nothing.
		for _, action := range []string{"replay", "recover"} {
			var dry admin.BulkResult
			if action == "replay" {
				dry, err = a.op.Bulk(a.ctx, action, admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}, DryRun: true})
			} else {
				dry, err = a.op.Recover(a.ctx, admin.RecoverRequest{Destination: "billing", Since: &time.Time{}, DryRun: true})
			}
			if err != nil || dry.Count != 0 || len(dry.Sample) != 0 {
				t.Errorf("%s dry run while in flight: %+v %v, want 0 (a replay passes the entry over)", action, dry, err)
			}
		}
		bulk, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}})
		if err != nil || bulk.Count != 0 {
			t.Fatalf("bulk replay while in flight: %+v %v, want 0 replayed", bulk, err)
		}
		if _, err := st.ProcessBatch(a.ctx, &store.Batch{Instance: relay,
			Failures: []store.Failure{{ID: m.ID, Error: "503"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.op.EntryAction(a.ctx, id, "replay", "delivery ended"); err != nil {
			t.Fatalf("replay once the delivery failed: %v", err)
		}
	})
}
