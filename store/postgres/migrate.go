package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockTimeout bounds each wait of a migration for a lock on a
// table (its lock_timeout). While a migration waits for a table that
// another transaction holds, every new statement on that table waits
// behind it: without a bound, an application transaction left open
// stopped every insert into the outbox for as long as it stayed open.
const migrationLockTimeout = time.Second

// Migrate brings the schema to the latest version. It runs in one
// transaction under a transaction-scoped advisory lock keyed by the
// schema and table prefix, so instances starting together apply each
// migration once; running it again is a no-op. Applied versions are
// recorded in the <prefix>migrations table.
//
// A migration that changes a table waits at most migrationLockTimeout
// for another transaction to let go of it, so that the application's
// writes queue behind it no longer than that; it then rolls back, logs a
// warning and tries again, waiting a little longer between tries (at most
// 5 s), until it applies or ctx ends.
//
// An index a migration adds to a table that may be large is built in that
// transaction only while the table is small; on a larger one it is built
// CONCURRENTLY once the transaction commits, and Migrate returns when it
// is built (buildIndexes, which also builds again one an interrupted build
// left invalid).
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	pause := 100 * time.Millisecond
	for try := 1; ; try++ {
		var indexes []migrationIndex
		err := retryTx(ctx, func() error {
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
				indexes, err = s.migrate(ctx, tx, ms)
				return err
			})
		})
		if err == nil {
			return s.buildIndexes(ctx, indexes)
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "55P03" { // lock_not_available
			return err
		}
		s.cfg.Log().LogAttrs(ctx, slog.LevelWarn, "migration waits for a table another transaction holds "+
			"(an open transaction on Backstop's tables); trying again",
			slog.String("store", "postgres"), slog.Int("attempt", try),
			slog.Duration("lock_timeout", migrationLockTimeout), slog.String("error", err.Error()))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 5*time.Second)
	}
}

// migrate applies the migrations of ms not yet applied, in tx, and
// returns the indexes of every migration's concurrent part (splitMigration)
// for buildIndexes to build once tx commits, where they are missing.
func (s *Store) migrate(ctx context.Context, tx pgx.Tx, ms []store.Migration) ([]migrationIndex, error) {
	lock := "SELECT pg_advisory_xact_lock(" + s.n.lockKey("migrations") + ")"
	if _, err := tx.Exec(ctx, lock); err != nil {
		return nil, fmt.Errorf("postgres: migration lock: %w", err)
	}
	// Set once the advisory lock is held: another instance's migration
	// is waited for to the end.
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", migrationLockTimeout.Milliseconds())); err != nil {
		return nil, fmt.Errorf("postgres: migration lock timeout: %w", err)
	}
	// Created only when missing: CREATE TABLE IF NOT EXISTS needs the
	// right to create in the schema even when the table exists, and the
	// role of an application that only uses the tables has none.
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.n.migrations).Scan(&exists); err != nil {
		return nil, fmt.Errorf("postgres: read migrations: %w", err)
	}
	if !exists {
		create := `CREATE TABLE ` + s.n.migrations + ` (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`
		if _, err := tx.Exec(ctx, create); err != nil {
			return nil, fmt.Errorf("postgres: create migrations table%s: %w", needsOwner(err), err)
		}
	}
	rows, err := tx.Query(ctx, `SELECT version FROM `+s.n.migrations)
	if err != nil {
		return nil, fmt.Errorf("postgres: read migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("postgres: read migrations: %w", err)
	}
	done := map[int]bool{}
	versions := make([]int, 0, len(applied))
	for _, v := range applied {
		done[int(v)] = true
		versions = append(versions, int(v))
	}
	store.WarnNewerSchema(ctx, s.cfg.Log(), "postgres", versions, ms)
	// The migrations name everything with the schema they run in, so that
	// the functions behind the outbox's triggers find their tables whatever
	// the search_path of the session that writes to it. Without WithSchema
	// that is the first schema of this connection's search_path.
	sch := s.n.schema
	if sch == "" {
		var cur *string
		if err := tx.QueryRow(ctx, `SELECT current_schema()`).Scan(&cur); err != nil {
			return nil, fmt.Errorf("postgres: current schema: %w", err)
		}
		if cur == nil {
			return nil, errors.New("postgres: migrate: the connection's search_path names no schema that exists; " +
				"create one, set search_path to it, or use WithSchema")
		}
		sch = *cur
		// The migrations name the schema inside string literals and
		// dollar-quoted function bodies, where a ' or a $ ends them.
		if strings.ContainsAny(sch, `'$`) {
			return nil, fmt.Errorf("postgres: migrate: the connection's schema %q holds a ' or a $, which the migrations "+
				"cannot name; put Backstop's tables in a schema named with a-z, 0-9 and _ (search_path, or WithSchema)", sch)
		}
	}
	id := pgx.Identifier{sch}.Sanitize()
	r := strings.NewReplacer("{{T}}", id+"."+s.n.prefix, "{{P}}", s.n.prefix)
	var later []migrationIndex
	for _, m := range ms {
		sql, indexes, err := splitMigration(r.Replace(m.SQL), id)
		if err != nil {
			return nil, fmt.Errorf("postgres: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if done[m.Version] {
			later = append(later, indexes...) // built then, unless a build was cut short
			continue
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return nil, fmt.Errorf("postgres: migration %04d_%s%s: %w", m.Version, m.Name, needsOwner(err), err)
		}
		if err := s.buildInTx(ctx, tx, indexes); err != nil {
			return nil, fmt.Errorf("postgres: migration %04d_%s%s: %w", m.Version, m.Name, needsOwner(err), err)
		}
		later = append(later, indexes...)
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.n.migrations+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("postgres: record migration %d: %w", m.Version, err)
		}
	}
	return later, nil
}

// needsOwner says, for an error of insufficient privilege, what a
// migration needs; otherwise it returns "".
func needsOwner(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return " (this needs a role that may change the schema, such as the tables' owner: " +
			"run backstop migrate as that role)"
	}
	return ""
}

// SchemaVersion returns the latest applied migration version, 0 when none.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var exists bool
	q := `SELECT to_regclass($1) IS NOT NULL`
	if err := s.pool.QueryRow(ctx, q, s.n.migrations).Scan(&exists); err != nil {
		return 0, fmt.Errorf("postgres: schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s.n.migrations).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("postgres: schema version: %w", err)
	}
	return v, nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// LatestSchemaVersion is the newest schema version this Backstop knows.
func LatestSchemaVersion() int {
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}
