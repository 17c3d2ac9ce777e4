package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/store"
)

// deadRows leaves n dead rows in the outbox (COPY, then DELETE) and has
// the statistics flushed, so that pg_stat_user_tables counts them.
func deadRows(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	backlog{Pending: n}.loadFrom(t, s, 0)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The backend flushes its statistics before it answers the statement
	// after pg_stat_force_next_flush.
	for _, q := range []string{"DELETE FROM " + s.n.outbox, "SELECT pg_stat_force_next_flush()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// deadTuples is pg_stat_user_tables' count of the outbox's dead rows.
func deadTuples(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(),
		"SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relid = to_regclass($1)", s.n.outbox).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The leader's vacuum: nothing below the threshold, the outbox once its
// dead rows pass it (and they are gone after), nothing again right after.
func TestVacuumPastTheThreshold(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	deadRows(t, s, vacuumMinDead/2)
	if got, err := s.Vacuum(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Vacuum with %d dead rows = %v, %v; want nothing", deadTuples(t, s), got, err)
	}
	deadRows(t, s, vacuumMinDead)
	if d := deadTuples(t, s); d < vacuumMinDead {
		t.Fatalf("the statistics count %d dead rows, want at least %d", d, vacuumMinDead)
	}
	size := func() int64 {
		t.Helper()
		var n int64
		if err := s.pool.QueryRow(ctx, "SELECT pg_relation_size(to_regclass($1))", s.n.outbox).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := size()
	got, err := s.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != s.n.outbox {
		t.Fatalf("Vacuum = %v, want [%s]", got, s.n.outbox)
	}
	if d := deadTuples(t, s); d != 0 {
		t.Errorf("after the vacuum the statistics count %d dead rows", d)
	}
	// Every page is empty, and the vacuum leaves them: giving them back
	// takes the table's ACCESS EXCLUSIVE lock, which a busy outbox's
	// writers and claims would queue behind, for pages the next inserts
	// fill again.
	if after := size(); after != before || before == 0 {
		t.Errorf("the outbox took %d bytes before the vacuum and %d after, want them kept", before, after)
	}
	if got, err := s.Vacuum(ctx); err != nil || len(got) != 0 {
		t.Errorf("a second Vacuum = %v, %v; want nothing", got, err)
	}
}

// A statement_timeout on the store's sessions shorter than the VACUUM
// does not cut it, and the session has its own timeout back afterwards
// (set by the pool's AfterConnect here, which a RESET would have lost).
func TestVacuumOutlastsTheSessionsStatementTimeout(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	setup := migratedOn(t, schemaPool(t, schema, 1))
	deadRows(t, setup, 10*vacuumMinDead)
	cfg := schemaPool(t, schema, 1).Config()
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET statement_timeout = '20ms'")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := New(pool, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := s.Vacuum(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("Vacuum under a 20 ms statement_timeout = %v, %v", got, err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Logf("(the vacuum took %v: under the timeout, the test proves less)", took)
	}
	var timeout string
	if err := pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "20ms" {
		t.Errorf("after the vacuum the session's statement_timeout is %q (%v), want 20ms", timeout, err)
	}
}

// A store whose role does not own the tables (an application's role, the
// schema migrated by another) does not vacuum them: it says so once and
// leaves them to autovacuum, and the call is no error.
func TestVacuumLeavesTablesItDoesNotOwnToAutovacuum(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	owner := migratedOn(t, schemaPool(t, schema, 2))
	deadRows(t, owner, 2*vacuumMinDead)
	var logs bytes.Buffer
	s, err := New(dmlRole(t, schema), store.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := s.Vacuum(ctx); err != nil || len(got) != 0 {
			t.Fatalf("Vacuum by a role that does not own the tables = %v, %v; want nothing", got, err)
		}
	}
	if n := strings.Count(logs.String(), "may not vacuum"); n != 1 {
		t.Errorf("said %d times that it may not vacuum, want once:\n%s", n, logs.String())
	}
	if d := deadTuples(t, owner); d < 2*vacuumMinDead {
		t.Errorf("the statistics count %d dead rows, want the %d left", d, 2*vacuumMinDead)
	}
}

// The inbox's de-duplication records and the idempotency keys are written
// and swept row by row, as messages are: past the threshold their tables
// are vacuumed too.
func TestVacuumSweptTables(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	received, keys := s.n.qual+"inbox_received", s.n.qual+"idempotency_keys"
	for _, q := range []string{
		"INSERT INTO " + received + " (inbox, message_id) SELECT 'in', g::text FROM generate_series(1, $1) g",
		"INSERT INTO " + keys + " (key, message_ids) SELECT g::text, '{}' FROM generate_series(1, $1) g",
	} {
		if _, err := conn.Exec(ctx, q, vacuumMinDead); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, q := range []string{"DELETE FROM " + received, "DELETE FROM " + keys, "SELECT pg_stat_force_next_flush()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	got, err := s.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{received, keys}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Vacuum = %v, want %v", got, want)
	}
}
