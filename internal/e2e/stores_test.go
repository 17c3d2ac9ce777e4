package e2e

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// databaseKind is a row of the matrix: a store and how to set up one
// test's database in it.
type databaseKind struct {
	name string
	open func(t *testing.T, cfg store.Config) *database
}

var databases = []databaseKind{
	{name: "sqlite", open: openSQLite},
	{name: "postgres", open: openPostgres},
}

// database is one test's outbox database, as the application and the
// relays see it.
type database struct {
	// Store is the application's handle, which the first relay uses too.
	store.Store
	// another opens one more handle on the same database, with the same
	// configuration: a second relay process.
	another func(t *testing.T) store.Store
	// write inserts one orders row per message and enqueues the messages
	// in one application transaction, then commits it or rolls it back.
	write func(ctx context.Context, commit bool, msgs []*outbox.Message) error
	// rows counts the rows of the outbox table, whatever their state.
	rows func(ctx context.Context) (int, error)
}

// openSQLite opens a SQLite file in the test's temporary directory, with
// an orders table of the application's next to the outbox.
func openSQLite(t *testing.T, cfg store.Config) *database {
	t.Helper()
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "outbox.db")
	open := func(t *testing.T) *sqlite.Store {
		t.Helper()
		s, err := sqlite.Open(ctx, path, cfg)
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s := open(t)
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, body BLOB NOT NULL)`); err != nil {
		t.Fatalf("create orders: %v", err)
	}
	return &database{
		Store:   s,
		another: func(t *testing.T) store.Store { return open(t) },
		write: func(ctx context.Context, commit bool, msgs []*outbox.Message) error {
			tx, err := s.DB().BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			for _, m := range msgs {
				if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, body) VALUES (?, ?)`, m.ID.String(), m.Payload); err != nil {
					return err
				}
			}
			if err := s.EnqueueTx(ctx, tx, msgs...); err != nil {
				return err
			}
			if !commit {
				return tx.Rollback()
			}
			return tx.Commit()
		},
		rows: func(ctx context.Context) (int, error) {
			return countRows(s.DB().QueryRowContext(ctx, `SELECT count(*) FROM backstop_outbox`))
		},
	}
}

func countRows(row *sql.Row) (int, error) {
	var n int
	err := row.Scan(&n)
	return n, err
}

// openPostgres creates a schema for the test alone (dropped when it ends),
// migrates the store into it, and creates the application's orders table
// there.
func openPostgres(t *testing.T, cfg store.Config) *database {
	t.Helper()
	ctx := testContext(t)
	schema := testenv.NewSchema(t, "e2e_")
	open := func(t *testing.T) *postgres.Store {
		t.Helper()
		pcfg, err := pgxpool.ParseConfig(postgresURL())
		if err != nil {
			t.Fatal(err)
		}
		pcfg.MaxConns = 3 // the relay, the application, the test's queries
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(pool.Close)
		s, err := postgres.New(pool, cfg, postgres.WithSchema(schema))
		if err != nil {
			t.Fatalf("postgres.New: %v", err)
		}
		return s
	}
	s := open(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := s.Pool().Exec(ctx, "CREATE TABLE "+orders+" (id uuid PRIMARY KEY, body bytea NOT NULL)"); err != nil {
		t.Fatalf("create orders: %v", err)
	}
	outboxTable := pgx.Identifier{schema, "backstop_outbox"}.Sanitize()
	return &database{
		Store:   s,
		another: func(t *testing.T) store.Store { return open(t) },
		write: func(ctx context.Context, commit bool, msgs []*outbox.Message) error {
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			for _, m := range msgs {
				if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, body) VALUES ($1, $2)", m.ID, m.Payload); err != nil {
					return err
				}
			}
			if err := s.EnqueueTx(ctx, tx, msgs...); err != nil {
				return err
			}
			if !commit {
				return tx.Rollback(ctx)
			}
			return tx.Commit(ctx)
		},
		rows: func(ctx context.Context) (int, error) {
			var n int
			err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+outboxTable).Scan(&n)
			return n, err
		},
	}
}
