// Package wfpostgres keeps workflow runs in the PostgreSQL database of a
// Backstop PostgreSQL store (store/postgres), next to its outbox and
// dead-letter queue, so that a task's success and the outbox messages it
// writes commit in one transaction, and so that engine instances on many
// machines share the runs: each run is held by one instance at a time
// through a lease, and another takes it over when the lease lapses.
//
// Its tables are the store's table prefix plus wf_runs, wf_tasks and
// wf_attempts, created by its own embedded, versioned migrations (version
// table: prefix plus wf_migrations, applied under an advisory lock) when
// New opens it.
package wfpostgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Store is the workflow store on a PostgreSQL store's database. It
// implements wfstore.Store and is safe for concurrent use by many
// goroutines and many processes.
type Store struct {
	st     *postgres.Store
	pool   *pgxpool.Pool
	schema string
	prefix string
	r      *strings.Replacer // {{T}}: qualified prefix; {{P}}: bare prefix
}

var _ wfstore.Store = (*Store)(nil)

// Option adjusts a Store.
type Option func(*Store)

// WithSchema puts the workflow tables in schema (which must exist), as
// postgres.WithSchema does for the store's: give both the same schema.
// The name may hold only a-z, 0-9 and _. Without it the tables go to the
// first schema of the connection's search_path.
func WithSchema(schema string) Option { return func(s *Store) { s.schema = schema } }

// New returns the workflow store on st's database, first applying its
// migrations (idempotent; instances starting together apply each once).
func New(ctx context.Context, st *postgres.Store, opts ...Option) (*Store, error) {
	if st == nil {
		return nil, errors.New("wfpostgres: nil store")
	}
	s := &Store{st: st, pool: st.Pool(), prefix: st.Config().TablePrefix}
	for _, o := range opts {
		o(s)
	}
	for _, c := range s.schema {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return nil, fmt.Errorf("wfpostgres: schema %q may hold only a-z, 0-9 and _", s.schema)
		}
	}
	qual := s.prefix
	if s.schema != "" {
		qual = pgx.Identifier{s.schema}.Sanitize() + "." + s.prefix
	}
	s.r = strings.NewReplacer("{{T}}", qual, "{{P}}", s.prefix)
	if _, err := s.Migrate(ctx); err != nil {
		return nil, err
	}
	// Every run's lease renewals and its tasks' changes leave dead rows:
	// the fleet's leader vacuums these tables with the outbox's.
	st.VacuumAlso(qual+"wf_runs", qual+"wf_tasks", qual+"wf_attempts")
	return s, nil
}

// Migrate applies the migrations not yet applied, in one transaction under
// a transaction-scoped advisory lock keyed by schema and prefix, and
// returns their versions.
func (s *Store) Migrate(ctx context.Context) ([]int, error) {
	var applied []int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		key := s.schema + "." + s.prefix + "wf_migrations"
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, key); err != nil {
			return err
		}
		var err error
		applied, err = wfstore.Migrate(ctx, migrator{s, tx}, migrationFiles, "migrations")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wfpostgres: migrate: %w", err)
	}
	return applied, nil
}

// migrator is one migration transaction.
type migrator struct {
	s  *Store
	tx pgx.Tx
}

const createVersionTable = `CREATE TABLE IF NOT EXISTS {{T}}wf_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`

// Applied implements wfstore.MigrationTx. The version table is created
// only when missing: CREATE TABLE IF NOT EXISTS needs the right to create
// in the schema even when the table exists, which the role of an
// application that only uses the tables does not have.
func (m migrator) Applied(ctx context.Context) (map[int]bool, error) {
	var exists bool
	if err := m.tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, m.s.q(`{{T}}wf_migrations`)).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		if _, err := m.tx.Exec(ctx, m.s.q(createVersionTable)); err != nil {
			return nil, err
		}
	}
	rows, err := m.tx.Query(ctx, m.s.q(`SELECT version FROM {{T}}wf_migrations`))
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	done := map[int]bool{}
	for _, v := range versions {
		done[int(v)] = true
	}
	return done, nil
}

// Apply implements wfstore.MigrationTx.
func (m migrator) Apply(ctx context.Context, mig store.Migration) error {
	if _, err := m.tx.Exec(ctx, m.s.q(mig.SQL)); err != nil {
		return err
	}
	_, err := m.tx.Exec(ctx, m.s.q(`INSERT INTO {{T}}wf_migrations (version, name) VALUES ($1, $2)`), mig.Version, mig.Name)
	return err
}

// DLQ returns the PostgreSQL store's dead-letter queue.
func (s *Store) DLQ() dlq.Operator { return s.st.DLQ() }

// OnCommit registers fn to run inside the pgx transaction that records the
// success of tc's task, so that what fn writes is committed if and only if
// the success is (and never twice).
func OnCommit(tc *workflow.TaskContext, fn func(ctx context.Context, tx pgx.Tx) error) {
	tc.OnCommit(func(ctx context.Context, tx any) error {
		t, ok := tx.(pgx.Tx)
		if !ok {
			return fmt.Errorf("wfpostgres: OnCommit: the run's store gives a %T, not a pgx.Tx", tx)
		}
		return fn(ctx, t)
	})
}

// q returns the statement with the table names in place.
func (s *Store) q(stmt string) string { return s.r.Replace(stmt) }

// tx runs fn in a read-committed transaction. An error for want of the
// database matches store.ErrUnavailable.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return classify(pgx.BeginFunc(ctx, s.pool, fn))
}

// exec runs one statement and returns the rows it changed. An error for
// want of the database matches store.ErrUnavailable.
func (s *Store) exec(ctx context.Context, stmt string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, s.q(stmt), args...)
	if err != nil {
		return 0, classify(err)
	}
	return tag.RowsAffected(), nil
}

// ts is t for a nullable timestamptz parameter: nil when zero.
func ts(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// fromTs is the time of a nullable timestamptz column, in UTC.
func fromTs(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
