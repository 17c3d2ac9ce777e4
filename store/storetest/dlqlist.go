package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
)

func testListFilters(t *testing.T, h Harness) {
	e := newEnv(t, h)
	q := e.s.DLQ()
	var added []*dlq.Entry
	add := func(ent *dlq.Entry) {
		t.Helper()
		noErr(t, "Add", q.Add(e.ctx, ent))
		added = append(added, ent)
	}
	validation := errorhandling.ReasonValidationFailure
	timeout := errorhandling.ReasonTimeoutExceeded
	// Two entries share each failure time so the ID breaks ties.
	for i := range 10 {
		ft := epoch.Add(time.Duration(i/2) * time.Minute)
		ent := &dlq.Entry{FailureTime: ft, ErrorMessage: fmt.Sprint("e", i), Attempts: i}
		switch i % 3 {
		case 0:
			ent.DAGID, ent.TaskID, ent.Reason = "dag-a", "task-1", validation
		case 1:
			ent.MessageID, ent.Destination, ent.Stream, ent.Reason = fmt.Sprint("m", i), "webhook", "s1", timeout
		case 2:
			ent.MessageID, ent.Destination, ent.Stream, ent.Reason = fmt.Sprint("m", i), "nats", "s2", timeout
		}
		if i%4 == 0 {
			ent.Fingerprint = "fp-x"
		}
		add(ent)
	}
	noErr(t, "Resolve", q.Resolve(e.ctx, added[3].ID, "done"))

	count := func(f *dlq.Filters) int { return len(mustList(t, e, f)) }
	yes := true
	t1, t3 := epoch.Add(time.Minute), epoch.Add(3*time.Minute)
	for _, tc := range []struct {
		name string
		f    *dlq.Filters
		want int
	}{
		{"nil", nil, 10},
		{"zero", &dlq.Filters{}, 10},
		{"DAGID", &dlq.Filters{DAGID: "dag-a"}, 4},
		{"TaskID", &dlq.Filters{TaskID: "task-1"}, 4},
		{"Destination", &dlq.Filters{Destination: "webhook"}, 3},
		{"Destination+Stream", &dlq.Filters{Destination: "nats", Stream: "s2"}, 3},
		{"Stream mismatch", &dlq.Filters{Destination: "nats", Stream: "s1"}, 0},
		{"MessageID", &dlq.Filters{MessageID: "m4"}, 1},
		{"MessageID of a workflow entry's index", &dlq.Filters{MessageID: "m3"}, 0},
		{"Reason", &dlq.Filters{Reason: &validation}, 4},
		{"Fingerprint", &dlq.Filters{Fingerprint: "fp-x"}, 3},
		{"Status resolved", &dlq.Filters{Status: dlq.StatusResolved}, 1},
		{"Status pending", &dlq.Filters{Status: dlq.StatusPending}, 9},
		{"After inclusive", &dlq.Filters{After: &t1}, 8},
		{"Before exclusive", &dlq.Filters{Before: &t1}, 2},
		{"After+Before", &dlq.Filters{After: &t1, Before: &t3}, 4},
		{"Replayed", &dlq.Filters{Replayed: &yes}, 0},
		{"Limit", &dlq.Filters{Limit: 4}, 4},
		{"Reason+Destination", &dlq.Filters{Reason: &timeout, Destination: "webhook"}, 3},
	} {
		if got := count(tc.f); got != tc.want {
			t.Errorf("List(%s) returned %d entries, want %d", tc.name, got, tc.want)
		}
	}

	// The full listing is ordered by FailureTime, then ID.
	all := mustList(t, e, nil)
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if b.FailureTime.Before(a.FailureTime) || b.FailureTime.Equal(a.FailureTime) && b.ID <= a.ID {
			t.Fatalf("List out of order at %d: (%v, %s) then (%v, %s)", i, a.FailureTime, a.ID, b.FailureTime, b.ID)
		}
	}
	// Pages of 3 walk the same order exactly once.
	var paged []*dlq.Entry
	cursor := ""
	for range 10 {
		page := mustList(t, e, &dlq.Filters{Limit: 3, Cursor: cursor})
		paged = append(paged, page...)
		if len(page) < 3 {
			break
		}
		cursor = page[len(page)-1].ID
	}
	eq(t, "paged entries", len(paged), len(all))
	for i := range all {
		eq(t, fmt.Sprint("page entry ", i), paged[i].ID, all[i].ID)
	}
	// A cursor combines with filters.
	page := mustList(t, e, &dlq.Filters{Destination: "nats", Limit: 2})
	eq(t, "filtered page", len(page), 2)
	rest := mustList(t, e, &dlq.Filters{Destination: "nats", Cursor: page[1].ID})
	eq(t, "filtered rest", len(rest), 1)
	_, err := q.List(e.ctx, &dlq.Filters{Cursor: "no-such-entry"})
	isErr(t, "List with unknown cursor", err, dlq.ErrNotFound)

	// Pages by NextCursor walk the same order, and a page goes on after
	// the last entry of the one before is deleted (by another operator).
	paged, cursor = nil, ""
	for range 10 {
		page := mustList(t, e, &dlq.Filters{Limit: 3, Cursor: cursor})
		paged = append(paged, page...)
		if len(page) < 3 {
			break
		}
		last := page[len(page)-1]
		cursor = dlq.NextCursor(last)
		noErr(t, "Delete", q.Delete(e.ctx, last.ID))
	}
	eq(t, "entries paged by NextCursor", len(paged), len(all))
	for i := range all {
		eq(t, fmt.Sprint("NextCursor page entry ", i), paged[i].ID, all[i].ID)
	}
}
