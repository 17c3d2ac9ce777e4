package scenarios

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// defaultPostgresURL is the server the scenarios use unless
// BACKSTOP_TEST_POSTGRES_URL names another.
const defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func postgresURL() string {
	if u := os.Getenv("BACKSTOP_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultPostgresURL
}

var (
	adminOnce sync.Once
	adminPool *pgxpool.Pool
	adminErr  error
)

// admin returns a small pool on the test server. It skips the test when
// the server is unreachable, and fails it instead under CI=true.
func admin(t *testing.T) *pgxpool.Pool {
	t.Helper()
	adminOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(postgresURL())
		if err != nil {
			adminErr = err
			return
		}
		cfg.MaxConns = 2
		if adminPool, adminErr = pgxpool.NewWithConfig(ctx, cfg); adminErr == nil {
			adminErr = adminPool.Ping(ctx)
		}
	})
	if adminErr != nil {
		msg := "PostgreSQL unreachable at " + postgresURL() + " (set BACKSTOP_TEST_POSTGRES_URL): " + adminErr.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return adminPool
}

// openPostgres opens a migrated store in a schema of its own, dropped when
// the test ends.
func openPostgres(t *testing.T, ctx context.Context, cfg store.Config) *postgres.Store {
	t.Helper()
	a := admin(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "scenario_" + hex.EncodeToString(b)
	if _, err := a.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := a.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	s, err := postgres.Open(ctx, postgresURL(), cfg, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}
