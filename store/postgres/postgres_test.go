package postgres

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/storetest"
)

func testURL() string { return testenv.PostgresURL() }

// admin is the shared pool on the test server (skips, or fails under CI,
// when it is unreachable).
func admin(t testing.TB) *pgxpool.Pool { return testenv.PostgresAdmin(t) }

// newSchema creates an empty schema dropped when the test ends.
func newSchema(t testing.TB) string { return testenv.NewSchema(t, "t_") }

// schemaPool returns a pool whose connections use schema as search_path.
func schemaPool(t testing.TB, schema string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return schemaPoolWith(t, schema, maxConns, nil)
}

// schemaPoolWith is schemaPool with more session settings (params).
func schemaPoolWith(t testing.TB, schema string, maxConns int32, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// migratedOn returns a store with a zero Config on pool, migrated.
func migratedOn(t testing.TB, pool *pgxpool.Pool) *Store {
	t.Helper()
	s, err := New(pool, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// openTest returns a migrated store in a fresh schema. Its pool holds at
// most two connections: the conformance suite runs GOMAXPROCS stores at
// once, and the server's max_connections must cover them all.
func openTest(t testing.TB, cfg store.Config) (*Store, error) {
	t.Helper()
	schema := newSchema(t)
	s, err := New(schemaPool(t, schema, 2), cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s, nil
}

func TestConformance(t *testing.T) {
	admin(t)
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T, cfg store.Config) (store.Store, error) {
			s, err := openTest(t, cfg)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		EnqueueTx: func(t *testing.T, st store.Store, commit bool, msgs ...*outbox.Message) error {
			s := st.(*Store)
			ctx := context.Background()
			tx, err := s.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.EnqueueTx(ctx, tx, msgs...); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			if commit {
				return tx.Commit(ctx)
			}
			return tx.Rollback(ctx)
		},
		InsertSQL: func(t *testing.T, st store.Store, destination, typ string, payload []byte) {
			s := st.(*Store)
			if payload == nil {
				payload = []byte{}
			}
			_, err := s.Pool().Exec(context.Background(),
				"INSERT INTO "+s.n.outbox+" (destination, type, payload) VALUES ($1, $2, $3)",
				destination, typ, payload)
			if err != nil {
				t.Fatalf("plain insert: %v", err)
			}
		},
		Reopen: func(t *testing.T, st store.Store, cfg store.Config) store.Store {
			s, err := New(st.(*Store).Pool(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Poison: poison,
	})
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	stores := make([]*Store, 3)
	for i := range stores {
		s, err := New(schemaPool(t, schema, 2), store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Migrate(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, err)
		}
	}
	if err := stores[0].Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	v, err := stores[0].SchemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != ms[len(ms)-1].Version {
		t.Fatalf("SchemaVersion = %d, want %d", v, ms[len(ms)-1].Version)
	}
	var n int
	if err := stores[0].pool.QueryRow(ctx, "SELECT count(*) FROM backstop_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) {
		t.Fatalf("%d migration rows, want %d", n, len(ms))
	}
}

func TestWithSchemaQualifiesNames(t *testing.T) {
	schema := newSchema(t)
	ctx := context.Background()
	s, err := Open(ctx, testURL(), store.Config{TablePrefix: "bs_"}, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	m := &outbox.Message{Destination: "d", Type: "t"}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Claimed) != 1 || r.Claimed[0].ID != m.ID {
		t.Fatalf("claimed %v", r.Claimed)
	}
	var reg *string
	if err := s.pool.QueryRow(ctx, "SELECT to_regclass($1)::text", schema+".bs_outbox").Scan(&reg); err != nil || reg == nil {
		t.Fatalf("table %s.bs_outbox not found: %v", schema, err)
	}
	if _, err := New(s.pool, store.Config{}, WithSchema("Bad-Schema")); err == nil {
		t.Fatal("New accepted a bad schema name")
	}
}

func TestPlainInsertGetsUUIDv7AndDefaults(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var id string
	err = s.pool.QueryRow(ctx, "INSERT INTO backstop_outbox (destination, type) VALUES ('d', 't') RETURNING id::text").Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	if id[14] != '7' || id[19] != '8' && id[19] != '9' && id[19] != 'a' && id[19] != 'b' {
		t.Fatalf("id %s is not a UUIDv7", id)
	}
	var ids []string
	rows, err := s.pool.Query(ctx, "SELECT backstop_uuidv7()::text FROM generate_series(1, 3)")
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(ids) != 3 {
		t.Fatalf("uuidv7: %v %v", ids, err)
	}
}
