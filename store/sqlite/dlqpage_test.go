package sqlite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// dlqPageSize is the page a bulk action of the admin API works in.
const dlqPageSize = 500

// loadUnrelatedEntries adds n pending, not replayed entries that no page
// of the tests below selects: destination "other", reason
// ReasonTransportUnavailable, dead-lettered from base on, 3 ms apart, each
// naming a message of its own (not in the outbox).
func loadUnrelatedEntries(tb testing.TB, s *Store, n int, base time.Time) {
	tb.Helper()
	q := `WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?)
INSERT INTO {{prefix}}dead_letters (id, message_id, destination, stream, type, payload, reason, failure_reason,
	fingerprint, failure_time)
SELECT 'u-' || i, printf('%08x-0000-4000-8000-%012x', i, i), 'other', 'o' || (i % 1000), 'e', '{"n":1}', 1,
	'TransportUnavailable', 'fp' || (i % 100), ? + 3 * i FROM g`
	if _, err := s.w.Exec(s.sql(q), n, base.UnixMilli()); err != nil {
		tb.Fatalf("load unrelated entries: %v", err)
	}
}

// loadPage adds n dead-lettered messages of destination "d", stream "s",
// with their pending entries (reason ReasonTimeoutExceeded), dead-lettered
// at base + i ms, and returns the entries' ids in dead-letter order.
func loadPage(tb testing.TB, s *Store, tag string, n int, base time.Time) []string {
	tb.Helper()
	exec := func(q string, args ...any) {
		tb.Helper()
		if _, err := s.w.Exec(s.sql(q), args...); err != nil {
			tb.Fatalf("load page: %v", err)
		}
	}
	series := `WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?) `
	exec(series+`INSERT INTO {{prefix}}outbox (id, destination, stream, type, payload, status, attempts, dead_lettered_at)
		SELECT printf('%08x-0000-4000-9000-%012x', ?, i), 'd', 's', 'e', '{"n":1}', 1 | 32768, 3, ? + i FROM g`,
		n, len(tag)*1000003+int(tag[0]), base.UnixMilli())
	exec(`INSERT INTO {{prefix}}dead_letters (id, message_id, destination, stream, type, payload, reason,
		failure_reason, fingerprint, failure_time)
		SELECT ? || '-' || printf('%06d', seq), id, destination, stream, type, payload, 4, 'TimeoutExceeded', 'fp-page',
			dead_lettered_at FROM {{prefix}}outbox WHERE dead_lettered_at IS NOT NULL AND id LIKE printf('%08x-%%', ?)
			AND NOT EXISTS (SELECT 1 FROM {{prefix}}dead_letters k WHERE k.message_id = {{prefix}}outbox.id)`,
		tag, len(tag)*1000003+int(tag[0]))
	rows, err := s.w.Query(s.sql(`SELECT id FROM {{prefix}}dead_letters WHERE failure_time >= ? AND id LIKE ? || '-%'
		ORDER BY failure_time, id`), base.UnixMilli(), tag)
	if err != nil {
		tb.Fatal(err)
	}
	ids, err := scanIDs(rows)
	if err != nil || len(ids) != n {
		tb.Fatalf("load page: %d ids, %v", len(ids), err)
	}
	return ids
}

