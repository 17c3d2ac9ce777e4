// Package wfsqlite keeps workflow runs in the SQLite database of a
// Backstop SQLite store (store/sqlite), next to its outbox and dead-letter
// queue, so that a task's success and the outbox messages it writes commit
// in one transaction.
//
// Its tables are the store's table prefix plus wf_runs, wf_tasks and
// wf_attempts, created by its own embedded, versioned migrations (version
// table: prefix plus wf_migrations) when New opens it. Every statement runs
// on the store's single writer connection (sqlite.Store.DB()).
package wfsqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Store is the workflow store on a SQLite store's database. It implements
// wfstore.Store and is safe for concurrent use. Several processes may open
// the same file one after the other (a restarted process resumes the runs
// of the one before it); SQLite's single writer serialises them.
type Store struct {
	st     *sqlite.Store
	db     *sql.DB
	prefix string
	hot    hotStatements
}

// hotStatements are the statements every task's attempt runs, compiled
// once by New: SQLite compiled each again on every call, about a fifth
// of the CPU of a run of no-op tasks (BenchmarkRunSize). Nil on a
// read-only store, which runs none of them.
type hotStatements struct {
	startTask, insertAttempt, finishTask, finishAttempt, runHeld *sql.Stmt
}

// prepare compiles the hot statements.
func (s *Store) prepare(ctx context.Context) error {
	for _, h := range []struct {
		to   **sql.Stmt
		text string
	}{{&s.hot.startTask, startTask}, {&s.hot.insertAttempt, insertAttempt}, {&s.hot.finishTask, finishTask},
		{&s.hot.finishAttempt, finishAttempt}, {&s.hot.runHeld, runHeld}} {
		st, err := s.db.PrepareContext(ctx, s.q(h.text))
		if err != nil {
			return fmt.Errorf("wfsqlite: prepare: %w", err)
		}
		*h.to = st
	}
	return nil
}

// execHot runs in tx the hot statement st, whose text is text (compiled
// there when st was not prepared).
func (s *Store) execHot(ctx context.Context, tx *sql.Tx, st *sql.Stmt, text string, args ...any) (sql.Result, error) {
	if st == nil {
		return tx.ExecContext(ctx, s.q(text), args...)
	}
	return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

// queryRowHot is execHot for a query of one row.
func (s *Store) queryRowHot(ctx context.Context, tx *sql.Tx, st *sql.Stmt, text string, args ...any) *sql.Row {
	if st == nil {
		return tx.QueryRowContext(ctx, s.q(text), args...)
	}
	return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
}

var _ wfstore.Store = (*Store)(nil)

// New returns the workflow store on st's database, first applying its
// migrations (idempotent; a second New applies nothing), unless st was
// opened read-only (sqlite.ReadOnly): then it only reads.
func New(ctx context.Context, st *sqlite.Store) (*Store, error) {
	if st == nil {
		return nil, errors.New("wfsqlite: nil store")
	}
	s := &Store{st: st, db: st.DB(), prefix: st.Config().TablePrefix}
	if st.ReadOnly() {
		return s, nil // for reading; its writes fail with sqlite.ErrReadOnly
	}
	if _, err := s.Migrate(ctx); err != nil {
		return nil, err
	}
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Migrate applies the migrations not yet applied, in one transaction, and
// returns their versions.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	var applied []int
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		applied, err = wfstore.Migrate(ctx, migrator{s, tx}, migrationFiles, "migrations")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wfsqlite: migrate: %w", err)
	}
	return applied, nil
}

// migrator is one migration transaction.
type migrator struct {
	s  *Store
	tx *sql.Tx
}

const createVersionTable = `CREATE TABLE IF NOT EXISTS {{prefix}}wf_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL)`

// Applied implements wfstore.MigrationTx.
func (m migrator) Applied(ctx context.Context) (map[int]bool, error) {
	if _, err := m.tx.ExecContext(ctx, m.s.q(createVersionTable)); err != nil {
		return nil, err
	}
	rows, err := m.tx.QueryContext(ctx, m.s.q(`SELECT version FROM {{prefix}}wf_migrations`))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		done[v] = true
	}
	return done, rows.Err()
}

// Apply implements wfstore.MigrationTx.
func (m migrator) Apply(ctx context.Context, mig store.Migration) error {
	if _, err := m.tx.ExecContext(ctx, m.s.q(mig.SQL)); err != nil {
		return err
	}
	_, err := m.tx.ExecContext(ctx, m.s.q(`INSERT INTO {{prefix}}wf_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
		mig.Version, mig.Name, time.Now().UnixMilli())
	return err
}

// DLQ returns the SQLite store's dead-letter queue.
func (s *Store) DLQ() dlq.Operator { return s.st.DLQ() }

// OnCommit registers fn to run inside the SQLite transaction that records
// the success of tc's task, so that what fn writes is committed if and only
// if the success is (and never twice). fn must not call the store's own
// methods: the transaction holds its only writer connection.
func OnCommit(tc *workflow.TaskContext, fn func(ctx context.Context, tx *sql.Tx) error) {
	tc.OnCommit(func(ctx context.Context, tx any) error {
		t, ok := tx.(*sql.Tx)
		if !ok {
			return fmt.Errorf("wfsqlite: OnCommit: the run's store gives a %T, not a *sql.Tx", tx)
		}
		return fn(ctx, t)
	})
}

// q returns the statement with the table prefix in place.
func (s *Store) q(stmt string) string { return strings.ReplaceAll(stmt, "{{prefix}}", s.prefix) }

// tx runs fn in a transaction on the writer connection (BEGIN IMMEDIATE).
func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// exec runs one statement in its own transaction and returns the rows it
// changed.
func (s *Store) exec(ctx context.Context, stmt string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(stmt), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ms is t in unix milliseconds, NULL when zero.
func ms(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// fromMs is the time of a nullable unix-milliseconds column.
func fromMs(n sql.NullInt64) time.Time {
	if !n.Valid || n.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n.Int64).UTC()
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
