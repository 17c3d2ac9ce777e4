package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Workflows is what the API reads workflow runs from.
type Workflows struct {
	// Store keeps the runs. Required.
	Store wfstore.Store
	// List lists runs (SQLiteRuns and PostgresRuns build one). Required.
	List RunLister
	// DAGs are the definitions known to this process: a run of one of
	// them is shown with its tasks' dependencies, in dependency order,
	// and with what a pending task waits for. A run of another DAG is
	// shown with its tasks by ID and no dependencies.
	DAGs []*workflow.DAG
}

// RunFilter selects workflow runs, newest first.
type RunFilter struct {
	// DAGID and State, when not empty, keep the runs of that DAG and in
	// that state.
	DAGID, State string
	// Cursor is the ID of the last run of the previous page.
	Cursor string
	// Limit bounds the page.
	Limit int
}

// RunLister lists stored runs, newest first (by creation time, then ID).
// An unknown cursor is an error matching ErrBadCursor.
type RunLister func(ctx context.Context, f RunFilter) ([]wfstore.Run, error)

// ErrBadCursor: a list's cursor names no run.
var ErrBadCursor = errors.New("admin: cursor names no run")

// WorkflowRun is a run as the API shows it: GET /v1/workflows/runs lists
// them without tasks; GET /v1/workflows/runs/{id} shows its task graph.
type WorkflowRun struct {
	ID        string         `json:"id"`
	DAGID     string         `json:"dag_id"`
	State     string         `json:"state"`
	Reason    string         `json:"reason"`
	Owner     string         `json:"owner"`
	CreatedAt time.Time      `json:"created_at"`
	EndedAt   *time.Time     `json:"ended_at"`
	Tasks     []WorkflowTask `json:"tasks,omitempty"`
}

// WorkflowTask is one task of a run.
type WorkflowTask struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Attempts is the number of the last attempt started.
	Attempts int `json:"attempts"`
	// Upstream are the task's dependencies, from the DAG when the server
	// has it, else as the run kept them; null for a run stored before runs
	// kept them, read without its DAG.
	Upstream []string `json:"upstream"`
	// Reason says in words why the task is in its state; empty for a
	// success.
	Reason        string            `json:"reason"`
	Error         string            `json:"error"`
	NextAttemptAt *time.Time        `json:"next_attempt_at"`
	DeadLetterID  string            `json:"dead_letter_id"`
	ReplayedFrom  string            `json:"replayed_from"`
	StartedAt     *time.Time        `json:"started_at"`
	EndedAt       *time.Time        `json:"ended_at"`
	History       []WorkflowAttempt `json:"history"`
}

