package admin_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// TestDLQOldestAgeIsOnTheStoresClock: the store stamps a dead letter's
// failure time with its own clock (the database's on PostgreSQL), an hour
// ahead of the admin server's here, and the entry failed two minutes ago
// by it. GET /v1/stats must say 120 s: read against the server's clock the
// age was -3599 s, and an hour too old with the clocks the other way.
func TestDLQOldestAgeIsOnTheStoresClock(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Now().Add(time.Hour).Truncate(time.Second))
			cfg := store.Config{Clock: clk}
			var st store.Store
			if kind == "sqlite" {
				s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				st = s
			} else {
				st = openPostgresWith(t, cfg)
			}
			a := newAPI(t, st)
			deadLettered(t, a, "billing", "s")
			clk.Advance(2 * time.Minute)
			s, err := a.rd.Stats(a.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.DLQDepth != 1 || s.DLQOldestAgeSecs != 120 {
				t.Fatalf("dlq depth %d, oldest age %.0f s; want 1 and 120 s (the store's clock)", s.DLQDepth, s.DLQOldestAgeSecs)
			}
		})
	}
}

// openPostgresWith is openPostgres with a store.Config.
func openPostgresWith(t *testing.T, cfg store.Config) *postgres.Store {
	t.Helper()
	testenv.PostgresAdmin(t)
	schema := testenv.NewSchema(t, "adm_")
	u := testenv.PostgresURL()
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	st, err := postgres.Open(context.Background(), u+sep+"search_path="+schema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}
