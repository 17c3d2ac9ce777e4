package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// A schema a newer Backstop migrated is reported when the store opens
// (it passed unnoticed), and the store still opens: a rollback must start.
func TestOpenWarnsOfANewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "b.db")
	s, err := Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO backstop_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	var logs strings.Builder
	s, err = Open(ctx, path, store.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatalf("Open on a newer schema: %v", err)
	}
	s.Close()
	if got := logs.String(); !strings.Contains(got, "schema is newer than this Backstop knows") || !strings.Contains(got, "schema_version=9999") {
		t.Fatalf("logs: %q", got)
	}
}
