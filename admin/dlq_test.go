package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// park adds n dead letters of outbox messages (whose rows are gone).
func park(t *testing.T, a *api, n int, dest string, reason errorhandling.FailureReason, fp string, at time.Time) []string {
	t.Helper()
	var ids []string
	for i := range n {
		e := &dlq.Entry{MessageID: uuid.NewString(), Destination: dest, Stream: fmt.Sprintf("s-%d", i%3), Type: "t",
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Reason: reason, Fingerprint: fp, ErrorMessage: "boom",
			Attempts: 3, FailureTime: at.Add(time.Duration(i) * time.Millisecond)}
		if err := a.st.DLQ().Add(a.ctx, e); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}
	return ids
}

func TestDeadLetters(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		now := time.Now().UTC()
		bad := park(t, a, 10, "billing", errorhandling.ReasonValidationFailure, "fpA", now.Add(-time.Minute))
		down := park(t, a, 10, "billing", errorhandling.ReasonTransportUnavailable, "fpB", now.Add(-time.Minute))
		park(t, a, 5, "audit", errorhandling.ReasonTransportUnavailable, "fpB", now.Add(-time.Minute))

		l, err := a.rd.DeadLetters(a.ctx, url.Values{"destination": {"billing"}, "reason": {"ValidationFailure"}})
		if err != nil || len(l.Items) != 10 || l.Items[0].Fingerprint != "fpA" {
			t.Fatalf("filtered list: %d %v", len(l.Items), err)
		}
		seen, cursor := 0, ""
		for pages := 0; ; pages++ {
			q := url.Values{"limit": {"4"}, "fingerprint": {"fpB"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			p, err := a.rd.DeadLetters(a.ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			seen += len(p.Items)
			if cursor = p.NextCursor; cursor == "" || pages > 10 {
				break
			}
		}
		if seen != 15 {
			t.Errorf("paged through %d fpB entries, want 15", seen)
		}
		for q, field := range map[string]string{"reason=Nope": "reason", "after=yesterday": "after", "status=gone": "status", "limit=5000": "limit"} {
			v, _ := url.ParseQuery(q)
			_, err := a.rd.DeadLetters(a.ctx, v)
			wantProblem(t, err, 400, field)
		}

		// One entry: replay with notes, shown on the entry with its history.
		if _, err := a.op.EntryAction(a.ctx, down[0], "replay", "network fixed"); err != nil {
			t.Fatal(err)
		}
		e, err := a.rd.DeadLetter(a.ctx, down[0])
		if err != nil || e.Status != "replayed" || e.ReplayedBy != "ops" || e.ReplayNotes != "network fixed" ||
			len(e.History) != 1 || e.History[0].Action != "replay" {
			t.Fatalf("replayed entry: %+v %v", e, err)
		}
		if m, err := a.rd.Messages(a.ctx, url.Values{"destination": {"billing"}}); err != nil || len(m.Items) != 1 || m.Items[0].ID != e.MessageID {
			t.Errorf("the replay did not put the message back: %+v %v", m, err)
		}
		_, err = a.op.EntryAction(a.ctx, down[0], "replay", "")
		wantProblem(t, err, 409, "")
		if _, err := a.op.EntryAction(a.ctx, bad[0], "resolve", "customer refunded by hand"); err != nil {
			t.Fatal(err)
		}
		if e, _ := a.rd.DeadLetter(a.ctx, bad[0]); e.Status != "resolved" || e.ResolvedBy != "ops" || e.ResolutionNotes != "customer refunded by hand" {
			t.Errorf("resolved entry %+v", e)
		}
		_, err = a.op.EntryAction(a.ctx, bad[0], "replay", "")
		wantProblem(t, err, 409, "")
		if _, err := a.op.EntryAction(a.ctx, bad[1], "delete", "duplicate"); err != nil {
			t.Fatal(err)
		}
		_, err = a.rd.DeadLetter(a.ctx, bad[1])
		wantProblem(t, err, 404, "")
		_, err = a.op.EntryAction(a.ctx, "no-such-entry", "delete", "")
		wantProblem(t, err, 404, "")
		_, err = a.rd.EntryAction(a.ctx, bad[2], "resolve", "")
		wantProblem(t, err, 403, "")

		// Bulk: a dry run changes nothing and says how many.
		f := admin.Filter{Destination: "billing", Reason: "TransportUnavailable"}
		dry, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: f, DryRun: true})
		if err != nil || dry.Count != 9 || len(dry.Sample) != 9 || !dry.DryRun || dry.AuditID != 0 {
			t.Fatalf("dry run: %+v %v", dry, err)
		}
		if p, _ := a.rd.DeadLetters(a.ctx, url.Values{"reason": {"TransportUnavailable"}, "destination": {"billing"}, "status": {"pending"}}); len(p.Items) != 9 {
			t.Errorf("a dry run changed %d entries", 9-len(p.Items))
		}
		done, err := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: f, Notes: "after the outage"})
		if err != nil || done.Count != 9 || done.AuditID == 0 {
			t.Fatalf("bulk replay: %+v %v", done, err)
		}
		again, _ := a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: f})
		if again.Count != 0 {
			t.Errorf("a second bulk replay replayed %d", again.Count)
		}
		res, err := a.op.Bulk(a.ctx, "resolve", admin.BulkRequest{Filter: admin.Filter{Destination: "audit"}, Notes: "audit rebuilt"})
		if err != nil || res.Count != 5 {
			t.Fatalf("bulk resolve: %+v %v", res, err)
		}
		del, err := a.op.Bulk(a.ctx, "delete", admin.BulkRequest{Filter: admin.Filter{Fingerprint: "fpA", Status: "pending"}})
		if err != nil || del.Count != 8 {
			t.Fatalf("bulk delete: %+v %v", del, err)
		}
		_, err = a.op.Bulk(a.ctx, "replay", admin.BulkRequest{Filter: admin.Filter{Reason: "Bogus"}})
		wantProblem(t, err, 400, "reason")
		log, _ := a.rd.Audit(a.ctx, url.Values{"action": {"replay"}})
		if len(log.Items) != 3 || log.Items[1].Count != 9 || !strings.Contains(log.Items[1].Filter, `"reason":"TransportUnavailable"`) ||
			log.Items[1].Notes != "after the outage" {
			t.Errorf("replay audit: %+v", log.Items)
		}

		// Recover: everything dead-lettered for a destination since a time.
		// (A bulk action takes what was dead-lettered before it started:
		// the entries are parked in the past.)
		since := time.Now().UTC().Add(-30 * time.Second)
		fresh := park(t, a, 4, "audit", errorhandling.ReasonTimeoutExceeded, "fpC", since.Add(time.Second))
		park(t, a, 2, "audit", errorhandling.ReasonTimeoutExceeded, "fpC", since.Add(-time.Hour))
		rec, err := a.op.Recover(a.ctx, admin.RecoverRequest{Destination: "audit", Since: &since, DryRun: true})
		if err != nil || rec.Count != 4 {
			t.Fatalf("recover dry run: %+v %v", rec, err)
		}
		rec, err = a.op.Recover(a.ctx, admin.RecoverRequest{Destination: "audit", Since: &since})
		if err != nil || rec.Count != 4 || rec.Sample[0].ID != fresh[0] {
			t.Fatalf("recover: %+v %v", rec, err)
		}
		_, err = a.op.Recover(a.ctx, admin.RecoverRequest{Since: &since})
		wantProblem(t, err, 400, "destination")
		// Since the first instant Go's time has: the two older entries
		// (it read as no since at all before).
		var dawn time.Time
		if rec, err := a.op.Recover(a.ctx, admin.RecoverRequest{Destination: "audit", Since: &dawn, DryRun: true}); err != nil || rec.Count != 2 {
			t.Errorf("recover since %v: %+v %v", dawn, rec, err)
		}
		_, err = a.op.Do(a.ctx, http.MethodPost, "/v1/dlq/recover", nil, map[string]any{"destination": "audit"}, nil)
		wantProblem(t, err, 400, "since")

		// Purge what is older than 30 minutes: the two entries an hour old.
		pd, err := a.op.Purge(a.ctx, admin.PurgeRequest{OlderThan: "30m", DryRun: true})
		if err != nil || pd.Count != 2 {
			t.Fatalf("purge dry run: %+v %v", pd, err)
		}
		pr, err := a.op.Purge(a.ctx, admin.PurgeRequest{OlderThan: "30m", Notes: "retention"})
		if err != nil || pr.Count != 2 || pr.AuditID == 0 {
			t.Fatalf("purge: %+v %v", pr, err)
		}
		_, err = a.op.Purge(a.ctx, admin.PurgeRequest{OlderThan: "soon"})
		wantProblem(t, err, 400, "older_than")

		s, err := a.rd.Stats(a.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.DLQDepth != 0 {
			t.Errorf("dlq depth %d after everything was replayed, resolved or deleted", s.DLQDepth)
		}
	})
}

// TestNoInternalsInErrors closes the store under the API: the client gets
// a 500 problem that names nothing of the store, and the cause is logged.
func TestNoInternalsInErrors(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		a := newAPI(t, st)
		st.Close()
		_, err := a.rd.DeadLetters(a.ctx, nil)
		p := wantProblem(t, err, 500, "")
		text := strings.ToLower(p.Title + p.Detail)
		for _, leak := range []string{"sql", "select", "closed", "pool", "goroutine", ".go:"} {
			if strings.Contains(text, leak) {
				t.Errorf("problem %+v leaks %q", p, leak)
			}
		}
		if !strings.Contains(a.logs.String(), "request failed") {
			t.Errorf("the cause was not logged: %q", a.logs.String())
		}
	})
}
