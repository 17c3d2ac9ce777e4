package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/store/storetest"
)

// paths are the files of the stores harness opened.
var paths sync.Map

// harness opens each store on its own temporary file.
var harness = storetest.Harness{
	Open: func(t *testing.T, cfg store.Config) (store.Store, error) {
		path := filepath.Join(t.TempDir(), "backstop.db")
		s, err := sqlite.Open(context.Background(), path, cfg)
		if err != nil {
			return nil, err
		}
		paths.Store(s, path)
		t.Cleanup(func() { s.Close() })
		return s, nil
	},
	Reopen: func(t *testing.T, st store.Store, cfg store.Config) store.Store {
		path, ok := paths.Load(st)
		if !ok {
			t.Fatal("reopen: a store the harness did not open")
		}
		s, err := sqlite.Open(context.Background(), path.(string), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	},
	EnqueueTx: func(t *testing.T, st store.Store, commit bool, msgs ...*outbox.Message) error {
		s := st.(*sqlite.Store)
		ctx := context.Background()
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("BeginTx: %v", err)
		}
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS business (n INTEGER)`); err != nil {
			t.Fatalf("business write: %v", err)
		}
		if err := s.EnqueueTx(ctx, tx, msgs...); err != nil {
			_ = tx.Rollback()
			return err
		}
		if !commit {
			return tx.Rollback()
		}
		return tx.Commit()
	},
	InsertSQL: func(t *testing.T, st store.Store, destination, typ string, payload []byte) {
		s := st.(*sqlite.Store)
		q := `INSERT INTO ` + s.Config().TablePrefix + `outbox (destination, type, payload) VALUES (?, ?, ?)`
		if _, err := s.DB().ExecContext(context.Background(), q, destination, typ, payload); err != nil {
			t.Fatalf("plain insert: %v", err)
		}
	},
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness)
}

// TestConformanceIndexedStreamRead runs the claim's conformance cases with
// every stream read by the indexed read, which a claim otherwise uses only
// for a stream holding many parked messages. It must not run in parallel
// with other tests: it changes how every store of the package claims.
func TestConformanceIndexedStreamRead(t *testing.T) {
	t.Cleanup(sqlite.ReadStreamsIndexed())
	storetest.Run(t, harness)
}
