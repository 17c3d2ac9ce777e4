package rawsys

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// The baseline's SQLite table and statements: the claim is the same
// DELETE without SKIP LOCKED, which SQLite's single writer does not need.
const (
	liteCreate = `CREATE TABLE raw_queue (
		id         INTEGER PRIMARY KEY,
		payload    BLOB NOT NULL,
		created_at INTEGER NOT NULL DEFAULT (unixepoch('subsec') * 1000))`
	liteClaim = `DELETE FROM raw_queue WHERE id IN (
		SELECT id FROM raw_queue ORDER BY id LIMIT ?) RETURNING id, payload`
	// litePragmas are those of Backstop's SQLite store: WAL, synchronous
	// NORMAL, a busy timeout, and transactions that begin IMMEDIATE.
	litePragmas = "_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_pragma=journal_mode(WAL)"
)

type liteDB struct{ db *sql.DB }

// openSQLite creates raw.db in dir with one connection, SQLite's one
// writer.
func openSQLite(ctx context.Context, dir string) (*liteDB, error) {
	db, err := sql.Open("sqlite", filepath.Join(dir, "raw.db")+"?"+litePragmas)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, liteCreate); err != nil {
		db.Close()
		return nil, err
	}
	return &liteDB{db: db}, nil
}

func (d *liteDB) insert(ctx context.Context, payloads [][]byte) error {
	q := "INSERT INTO raw_queue (payload) VALUES (?)" + strings.Repeat(", (?)", len(payloads)-1)
	args := make([]any, len(payloads))
	for i, p := range payloads {
		args[i] = p
	}
	_, err := d.db.ExecContext(ctx, q, args...)
	return err
}

func (d *liteDB) claim(ctx context.Context, limit int, handle func([]byte) error) (n int, err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	rows, err := tx.QueryContext(ctx, liteClaim, limit)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	if n, err = handleClaimed(rows, handle); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

func (d *liteDB) close() { _ = d.db.Close() }