// BenchmarkDLQPage times one page (dlqPageSize entries) of a bulk delete
// and of bulk replays by stream and by reason, with no other entries and
// with 200,000 unrelated ones dead-lettered over the 10 minutes before the
// page: the time a page holds the database's one writer should not depend
// on them. (A purge's page runs the delete's statements.)
//
//	go test -run '^$' -bench DLQPage -benchtime 5x ./store/sqlite/
func BenchmarkDLQPage(b *testing.B) {
	timeout := errorhandling.ReasonTimeoutExceeded
	ops := []struct {
		name string
		run  func(ctx context.Context, q *deadLetters, ids []string, cut time.Time) (int, error)
	}{
		{"delete", func(ctx context.Context, q *deadLetters, ids []string, _ time.Time) (int, error) {
			done, err := q.DeleteEntries(ctx, ids, dlq.StatusPending)
			return len(done), err
		}},
		{"replay-stream", func(ctx context.Context, q *deadLetters, _ []string, cut time.Time) (int, error) {
			es, err := q.ReplayMatchingAs(ctx, &dlq.Filters{Destination: "d", Stream: "s", Status: dlq.StatusPending,
				Before: &cut, Limit: dlqPageSize}, false, dlq.Action{})
			return len(es), err
		}},
		{"replay-reason", func(ctx context.Context, q *deadLetters, _ []string, cut time.Time) (int, error) {
			es, err := q.ReplayMatchingAs(ctx, &dlq.Filters{Reason: &timeout, Status: dlq.StatusPending,
				Before: &cut, Limit: dlqPageSize}, false, dlq.Action{})
			return len(es), err
		}},
	}
	for _, unrelated := range []int{0, 200_000} {
		s, _ := openBench(b, "")
		base := time.Now().Add(-24 * time.Hour)
		loadUnrelatedEntries(b, s, unrelated, base.Add(-10*time.Minute))
		q := &deadLetters{s}
		for _, op := range ops {
			b.Run(fmt.Sprintf("%s/unrelated=%d", op.name, unrelated), func(b *testing.B) {
				ctx := context.Background()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					if _, err := s.w.Exec(s.sql(`DELETE FROM {{prefix}}dead_letters WHERE failure_time >= ?`), base.UnixMilli()); err != nil {
						b.Fatal(err)
					}
					if _, err := s.w.Exec(s.sql(`DELETE FROM {{prefix}}outbox WHERE destination = 'd'`)); err != nil {
						b.Fatal(err)
					}
					ids := loadPage(b, s, fmt.Sprintf("p%d", i), dlqPageSize, base)
					b.StartTimer()
					n, err := op.run(ctx, q, ids, base.Add(time.Minute))
					if err != nil || n != dlqPageSize {
						b.Fatalf("%s: %d entries, %v", op.name, n, err)
					}
				}
			})
		}
	}
}

