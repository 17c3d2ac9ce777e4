package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// A schema a newer Backstop migrated (a version this one does not know)
// is reported at Migrate, where it passed unnoticed: an old binary after
// a rollback wrote to a schema it does not know.
func TestMigrateWarnsOfANewerSchema(t *testing.T) {
	logs := &strings.Builder{} // Migrate logs on the calling goroutine
	s, err := openTest(t, store.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "newer") {
		t.Fatalf("a warning on the schema this Backstop knows: %s", logs)
	}
	if err := execPoison(t, s, `INSERT INTO {prefix}migrations (version, name) VALUES (9999, 'from_the_future')`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate on a newer schema: %v, want it to go on (a rollback must start)", err)
	}
	if got := logs.String(); !strings.Contains(got, "schema is newer than this Backstop knows") || !strings.Contains(got, "schema_version=9999") ||
		!strings.Contains(got, "known_version=") {
		t.Fatalf("logs: %s", got)
	}
	if v, err := s.SchemaVersion(context.Background()); err != nil || v != 9999 || LatestSchemaVersion() >= 9999 || LatestSchemaVersion() < 16 {
		t.Fatalf("SchemaVersion %d %v, LatestSchemaVersion %d", v, err, LatestSchemaVersion())
	}
}
