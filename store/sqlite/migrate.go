package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"
)

// migrationFiles are the schema versions, applied in order. A file is named
// NNNN_what.sql; {{prefix}} in it stands for Config.TablePrefix.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one schema version.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	paths, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, p := range paths {
		name := strings.TrimPrefix(p, "migrations/")
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("sqlite: migration %s: name must start with a version number", name)
		}
		body, err := migrationFiles.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// migrate brings the schema of the tables named with prefix up to the
// latest version, in one transaction, and returns the versions it applied.
// Running it again applies nothing.
func migrate(ctx context.Context, db *sql.DB, prefix string, now time.Time) ([]int, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	var applied []int
	err = withTx(ctx, db, func(tx *sql.Tx) error {
		applied = applied[:0]
		table := prefix + "migrations"
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
			version    INTEGER PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at INTEGER NOT NULL)`); err != nil {
			return fmt.Errorf("create %s: %w", table, err)
		}
		done := map[int]bool{}
		rows, err := tx.QueryContext(ctx, `SELECT version FROM `+table)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return err
			}
			done[v] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range ms {
			if done[m.version] {
				continue
			}
			if _, err := tx.ExecContext(ctx, strings.ReplaceAll(m.sql, "{{prefix}}", prefix)); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, now.UnixMilli()); err != nil {
				return err
			}
			applied = append(applied, m.version)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: migrate: %w", err)
	}
	return applied, nil
}
