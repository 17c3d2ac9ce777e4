package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

func openTemp(t testing.TB, cfg store.Config) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backstop.db")
	s, err := Open(context.Background(), path, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestMigrationsAreIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openTemp(t, store.Config{})
	all, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil || len(all) < 2 {
		t.Fatalf("migrations() = %d, %v", len(all), err)
	}
	applied, err := migrate(ctx, s.w, "backstop_", time.Now(), slog.Default())
	if err != nil || len(applied) != 0 {
		t.Fatalf("second migrate applied %v, %v; want nothing", applied, err)
	}
	again, err := Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer again.Close()
	var n, stamped int
	if err := s.r.QueryRow(`SELECT count(*), count(applied_at) FROM backstop_migrations`).Scan(&n, &stamped); err != nil {
		t.Fatal(err)
	}
	if n != len(all) || stamped != n {
		t.Fatalf("migrations table holds %d rows (%d stamped), want %d", n, stamped, len(all))
	}
	// Another prefix in the same file gets its own tables and versions.
	other, err := Open(ctx, path, store.Config{TablePrefix: "other_"})
	if err != nil {
		t.Fatalf("open with another prefix: %v", err)
	}
	defer other.Close()
	if err := other.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := s.r.QueryRow(`SELECT count(*) FROM backstop_outbox`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("backstop_outbox holds %d rows (%v), want 0", n, err)
	}
}

