package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// TestWorkflowRunWithUnreadableRow: GET /v1/workflows/runs/{id} of a
// run whose row was written by hand with values the stores never write (a
// time SQLite keeps as text, an infinite PostgreSQL time, edges that are
// not JSON) answered a bare 500 "internal error", though the list shows
// the run. It now answers a problem that says the run's stored row cannot
// be read, and what in it.
func TestWorkflowRunWithUnreadableRow(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		wf := workflowsOn(t, st)
		a := newAPI(t, st, func(c *admin.Config) { c.Workflows = wf })
		var err error
		var want map[string]string // run ID -> what the detail names
		switch s := st.(type) {
		case *sqlite.Store:
			want = map[string]string{"bad-lease": "lease_expiry", "bad-times": "created_at", "bad-edges": "upstream",
				"run-2": "next_attempt_at"}
			for _, q := range []string{
				`UPDATE backstop_wf_tasks SET next_attempt_at = 'later' WHERE run_id = 'run-2' AND task_id = 'load'`,
				`INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, owner, lease_expiry, created_at)
					VALUES ('bad-lease', 'etl', 'h', 'running', 'x', 'soon', 1)`,
				`INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, created_at, ended_at)
					VALUES ('bad-times', 'etl', 'h', 'failed', 'yesterday', 'later')`,
				`INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, created_at, upstream)
					VALUES ('bad-edges', 'etl', 'h', 'failed', 1, 'not json')`,
			} {
				if _, err = s.DB().ExecContext(a.ctx, q); err != nil {
					break
				}
			}
		case *postgres.Store:
			want = map[string]string{"bad-times": "created_at", "bad-edges": "upstream", "run-2": "ended_at"}
			if _, err = s.Pool().Exec(a.ctx, `UPDATE backstop_wf_tasks SET ended_at = 'infinity' WHERE run_id = 'run-2' AND task_id = 'load'`); err != nil {
				t.Fatal(err)
			}
			_, err = s.Pool().Exec(a.ctx, `INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, created_at, ended_at, upstream)
				VALUES ('bad-times', 'etl', 'h', 'failed', 'infinity', '-infinity', NULL),
				       ('bad-edges', 'etl', 'h', 'failed', now(), NULL, '[1, 2]')`)
		}
		if err != nil {
			t.Fatal(err)
		}
		for id, col := range want {
			_, err := a.rd.WorkflowRun(a.ctx, id)
			p := wantProblem(t, err, http.StatusInternalServerError, "")
			if p.Title == "internal error" || !strings.Contains(p.Detail, id) || !strings.Contains(p.Detail, col) {
				t.Errorf("GET run %s: problem %+v, want one that says its row cannot be read, naming %s", id, p, col)
			}
		}
		if r, err := a.rd.WorkflowRun(a.ctx, "run-1"); err != nil || len(r.Tasks) != 4 {
			t.Errorf("GET run-1: %+v, %v", r, err)
		}
	})
}
