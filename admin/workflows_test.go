package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfpostgres"
	"github.com/backstophq/backstop/workflow/wfsqlite"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// etlDAG is extract -> validate -> load, and extract -> audit, under
// skip_downstream; validate always fails.
func etlDAG(t testing.TB) *workflow.DAG {
	t.Helper()
	ok := func(context.Context, *workflow.TaskContext) error { return nil }
	d, err := workflow.NewDAG("etl", &eh.PropagationConfig{Policy: eh.PropagationPolicySkipDownstream},
		workflow.Task{ID: "extract", Run: ok},
		workflow.Task{ID: "validate", Upstream: []string{"extract"}, Run: func(context.Context, *workflow.TaskContext) error {
			return errors.New("row 7: amount is negative")
		}},
		workflow.Task{ID: "load", Upstream: []string{"validate"}, Run: ok},
		workflow.Task{ID: "audit", Upstream: []string{"extract"}, Run: ok},
	)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// workflowsOn opens the workflow store on st and runs the etl DAG twice
// (run IDs run-1, run-2), returning what the API reads runs from.
func workflowsOn(t testing.TB, st store.Store) *admin.Workflows {
	t.Helper()
	ctx := context.Background()
	var ws wfstore.Store
	var list admin.RunLister
	switch s := st.(type) {
	case *sqlite.Store:
		w, err := wfsqlite.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		ws, list = w, admin.SQLiteRuns(s)
	case *postgres.Store:
		w, err := wfpostgres.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		ws, list = w, admin.PostgresRuns(s, "")
	}
	d := etlDAG(t)
	eng, err := workflow.NewEngine(ws, workflow.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(d); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run-1", "run-2"} {
		if _, err := eng.Run(ctx, "etl", workflow.RunOptions{ID: id}); !errors.Is(err, workflow.ErrRunFailed) {
			t.Fatalf("run %s: want a failed run, got %v", id, err)
		}
	}
	return &admin.Workflows{Store: ws, List: list, DAGs: []*workflow.DAG{d}}
}

func TestWorkflowRuns(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		wf := workflowsOn(t, st)
		a := newAPI(t, st, func(c *admin.Config) { c.Workflows = wf })

		runs, err := a.rd.WorkflowRuns(a.ctx, url.Values{"dag_id": {"etl"}, "state": {"failed"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs.Items) != 2 || runs.Items[0].State != "failed" || runs.Items[0].DAGID != "etl" || runs.Items[0].Tasks != nil {
			t.Fatalf("list: %+v", runs)
		}
		if runs.Items[0].Reason == "" || runs.Items[0].EndedAt == nil {
			t.Errorf("a failed run says why and when it ended: %+v", runs.Items[0])
		}
		// Pages of one, newest first, then a cursor past the end.
		page, err := a.rd.WorkflowRuns(a.ctx, url.Values{"limit": {"1"}})
		if err != nil || len(page.Items) != 1 || page.NextCursor == "" {
			t.Fatalf("page 1: %+v %v", page, err)
		}
		page2, err := a.rd.WorkflowRuns(a.ctx, url.Values{"limit": {"1"}, "cursor": {page.NextCursor}})
		if err != nil || len(page2.Items) != 1 || page2.Items[0].ID == page.Items[0].ID {
			t.Fatalf("page 2: %+v %v", page2, err)
		}
		got := []string{page.Items[0].ID, page2.Items[0].ID}
		slices.Sort(got)
		if !slices.Equal(got, []string{"run-1", "run-2"}) {
			t.Errorf("pages hold %v", got)
		}
		for _, q := range []url.Values{{"state": {"sleeping"}}, {"cursor": {"no-such-run"}}, {"limit": {"-1"}},
			{"dag_id": {"etl\x00"}}, {"dag_id": {"\xff"}}, {"cursor": {"a\x00b"}}, {"dag_id": {strings.Repeat("d", 256)}}} {
			if _, err := a.rd.WorkflowRuns(a.ctx, q); !isStatus(err, http.StatusBadRequest) {
				t.Errorf("list %v: want 400, got %v", q, err)
			}
		}
		if none, err := a.rd.WorkflowRuns(a.ctx, url.Values{"dag_id": {"other"}}); err != nil || len(none.Items) != 0 {
			t.Errorf("another DAG's runs: %+v %v", none, err)
		}

		run, err := a.rd.WorkflowRun(a.ctx, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		if run.State != "failed" || len(run.Tasks) != 4 {
			t.Fatalf("run: %+v", run)
		}
		byID := map[string]admin.WorkflowTask{}
		for _, tk := range run.Tasks {
			byID[tk.ID] = tk
		}
		if tk := byID["extract"]; tk.State != "success" || tk.Attempts != 1 || tk.Reason != "" || tk.EndedAt == nil || len(tk.Upstream) != 0 {
			t.Errorf("extract: %+v", tk)
		}
		if tk := byID["validate"]; tk.State != "failed" || tk.Attempts != 1 || !strings.Contains(tk.Error, "amount is negative") ||
			tk.Reason == "" || tk.DeadLetterID == "" || !slices.Equal(tk.Upstream, []string{"extract"}) ||
			len(tk.History) != 1 || tk.History[0].Outcome != "failed" {
			t.Errorf("validate: %+v", tk)
		}
		if tk := byID["load"]; tk.State != "upstream_failed" || tk.Attempts != 0 || !strings.Contains(tk.Reason, "validate") ||
			!slices.Equal(tk.Upstream, []string{"validate"}) || tk.StartedAt != nil {
			t.Errorf("load: %+v", tk)
		}
		if tk := byID["audit"]; tk.State != "success" {
			t.Errorf("audit (an independent branch) goes on: %+v", tk)
		}
		if run.Tasks[0].ID != "extract" {
			t.Errorf("tasks in dependency order: %v", run.Tasks)
		}

		if _, err := a.rd.WorkflowRun(a.ctx, "no-such-run"); !isStatus(err, http.StatusNotFound) {
			t.Errorf("unknown run: want 404, got %v", err)
		}
		for _, id := range []string{strings.Repeat("x", 256), "\xff\xfe", "a\x00b"} {
			if _, err := a.rd.WorkflowRun(a.ctx, id); !isStatus(err, http.StatusBadRequest) {
				t.Errorf("id %q: want 400, got %v", id, err)
			}
		}
		if _, err := a.rd.WorkflowRun(a.ctx, "no\x01such"); !isStatus(err, http.StatusNotFound) {
			t.Errorf("an unknown id with a control character: want 404, got %v", err)
		}
		if _, err := a.anon.WorkflowRuns(a.ctx, nil); !isStatus(err, http.StatusUnauthorized) {
			t.Errorf("no token: want 401, got %v", err)
		}
	})
}

func TestWorkflowRunsNotEnabled(t *testing.T) {
	st, err := sqlite.Open(context.Background(), t.TempDir()+"/b.db", store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	a := newAPI(t, st)
	if _, err := a.rd.WorkflowRuns(a.ctx, nil); !isStatus(err, http.StatusNotFound) {
		t.Errorf("want 404 without a workflow store, got %v", err)
	}
	if _, err := a.rd.WorkflowRun(a.ctx, "run-1"); !isStatus(err, http.StatusNotFound) {
		t.Errorf("want 404 without a workflow store, got %v", err)
	}
}

// etlEngine is an engine on wf's store with wf's first DAG ("etl")
// registered, logging nowhere.
func etlEngine(t *testing.T, wf *admin.Workflows) *workflow.Engine {
	t.Helper()
	eng, err := workflow.NewEngine(wf.Store, workflow.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(wf.DAGs[0]); err != nil {
		t.Fatal(err)
	}
	return eng
}

// pagesOfOne lists the workflow runs a page of one at a time, following
// the cursors for at most pages pages, and returns their IDs in order.
func pagesOfOne(t *testing.T, a *api, pages int) []string {
	t.Helper()
	var ids []string
	q := url.Values{"limit": {"1"}}
	for range pages {
		page, err := a.rd.WorkflowRuns(a.ctx, q)
		if err != nil {
			t.Fatalf("page after %q: %v", ids, err)
		}
		for _, r := range page.Items {
			ids = append(ids, r.ID)
		}
		if page.NextCursor == "" {
			break
		}
		q.Set("cursor", page.NextCursor)
	}
	return ids
}

func isStatus(err error, status int) bool {
	var p *admin.Problem
	return errors.As(err, &p) && p.Status == status
}

// TestWorkflowRunsNamedWithControlCharacters: the engine accepts a run ID
// with control characters (only NUL and invalid UTF-8 are refused), so the
// API must fetch such a run and page past it: it refused both with 400
// when it asked for printable IDs, and a page ending on such a run had a
// next_cursor the API would not take back.
func TestWorkflowRunsNamedWithControlCharacters(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		wf := workflowsOn(t, st)
		eng := etlEngine(t, wf)
		odd := "run-\x1b[2J\t\u202e3"
		if _, err := eng.Start(context.Background(), "etl", workflow.RunOptions{ID: odd}); err != nil {
			t.Fatal(err)
		}
		a := newAPI(t, st, func(c *admin.Config) { c.Workflows = wf })
		run, err := a.rd.WorkflowRun(a.ctx, odd)
		if err != nil || run.ID != odd || len(run.Tasks) != 4 {
			t.Fatalf("get %q: %+v %v", odd, run, err)
		}
		seen := pagesOfOne(t, a, 4)
		slices.Sort(seen)
		want := []string{"run-1", "run-2", odd}
		slices.Sort(want)
		if !slices.Equal(seen, want) {
			t.Errorf("pages hold %q, want %q", seen, want)
		}
	})
}

// Runs may be named "." or "..": the client sent such an ID as it is, a
// path segment the server's router cleans away (a redirect to another
// path), so the client and the CLI's "workflows runs show .." could not
// show the run. It sends %2E, as it does for streams.
func TestWorkflowRunsNamedDotAndDotDot(t *testing.T) {
	st := openSQLite(t)
	wf := workflowsOn(t, st)
	eng := etlEngine(t, wf)
	a := newAPI(t, st, func(c *admin.Config) { c.Workflows = wf })
	for _, id := range []string{".", ".."} {
		if _, err := eng.Start(context.Background(), "etl", workflow.RunOptions{ID: id}); err != nil {
			t.Fatal(err)
		}
		run, err := a.rd.WorkflowRun(a.ctx, id)
		if err != nil || run.ID != id || len(run.Tasks) != 4 {
			t.Errorf("get %q: %+v %v", id, run, err)
		}
		// the query form, which the dashboard uses: a browser removes a
		// path segment "." or "..", even written %2E
		var byQuery admin.WorkflowRun
		if _, err := a.rd.Do(a.ctx, http.MethodGet, "/v1/workflows/run", url.Values{"id": {id}}, nil, &byQuery); err != nil ||
			byQuery.ID != id || len(byQuery.Tasks) != 4 {
			t.Errorf("get %q through the query: %+v %v", id, byQuery, err)
		}
	}
	for _, q := range []url.Values{{}, {"id": {""}}, {"id": {"a\x00b"}}} {
		_, err := a.rd.Do(a.ctx, http.MethodGet, "/v1/workflows/run", q, nil, nil)
		wantProblem(t, err, http.StatusBadRequest, "id")
	}
	_, err := a.rd.Do(a.ctx, http.MethodGet, "/v1/workflows/run", url.Values{"id": {"nobody"}}, nil, nil)
	wantProblem(t, err, http.StatusNotFound, "")
}

// TestWorkflowRunsListPastBadRows: rows of the runs table written by hand
// with values the stores never write (a time SQLite keeps as text, a blob
// where it keeps text, an infinite time in PostgreSQL) made GET
// /v1/workflows/runs answer 500, hiding every other run. The list reads
// past them (a time as none, text made valid) and pages through them.
func TestWorkflowRunsListPastBadRows(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		wf := workflowsOn(t, st)
		a := newAPI(t, st, func(c *admin.Config) { c.Workflows = wf })
		var err error
		switch s := st.(type) {
		case *sqlite.Store:
			for _, q := range []string{
				`INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, owner, lease_expiry, created_at)
					VALUES ('bad-lease', 'etl', 'h', 'running', 'x', 'soon', 1)`,
				`INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, created_at, ended_at)
					VALUES ('bad-times', 'etl', 'h', 'failed', 'yesterday', 'later')`,
				`INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, created_at, reason, owner)
					VALUES ('bad-text', X'FF00', 'h', 'running', 2, X'FE', 7)`,
			} {
				if _, err = s.DB().ExecContext(a.ctx, q); err != nil {
					break
				}
			}
		case *postgres.Store:
			_, err = s.Pool().Exec(a.ctx, `INSERT INTO backstop_wf_runs (id, dag_id, dag_hash, state, created_at, ended_at)
				VALUES ('bad-times', 'etl', 'h', 'failed', 'infinity', '-infinity'),
				       ('bad-created', 'etl', 'h', 'running', '-infinity', NULL)`)
		}
		if err != nil {
			t.Fatal(err)
		}
		all, err := a.rd.WorkflowRuns(a.ctx, url.Values{})
		if err != nil {
			t.Fatalf("GET /v1/workflows/runs: %v", err)
		}
		var ids []string
		for _, r := range all.Items {
			ids = append(ids, r.ID)
			if r.ID == "bad-times" && (!r.CreatedAt.IsZero() || r.EndedAt != nil) {
				t.Errorf("times that are not times are read as none: %+v", r)
			}
		}
		if !slices.Contains(ids, "run-1") || !slices.Contains(ids, "run-2") || !slices.Contains(ids, "bad-times") {
			t.Fatalf("listed %q, want the good runs and the bad rows", ids)
		}
		// Pages of one go through every row once, bad ones included.
		paged := pagesOfOne(t, a, len(ids)+1)
		if !slices.Equal(paged, ids) {
			t.Errorf("pages of one hold %q, want %q", paged, ids)
		}
	})
}