func TestPragmas(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t, store.Config{})
	for _, db := range []*sql.DB{s.w, s.r} {
		var mode string
		var fk, busy int
		if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
			t.Fatalf("journal_mode = %q (%v), want wal", mode, err)
		}
		if err := db.QueryRow(`PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
			t.Fatalf("foreign_keys = %d (%v), want 1", fk, err)
		}
		if err := db.QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != int(defaultLockWait.Milliseconds()) {
			t.Fatalf("busy_timeout = %d (%v)", busy, err)
		}
	}
	var cache int
	if err := s.w.QueryRow(`PRAGMA cache_size`).Scan(&cache); err != nil || cache != -65536 {
		t.Fatalf("writer cache_size = %d (%v), want -65536 (64 MB)", cache, err)
	}
	if _, err := s.r.Exec(`DELETE FROM backstop_outbox`); err == nil {
		t.Fatal("the read pool accepted a write")
	}
}

func TestHotQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	s, _ := openTemp(t, store.Config{Policies: map[string]store.Policy{"it's": {}}})
	plan := func(q string, args ...any) string {
		return strings.Join(queryPlan(t, s, s.sql(q), args...), "\n") + "\n"
	}
	for q, idxs := range map[string][]string{
		unorderedCandidates: {"backstop_outbox_unordered", "backstop_outbox_due (destination=? AND scheduled_for>? AND scheduled_for<?)", "backstop_outbox_lease (lease_expiry<?)"},
		dueDestinations:     {"backstop_outbox_due (destination>?)", "backstop_outbox_due (destination=? AND scheduled_for>? AND scheduled_for<?)", "backstop_outbox_lease (lease_expiry<?)"},
		readyStreams:        {"backstop_streams_ready"},
		streamRows:          {"backstop_outbox_stream (destination=? AND stream=? AND seq>?)"},
		streamLive: {"backstop_outbox_stream_live (destination=? AND stream=? AND seq>? AND seq<?)",
			"backstop_outbox_stream_inflight (destination=? AND stream=? AND seq>? AND seq<?)"},
		streamProbe: {"backstop_outbox_stream (destination=? AND stream=? AND seq>?)",
			"backstop_outbox_stream_hold (destination=? AND stream=? AND <expr>=? AND seq>?)",
			"backstop_outbox_stream_retry (destination=? AND stream=? AND scheduled_for>?)",
			"backstop_outbox_stream_retry (destination=? AND stream=? AND scheduled_for>? AND scheduled_for<?)"},
		streamDue: {"backstop_outbox_stream_retry (destination=? AND stream=? AND scheduled_for>? AND scheduled_for<?)"},
	} {
		p := plan(q, sql.Named("dest", "d"), sql.Named("stream", "s"), sql.Named("now", 1), sql.Named("lapse", 1),
			sql.Named("head", 0), sql.Named("limit", 5), sql.Named("stop", 9), sql.Named("strict", true),
			sql.Named("cap", 5))
		for _, idx := range idxs {
			if !strings.Contains(p, idx) {
				t.Errorf("claim plan does not use %s:\n%s", idx, p)
			}
		}
		if strings.Contains(p, "TEMP B-TREE") && q != unorderedCandidates && q != dueDestinations { // those sort what they found
			t.Errorf("claim plan sorts:\n%s", p)
		}
		if strings.Contains(p, "SCAN backstop_outbox") && !strings.Contains(p, "USING") {
			t.Errorf("claim plan scans the outbox:\n%s", p)
		}
	}
	sweep := strings.Replace(sweepSQL, "LIMIT ?", "LIMIT 100", 1)
	if p := plan(sweep); !strings.Contains(p, "backstop_outbox_undecodable") {
		t.Errorf("the sweep for undecodable rows does not use backstop_outbox_undecodable:\n%s", p)
	}
	if p := plan(streamHead, "d", "s"); !strings.Contains(p, "backstop_outbox_stream") {
		t.Errorf("stream head plan does not use backstop_outbox_stream:\n%s", p)
	}
}

func TestPlainSQLRowGetsEveryDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTemp(t, store.Config{})
	before := time.Now().Add(-time.Second)
	if _, err := s.w.Exec(`INSERT INTO backstop_outbox (destination, type, payload) VALUES ('d', 't', 'x')`); err != nil {
		t.Fatal(err)
	}
	var id, headers string
	var status, attempts int
	var created int64
	if err := s.r.QueryRow(`SELECT id, headers, status, attempts, created_at FROM backstop_outbox`).
		Scan(&id, &headers, &status, &attempts, &created); err != nil {
		t.Fatal(err)
	}
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 || u.Version() != 4 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("default id %q: %v (version %d)", id, err, u.Version())
	}
	if headers != "{}" || status != 1 || attempts != 0 {
		t.Fatalf("headers %q status %d attempts %d", headers, status, attempts)
	}
	if at := time.UnixMilli(created); at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("created_at %v is not now", at)
	}
	for _, bad := range []string{
		`INSERT INTO backstop_outbox (id, destination, type) VALUES ('not-a-uuid', 'd', 't')`,
		`INSERT INTO backstop_outbox (destination, type, headers) VALUES ('d', 't', '{oops')`,
		`INSERT INTO backstop_outbox (destination, type, ordering) VALUES ('d', 't', 'sometimes')`,
	} {
		if _, err := s.w.ExecContext(ctx, bad); err == nil {
			t.Errorf("accepted: %s", bad)
		}
	}
}

func TestOddHeadersDoNotFailAClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTemp(t, store.Config{})
	// the schema refuses headers that are not an object now; a row
	// written before it did is simulated by dropping its checks
	if _, err := s.w.Exec(`INSERT INTO backstop_outbox (destination, type, headers) VALUES ('d', 't', '[1,2]')`); err == nil {
		t.Fatal("the schema accepted headers that are not an object")
	}
	dropChecks(t, s.w, "backstop_")
	for _, h := range []string{`{"n":1,"s":"x"}`, `[1,2]`} {
		if _, err := s.w.Exec(`INSERT INTO backstop_outbox (destination, type, headers) VALUES ('d', 't', ?)`, h); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 5}})
	if err != nil || len(r.Claimed) != 1 || len(r.Quarantined) != 1 {
		t.Fatalf("claim: %+v, %v; want one claimed, one quarantined", r, err)
	}
	if h := r.Claimed[0].Headers; h["n"] != "1" || h["s"] != "x" {
		t.Fatalf("headers = %v", h)
	}
	list, err := s.DLQ().List(ctx, nil)
	if err != nil || len(list) != 1 || list[0].Reason != errorhandling.ReasonSerializationError ||
		!strings.Contains(list[0].ErrorMessage, `column headers: "[1,2]" is not a JSON object`) {
		t.Fatalf("dead letters = %+v, %v", list, err)
	}
}

func TestInMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, ":memory:", store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := &outbox.Message{Destination: "d", Type: "t"}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, m.ID); err != nil || got.ID != m.ID {
		t.Fatalf("Get: %v, %v", got, err)
	}
	if _, err := Open(ctx, "", store.Config{}); err == nil {
		t.Fatal("Open with an empty path succeeded")
	}
}

// Two stores on one file stand for two processes: their writers contend for
// the database lock, which busy_timeout and the busy retry absorb.
func TestTwoStoresOnOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, path := openTemp(t, store.Config{})
	b, err := Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const total = 200
	for i := range total {
		if err := a.Enqueue(ctx, &outbox.Message{Destination: "d", Stream: fmt.Sprint(i % 5), Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		seen = map[uuid.UUID]bool{}
		wg   sync.WaitGroup
		busy atomic.Int64
	)
	errs := make(chan error, 4)
	for w, s := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var done []store.Completion
			for range 2000 {
				r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: fmt.Sprint("w", w)},
					Completions: done, Claim: store.ClaimRequest{Limit: 3}})
				if errors.Is(err, ErrBusy) {
					// The lock wait ran out (a loaded machine): the
					// documented answer, which a relay retries, with its
					// completions. Nothing of the batch was written.
					busy.Add(1)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				done = nil
				mu.Lock()
				for _, m := range r.Claimed {
					if seen[m.ID] {
						mu.Unlock()
						errs <- fmt.Errorf("%s claimed twice", m.ID)
						return
					}
					seen[m.ID] = true
					done = append(done, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
				}
				finished := len(seen) == total && len(done) == 0
				mu.Unlock()
				if finished {
					return
				}
			}
			errs <- fmt.Errorf("worker %d gave up", w)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := busy.Load(); n > 0 {
		t.Logf("%d batches ran out of lock wait and were tried again", n)
	}
}

// dropChecks drops the outbox's check triggers (migration 0003), as if the
// database had rows written before them.
func dropChecks(t testing.TB, db *sql.DB, prefix string) {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE ?`, prefix+"outbox_check_%")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	if len(names) == 0 {
		t.Fatal("no check triggers to drop")
	}
	for _, n := range names {
		if _, err := db.Exec(`DROP TRIGGER ` + n); err != nil {
			t.Fatal(err)
		}
	}
}

// queryPlan is SQLite's plan of q (EXPLAIN QUERY PLAN), a line a step.
func queryPlan(t testing.TB, s *Store, q string, args ...any) []string {
	t.Helper()
	rows, err := s.r.Query("EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}
