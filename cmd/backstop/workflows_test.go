package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
)

// runETL runs, on the database db names, the DAG extract -> validate ->
// load and extract -> audit under skip_downstream, where validate fails,
// as run-1 and run-2; it returns the DAG.
func runETL(t *testing.T, db string) *workflow.DAG {
	t.Helper()
	ctx := context.Background()
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
	st, err := openStore(ctx, db, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wf, err := workflowsOf(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := workflow.NewEngine(wf.Store, workflow.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	return d
}

// forgetUpstream makes run look stored before runs kept their DAG's edges.
func forgetUpstream(t *testing.T, dbURL, run string) {
	t.Helper()
	ctx := context.Background()
	st, err := openStore(ctx, dbURL, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	switch s := st.(type) {
	case *sqlite.Store:
		_, err = s.DB().ExecContext(ctx, `UPDATE backstop_wf_runs SET upstream = NULL WHERE id = ?`, run)
	case *postgres.Store:
		_, err = s.Pool().Exec(ctx, `UPDATE backstop_wf_runs SET upstream = NULL WHERE id = $1`, run)
	default:
		t.Fatalf("store %T", st)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// taskLine returns the line of the show table that starts with the task.
func taskLine(t *testing.T, out, task string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == task {
			return f
		}
	}
	t.Fatalf("no line for task %s in:\n%s", task, out)
	return nil
}

func TestWorkflowsCLI(t *testing.T) { forEachDB(t, testWorkflowsCLI) }

func testWorkflowsCLI(t *testing.T, dbURL string) {
	d := runETL(t, dbURL)
	db := "--db=" + dbURL

	out := mustCLI(t, db, "workflows", "runs", "list", "--dag", "etl", "--state", "failed")
	if !regexp.MustCompile(`(?m)^ID\s+DAG\s+STATE`).MatchString(out) || !strings.Contains(out, "run-1") ||
		!strings.Contains(out, "run-2") || strings.Count(out, " failed ") < 2 {
		t.Errorf("runs list:\n%s", out)
	}
	if out := mustCLI(t, db, "workflows", "runs", "list", "--dag", "other"); strings.Contains(out, "run-1") {
		t.Errorf("another DAG's runs:\n%s", out)
	}
	out = mustCLI(t, db, "workflows", "runs", "list", "--limit", "1")
	if !strings.Contains(out, "(more: --cursor ") {
		t.Errorf("a page of one says there is more:\n%s", out)
	}

	// The binary knows no DAG definitions: dependencies show as each run
	// kept them, states and reasons as stored.
	out = mustCLI(t, db, "workflows", "runs", "show", "run-1")
	if !regexp.MustCompile(`(?m)^state\s+failed$`).MatchString(out) {
		t.Errorf("show: the run's state:\n%s", out)
	}
	if f := taskLine(t, out, "validate"); f[1] != "failed" || f[2] != "1" || !strings.Contains(out, "amount is negative") {
		t.Errorf("validate: %v\n%s", f, out)
	}
	if f := taskLine(t, out, "load"); f[1] != "upstream_failed" || f[2] != "0" || !strings.Contains(strings.Join(f, " "), "validate") {
		t.Errorf("load says why it did not run: %v", f)
	}
	if f := taskLine(t, out, "audit"); f[1] != "success" || f[3] != "extract" || strings.Contains(out, "upstream ?") {
		t.Errorf("audit: %v\n%s", f, out)
	}
	if f := taskLine(t, out, "extract"); f[3] != "-" {
		t.Errorf("extract, a root: %v\n%s", f, out)
	}
	// A run stored before runs kept their edges: unknown, and said so.
	forgetUpstream(t, dbURL, "run-2")
	out = mustCLI(t, db, "workflows", "runs", "show", "run-2")
	if f := taskLine(t, out, "audit"); f[3] != "?" || !strings.Contains(out, "(upstream ?: the run was stored before") {
		t.Errorf("a run without its edges: %v\n%s", f, out)
	}

	var run admin.WorkflowRun
	if err := json.Unmarshal([]byte(mustCLI(t, db, "-o", "json", "workflows", "runs", "show", "run-2")), &run); err != nil {
		t.Fatal(err)
	}
	if run.ID != "run-2" || run.State != "failed" || len(run.Tasks) != 4 {
		t.Errorf("json show: %+v", run)
	}
	var l admin.List[admin.WorkflowRun]
	if err := json.Unmarshal([]byte(mustCLI(t, db, "-o", "json", "workflows", "runs", "list")), &l); err != nil || len(l.Items) != 2 {
		t.Errorf("json list: %v %+v", err, l)
	}

	if _, err := cli(t, db, "workflows", "runs", "show", "no-such-run"); err == nil || !strings.Contains(err.Error(), "no workflow run has this id") {
		t.Errorf("unknown run: %v", err)
	}
	if _, err := cli(t, db, "workflows", "runs", "show", "bad\x00id"); err == nil || !strings.Contains(err.Error(), "without NUL") {
		t.Errorf("bad id: %v", err)
	}
	if _, err := cli(t, db, "workflows", "runs", "list", "--state", "sleeping"); err == nil || !strings.Contains(err.Error(), "state") {
		t.Errorf("bad state: %v", err)
	}

	// Against a server that knows the DAG (the API inside the
	// application): the task graph shows each task's dependencies.
	st, err := openStore(context.Background(), dbURL, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	wf, err := workflowsOf(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	wf.DAGs = []*workflow.DAG{d}
	api, err := admin.New(admin.Config{Store: st, Workflows: wf,
		Tokens: []admin.Token{{Name: "dash", Secret: "read-token-0123456789ab", Role: admin.RoleRead}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	t.Setenv("BACKSTOP_TOKEN", "read-token-0123456789ab")
	out = mustCLI(t, "--server", srv.URL, "workflows", "runs", "show", "run-1")
	t.Logf("backstop workflows runs show run-1:\n%s", out)
	for task, up := range map[string]string{"extract": "-", "validate": "extract", "load": "validate", "audit": "extract"} {
		if f := taskLine(t, out, task); f[3] != up {
			t.Errorf("%s: upstream %q, want %q\n%s", task, f[3], up, out)
		}
	}
	if strings.Contains(out, "upstream ?") {
		t.Errorf("every dependency is known here:\n%s", out)
	}
	if i, j := strings.Index(out, "\nextract"), strings.Index(out, "\nload"); i < 0 || j < i {
		t.Errorf("tasks in dependency order:\n%s", out)
	}
}
