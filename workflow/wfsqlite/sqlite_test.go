package wfsqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow/wfsqlite"
	"github.com/backstophq/backstop/workflow/wfstore"
	"github.com/backstophq/backstop/workflow/wfstore/wfstoretest"
)

func open(t testing.TB, path string, prefix string) (*sqlite.Store, *wfsqlite.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, store.Config{TablePrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ws, err := wfsqlite.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	return st, ws
}

func TestConformance(t *testing.T) {
	t.Parallel()
	wfstoretest.Run(t, wfstoretest.Harness{New: func(t *testing.T) (wfstore.Store, func(string) int) {
		st, ws := open(t, ":memory:", "")
		return ws, func(typ string) int {
			var n int
			if err := st.DB().QueryRow(`SELECT count(*) FROM backstop_outbox WHERE type = ?`, typ).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}})
}

// Migrations are versioned in their own table and applied once: a second
// store on the same file applies nothing, and the tables carry the
// store's prefix.
func TestMigrationsAreIdempotentAndPrefixed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "wf.db")
	st, ws := open(t, path, "app_")
	applied, err := ws.Migrate(context.Background())
	if err != nil || len(applied) != 0 {
		t.Errorf("second Migrate applied %v, %v", applied, err)
	}
	_, again := open(t, path, "app_")
	if applied, _ := again.Migrate(context.Background()); len(applied) != 0 {
		t.Errorf("Migrate on a reopened file applied %v", applied)
	}
	var n int
	if err := st.DB().QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN
		('app_wf_runs', 'app_wf_tasks', 'app_wf_attempts', 'app_wf_migrations', 'app_wf_runs_abandoned')`).Scan(&n); err != nil || n != 5 {
		t.Errorf("prefixed schema objects: %d, %v", n, err)
	}
	var v int
	if err := st.DB().QueryRow(`SELECT max(version) FROM app_wf_migrations`).Scan(&v); err != nil || v != 2 {
		t.Errorf("version = %d, %v", v, err)
	}
}

// The query that finds abandoned runs uses its partial index.
func TestAbandonedUsesItsIndex(t *testing.T) {
	t.Parallel()
	st, _ := open(t, ":memory:", "")
	rows, err := st.DB().Query(`EXPLAIN QUERY PLAN SELECT id FROM backstop_wf_runs
		WHERE state = 'running' AND lease_expiry < ? ORDER BY lease_expiry, id LIMIT ?`, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	plan := ""
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan += detail + "\n"
	}
	if want := "SEARCH backstop_wf_runs USING COVERING INDEX backstop_wf_runs_abandoned (lease_expiry<?)\n"; plan != want {
		t.Errorf("plan:\n%swant:\n%s", plan, want)
	}
}
