package scenarios

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

func postgresURL() string { return testenv.PostgresURL() }

// openPostgres opens a migrated store in a schema of its own, dropped when
// the test ends.
func openPostgres(t *testing.T, ctx context.Context, cfg store.Config) *postgres.Store {
	t.Helper()
	schema := testenv.NewSchema(t, "scenario_")
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