// TestDLQPageRemoveKeepsMessagesOtherEntriesPark checks what a delete or
// purge takes from the outbox: the dead-lettered message of an entry not
// replayed goes with it unless another entry, not replayed and not
// deleted, parks it too; a replayed entry's message stays.
func TestDLQPageRemoveKeepsMessagesOtherEntriesPark(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t, store.Config{})
	ctx := context.Background()
	q := &deadLetters{s}
	base := time.Now().Add(-time.Hour)
	loadUnrelatedEntries(t, s, 300, base.Add(time.Minute))
	ids := loadPage(t, s, "a", 6, base)
	msg := func(id string) string {
		var m string
		if err := s.w.QueryRow(s.sql(`SELECT message_id FROM {{prefix}}dead_letters WHERE id = ?`), id).Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	msgs := make([]string, len(ids))
	for i, id := range ids {
		msgs[i] = msg(id)
	}
	add := func(id, msgID string, replayed bool, at time.Time) {
		t.Helper()
		e := &dlq.Entry{ID: id, MessageID: msgID, Destination: "d", Stream: "s", Type: "e", FailureTime: at, Replayed: replayed}
		if replayed {
			e.Status = dlq.StatusReplayed
		}
		if err := q.Add(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// msgs[1] is parked again by an entry deleted in the same call, msgs[2]
	// by one kept, msgs[3] only by a replayed one that is kept; the entry of
	// msgs[4] is replayed (its message is not given up).
	add("a-dup1", msgs[1], false, base.Add(time.Millisecond))
	add("a-keep2", msgs[2], false, base.Add(2*time.Hour))
	add("a-rep3", msgs[3], true, base.Add(2*time.Hour))
	if _, err := s.w.Exec(s.sql(`UPDATE {{prefix}}dead_letters SET replayed = 1, status = 'replayed' WHERE id = ?`), ids[4]); err != nil {
		t.Fatal(err)
	}
	done, err := q.DeleteEntries(ctx, []string{ids[0], ids[1], "a-dup1", ids[2], ids[3], ids[4], "missing"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 6 {
		t.Fatalf("DeleteEntries deleted %v, want 6 entries", done)
	}
	left := func() string {
		rows, err := s.w.Query(s.sql(`SELECT id FROM {{prefix}}outbox WHERE destination = 'd' ORDER BY id`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := scanIDs(rows)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, " ")
	}
	if got, want := left(), strings.Join([]string{msgs[2], msgs[4], msgs[5]}, " "); got != want {
		t.Errorf("outbox after DeleteEntries:\n got %s\nwant %s", got, want)
	}
	// PurgeBefore takes ids[5] and its message; a-keep2 and a-rep3 (later)
	// and the unrelated entries stay.
	n, err := q.PurgeBefore(ctx, base.Add(time.Second))
	if err != nil || n != 1 {
		t.Fatalf("PurgeBefore = %d, %v; want 1", n, err)
	}
	if got, want := left(), strings.Join([]string{msgs[2], msgs[4]}, " "); got != want {
		t.Errorf("outbox after PurgeBefore:\n got %s\nwant %s", got, want)
	}
	if err := q.Delete(ctx, "a-keep2"); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), msgs[4]; got != want {
		t.Errorf("outbox after Delete:\n got %s\nwant %s", got, want)
	}
	var count int
	if err := s.w.QueryRow(s.sql(`SELECT count(*) FROM {{prefix}}dead_letters`)).Scan(&count); err != nil || count != 301 {
		t.Errorf("entries left = %d, %v; want the 300 unrelated and a-rep3", count, err)
	}
}

// TestDLQPageReplayMatchesExactly checks that a bulk replay by stream or
// reason replays exactly the pending entries of its filter, each once,
// whatever was changed between its read and its write.
func TestDLQPageReplayMatchesExactly(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t, store.Config{})
	ctx := context.Background()
	q := &deadLetters{s}
	base := time.Now().Add(-time.Hour)
	loadUnrelatedEntries(t, s, 300, base.Add(time.Minute))
	ids := loadPage(t, s, "b", 10, base)
	// One of the page's entries is resolved, another already replayed.
	if err := q.Resolve(ctx, ids[3], "no"); err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(ctx, ids[5]); err != nil {
		t.Fatal(err)
	}
	timeout := errorhandling.ReasonTimeoutExceeded
	es, err := q.ReplayMatchingAs(ctx, &dlq.Filters{Reason: &timeout, Limit: 4}, false, dlq.Action{Actor: "op"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := entryIDs(es), strings.Join([]string{ids[0], ids[1], ids[2], ids[4]}, " "); got != want {
		t.Errorf("first page replayed %s, want %s", got, want)
	}
	// A write between a page's read and its write changes what it
	// replays: the hook runs after the read.
	afterRead = func() {
		if err := q.Resolve(ctx, ids[6], "meanwhile"); err != nil {
			t.Error(err)
		}
	}
	defer func() { afterRead = nil }()
	es, err = q.ReplayMatchingAs(ctx, &dlq.Filters{Destination: "d", Stream: "s", Limit: 4,
		Cursor: dlq.NextCursor(es[len(es)-1])}, false, dlq.Action{Actor: "op"})
	afterRead = nil
	if err != nil {
		t.Fatal(err)
	}
	if got, want := entryIDs(es), strings.Join([]string{ids[7], ids[8], ids[9]}, " "); got != want {
		t.Errorf("second page replayed %s, want %s", got, want)
	}
	for _, e := range es {
		if !e.Replayed || e.Status != dlq.StatusReplayed || e.ReplayedBy != "op" {
			t.Errorf("entry %s returned as %+v", e.ID, e)
		}
	}
	var replayed, pendingMsgs int
	if err := s.w.QueryRow(s.sql(`SELECT count(*) FROM {{prefix}}dead_letters WHERE replayed = 1`)).Scan(&replayed); err != nil {
		t.Fatal(err)
	}
	if replayed != 8 {
		t.Errorf("%d entries replayed, want 8", replayed)
	}
	if err := s.w.QueryRow(s.sql(`SELECT count(*) FROM {{prefix}}outbox WHERE dead_lettered_at IS NULL`)).Scan(&pendingMsgs); err != nil {
		t.Fatal(err)
	}
	if pendingMsgs != 8 {
		t.Errorf("%d messages back in the outbox, want 8", pendingMsgs)
	}
	es, err = q.ReplayMatchingAs(ctx, &dlq.Filters{Destination: "d"}, false, dlq.Action{})
	if err != nil || len(es) != 0 {
		t.Errorf("replay again = %s, %v; want nothing", entryIDs(es), err)
	}
}

func entryIDs(es []*dlq.Entry) string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return strings.Join(ids, " ")
}
