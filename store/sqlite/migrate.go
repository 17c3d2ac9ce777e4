package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
)

// migrationFiles are the schema versions, applied in order. A file is named
// NNNN_what.sql; {{prefix}} in it stands for Config.TablePrefix.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockWait bounds how long a migration waits for the database's
// write lock. Another process may hold it migrating the same database
// (two servers started together), which takes seconds to minutes on a
// large one: the store's lock wait, 5 s, made the second fail.
const migrationLockWait = 10 * time.Minute

// migrate brings the schema of the tables named with prefix up to the
// latest version, in one transaction, and returns the versions it applied.
// Running it again applies nothing. While another connection holds the
// write lock it waits, at most migrationLockWait, logging once that it
// waits.
func migrate(ctx context.Context, db *sql.DB, prefix string, now time.Time, log *slog.Logger) ([]int, error) {
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var applied []int
	waiting := false
	err = retryBusyFor(ctx, migrationLockWait, func() error {
		err := inTx(ctx, db, func(tx *sql.Tx) error { return migrateTx(ctx, tx, prefix, now, log, ms, &applied) })
		if isBusy(err) && !waiting {
			waiting = true
			log.LogAttrs(ctx, slog.LevelWarn, "migration waits for the database's write lock, which another "+
				"connection holds (another process migrating it, or a transaction left open)",
				slog.String("store", "sqlite"), slog.Duration("max_wait", migrationLockWait))
		}
		return err
	})
	if errors.Is(err, ErrBusy) {
		return nil, fmt.Errorf("%w: sqlite: migrate: another connection held the database's write lock for %s "+
			"(another process migrating it, or a transaction left open)", ErrBusy, migrationLockWait)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: migrate: %w", err)
	}
	return applied, nil
}

// migrateTx applies, in tx, the migrations of ms not yet applied, and
// sets *applied to their versions.
func migrateTx(ctx context.Context, tx *sql.Tx, prefix string, now time.Time, log *slog.Logger, ms []store.Migration, applied *[]int) error {
	*applied = (*applied)[:0]
	table := prefix + "migrations"
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	versions, err := appliedVersions(ctx, tx, table)
	if err != nil {
		return err
	}
	done := map[int]bool{}
	for _, v := range versions {
		done[v] = true
	}
	store.WarnNewerSchema(ctx, log, "sqlite", versions, ms)
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, strings.ReplaceAll(m.SQL, "{{prefix}}", prefix)); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, now.UnixMilli()); err != nil {
			return err
		}
		*applied = append(*applied, m.Version)
	}
	return nil
}

// appliedVersions reads the schema versions recorded in table.
func appliedVersions(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, table string) ([]int, error) {
	rows, err := q.QueryContext(ctx, `SELECT version FROM `+table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var versions []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		versions = append(versions, v)
	}
	return versions, rows.Err()
}

// SchemaVersion returns the latest applied migration version, 0 when none.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	versions, err := appliedVersions(ctx, s.r, s.cfg.TablePrefix+"migrations")
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return 0, nil
		}
		return 0, fmt.Errorf("sqlite: schema version: %w", err)
	}
	v := 0
	for _, x := range versions {
		v = max(v, x)
	}
	return v, nil
}

// LatestSchemaVersion is the newest schema version this Backstop knows.
func LatestSchemaVersion() int {
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}
