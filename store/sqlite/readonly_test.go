package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestReadOnlyStore: a store opened with ReadOnly reads what is there,
// refuses every write with ErrReadOnly, and changes nothing: it neither
// creates a missing database nor migrates an old one.
func TestReadOnlyStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	s, err := Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Destination: "d", Stream: "s", Type: "t", Payload: []byte(`{}`)}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	s.Close()

	ro, err := Open(ctx, path, store.Config{}, ReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if !ro.ReadOnly() {
		t.Fatal("ReadOnly() = false on a store opened with ReadOnly")
	}
	if got, err := ro.Get(ctx, m.ID); err != nil || got.ID != m.ID {
		t.Fatalf("Get: %v, %v", got, err)
	}
	if _, err := ro.DLQ().List(ctx, nil); err != nil {
		t.Fatalf("DLQ List: %v", err)
	}
	if err := ro.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Enqueue: %v, want ErrReadOnly", err)
	}
	if _, err := ro.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("ProcessBatch: %v, want ErrReadOnly", err)
	}
	if _, err := ro.BeginTx(ctx); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("BeginTx: %v, want ErrReadOnly", err)
	}
	if got, err := ro.Get(ctx, m.ID); err != nil || got.Attempts != 0 || !got.LeaseExpiry.IsZero() {
		t.Fatalf("after the refused writes: %+v, %v; want the message untouched", got, err)
	}

	missing := filepath.Join(t.TempDir(), "missing.db")
	if _, err := Open(ctx, missing, store.Config{}, ReadOnly()); err == nil {
		t.Fatal("ReadOnly opened a database that does not exist")
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("ReadOnly created %s: %v", missing, err)
	}
}

// TestReadOnlyRefusesAnOldSchema: ReadOnly cannot migrate, so a database
// whose schema lacks a version this build needs is refused, naming it, and
// left as it was.
func TestReadOnlyRefusesAnOldSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	s, err := Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var last int
	if err := s.DB().QueryRowContext(ctx, `SELECT max(version) FROM backstop_migrations`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM backstop_migrations WHERE version = ?`, last); err != nil {
		t.Fatal(err)
	}
	s.Close()

	_, err = Open(ctx, path, store.Config{}, ReadOnly())
	if err == nil || !strings.Contains(err.Error(), "backstop migrate") {
		t.Fatalf("ReadOnly on a schema without version %d: %v, want a refusal saying to migrate", last, err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM backstop_migrations WHERE version = ?`, last).Scan(&n); err != nil || n != 0 {
		t.Fatalf("version %d applied by a read-only open (%d rows, %v)", last, n, err)
	}

	_, err = Open(ctx, filepath.Join(t.TempDir(), "other.db"), store.Config{TablePrefix: "x_"}, ReadOnly())
	if err == nil {
		t.Fatal("ReadOnly opened a database with no Backstop tables")
	}
}

// TestReadOnlyURI: a plain name's %, # and ? are escaped, so the URI
// names the file Open would; a file: URI is kept, and its file is its
// path.
func TestReadOnlyURI(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, file, uri string }{
		{"plain.db", "plain.db", "file:plain.db?mode=ro"},
		{"o#1.db", "o#1.db", "file:o%231.db?mode=ro"},
		{"o%41.db", "o%41.db", "file:o%2541.db?mode=ro"},
		{"a?b.db", "a?b.db", "file:a%3Fb.db?mode=ro"},
		{"file:/tmp/o.db", "/tmp/o.db", "file:/tmp/o.db?mode=ro"},
	} {
		if file, uri := ReadOnlyURI(c.path); file != c.file || uri != c.uri {
			t.Errorf("ReadOnlyURI(%q) = %q, %q; want %q, %q", c.path, file, uri, c.file, c.uri)
		}
	}
}