// WorkflowAttempt is one attempt at a task.
type WorkflowAttempt struct {
	Number    int        `json:"number"`
	Instance  string     `json:"instance"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	Outcome   string     `json:"outcome"`
	Error     string     `json:"error"`
}

// workflows is the server's reader of runs.
type workflows struct {
	eng  *workflow.Engine
	list RunLister
}

func newWorkflows(w *Workflows) (*workflows, error) {
	if w.Store == nil || w.List == nil {
		return nil, errors.New("admin: Config.Workflows needs Store and List")
	}
	eng, err := workflow.NewEngine(w.Store, workflow.Config{InstanceID: "admin-api"})
	if err != nil {
		return nil, err
	}
	if err := eng.Register(w.DAGs...); err != nil {
		return nil, fmt.Errorf("admin: Config.Workflows.DAGs: %w", err)
	}
	return &workflows{eng: eng, list: w.List}, nil
}

// runID reads the path's run ID, or answers 400.
func runID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if id == "" {
		// The query form, GET /v1/workflows/run?id=, for runs named "."
		// or "..": browsers remove such a path segment, even written %2E.
		id = r.URL.Query().Get("id")
	}
	if !validID(id) {
		badField(w, "id", "a run id is 1 to 255 bytes of UTF-8 without NUL")
		return "", false
	}
	return id, true
}

// validID reports whether s can be a run or DAG ID: not empty, and what
// the workflow stores keep (wfstore.CheckID: at most 255 bytes of UTF-8
// without NUL). Other control characters are valid IDs: a run named with
// one must still be found, and listed past.
func validID(s string) bool {
	return s != "" && wfstore.CheckID(s) == nil
}

var runStates = []string{string(models.RunStateRunning), string(models.RunStateSuccess),
	string(models.RunStateFailed), string(models.RunStatePartialSuccess)}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	if s.wf == nil {
		problem(w, http.StatusNotFound, "workflows not enabled", "this server was started without a workflow store", "")
		return
	}
	q := r.URL.Query()
	if !knownParams(w, q, "dag_id", "state", "cursor", "limit") {
		return
	}
	f := RunFilter{DAGID: q.Get("dag_id"), State: q.Get("state"), Cursor: q.Get("cursor")}
	for _, p := range [][2]string{{"dag_id", f.DAGID}, {"cursor", f.Cursor}} {
		if p[1] != "" && !validID(p[1]) {
			badField(w, p[0], p[0]+" must be 1 to 255 bytes of UTF-8 without NUL")
			return
		}
	}
	if f.State != "" && !contains(runStates, f.State) {
		badField(w, "state", "state must be one of "+strings.Join(runStates, ", "))
		return
	}
	limit, ok := limitParam(w, q.Get("limit"))
	if !ok {
		return
	}
	f.Limit = limit
	runs, err := s.wf.list(r.Context(), f)
	if errors.Is(err, ErrBadCursor) {
		badField(w, "cursor", "cursor must be a next_cursor returned by this API")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := List[WorkflowRun]{Items: make([]WorkflowRun, len(runs))}
	for i, run := range runs {
		out.Items[i] = WorkflowRun{ID: run.ID, DAGID: run.DAGID, State: string(run.State), Reason: run.Reason,
			Owner: run.Owner, CreatedAt: run.CreatedAt, EndedAt: timePtr(run.EndedAt)}
	}
	if len(runs) == limit {
		out.NextCursor = runs[len(runs)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	if s.wf == nil {
		problem(w, http.StatusNotFound, "workflows not enabled", "this server was started without a workflow store", "")
		return
	}
	id, ok := runID(w, r)
	if !ok {
		return
	}
	run, err := s.wf.eng.Get(r.Context(), id)
	if errors.Is(err, wfstore.ErrNotFound) {
		problem(w, http.StatusNotFound, "not found", "no workflow run has this id", "")
		return
	}
	var ue *wfstore.UnreadableError
	if errors.As(err, &ue) {
		// A row written with plain SQL: the list shows the run, and a
		// bare "internal error" hid what is wrong with it. The store's
		// error names the table, the column and the value; it holds no
		// SQL.
		s.cfg.Logger.Error("admin API: a workflow run's rows cannot be read", "method", r.Method, "path", r.URL.Path, "err", err)
		problem(w, http.StatusInternalServerError, "workflow run unreadable",
			outbox.CleanText(ue.Error(), maxUnreadableDetail)+"; the row holds a value the workflow stores never write (changed with plain SQL?)", "")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.wf.view(run))
}

// maxUnreadableDetail bounds, in characters, what a problem shows of an
// unreadable row's error.
const maxUnreadableDetail = 500

func (wf *workflows) view(run *workflow.Run) WorkflowRun {
	out := WorkflowRun{ID: run.ID, DAGID: run.DAGID, State: string(run.State), Reason: run.Reason, Owner: run.Owner,
		CreatedAt: run.CreatedAt, EndedAt: timePtr(run.EndedAt), Tasks: []WorkflowTask{}}
	for _, t := range run.Tasks {
		wt := WorkflowTask{ID: t.ID, State: string(t.State), Attempts: t.Attempts, Reason: t.Reason, Error: t.Error,
			NextAttemptAt: timePtr(t.NextAttemptAt), DeadLetterID: t.DeadLetterID, ReplayedFrom: t.ReplayedFrom,
			History: []WorkflowAttempt{}}
		if t.Upstream != nil {
			wt.Upstream = append([]string{}, t.Upstream...)
		}
		for _, a := range t.History {
			wt.History = append(wt.History, WorkflowAttempt{Number: a.Number, Instance: a.Instance, StartedAt: a.StartedAt,
				EndedAt: timePtr(a.EndedAt), Outcome: a.Outcome, Error: a.Error})
		}
		if n := len(t.History); n > 0 {
			last := t.History[n-1]
			wt.StartedAt, wt.EndedAt = timePtr(last.StartedAt), timePtr(last.EndedAt)
		}
		out.Tasks = append(out.Tasks, wt)
	}
	return out
}

// WorkflowRuns lists workflow runs; q may hold dag_id, state, cursor and
// limit.
func (c *Client) WorkflowRuns(ctx context.Context, q url.Values) (List[WorkflowRun], error) {
	var out List[WorkflowRun]
	_, err := c.Do(ctx, http.MethodGet, "/v1/workflows/runs", q, nil, &out)
	return out, err
}

// WorkflowRun shows a workflow run with its tasks.
func (c *Client) WorkflowRun(ctx context.Context, id string) (WorkflowRun, error) {
	var out WorkflowRun
	_, err := c.Do(ctx, http.MethodGet, "/v1/workflows/runs/"+segment(id), nil, nil, &out)
	return out, err
}
