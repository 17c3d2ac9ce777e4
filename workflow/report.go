package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/internal/termtext"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Run is a DAG run as stored at one moment: its state, why it is in it,
// and each task's state, reason and attempts.
type Run struct {
	// ID and DAGID identify the run.
	ID, DAGID string
	// State is the run's state.
	State models.RunState
	// Reason says why the run ended as it did; empty while it runs.
	Reason string
	// Owner is the instance holding the run; empty when none does.
	Owner string
	// CreatedAt is when the run was created; EndedAt when it last ended
	// (zero while it runs).
	CreatedAt, EndedAt time.Time
	// Tasks are the run's tasks in dependency order (by ID when the DAG
	// is not registered with the engine that read the run).
	Tasks []TaskStatus
}

// TaskStatus is one task of a run.
type TaskStatus struct {
	// ID is the task's ID.
	ID string
	// State is the task's state.
	State models.TaskState
	// Upstream are the tasks it depends on: the registered DAG's, else
	// those the run kept when it was created; nil when neither is known
	// (a run stored before runs kept them, read without its DAG).
	Upstream []string
	// Attempts is the number of the last attempt started (0 if none).
	Attempts int
	// Reason says, in words, why the task is in its state; empty for a
	// success. Every task that did not run or did not succeed has one.
	Reason string
	// Error is the last failed attempt's error.
	Error string
	// NextAttemptAt is when an up_for_retry task is due.
	NextAttemptAt time.Time
	// DeadLetterID is the dead-letter entry of a failed task.
	DeadLetterID string
	// ReplayedFrom is the dead-letter entry the task was last replayed
	// from, if it was.
	ReplayedFrom string
	// Result is the task's result as JSON; nil when it has none.
	Result json.RawMessage
	// History is every attempt, oldest first, replays included.
	History []Attempt
}

// Attempt is one attempt at a task.
type Attempt struct {
	// Number counts the task's attempts from 1, across replays.
	Number int
	// Instance is the engine instance that ran it.
	Instance string
	// StartedAt and EndedAt bound it; EndedAt is zero while it runs.
	StartedAt, EndedAt time.Time
	// Outcome is running, success, failed, cancelled (the run stopped) or
	// lost (the instance stopped; not counted as a failure).
	Outcome string
	// Error is why it failed, was cancelled or was lost.
	Error string
}

// newRun builds the report of a snapshot; d may be nil. A DAG registered
// in another shape than the run was created with (its tasks or edges
// changed since) is not the run's: the run is shown with the edges it kept,
// as without its DAG. With as many tasks in both shapes, the registered
// DAG's order and edges were used, and a task it does not have vanished
// from the run.
func newRun(d *DAG, snap *wfstore.Snapshot, now time.Time) *Run {
	if d != nil && d.hash != snap.Run.DAGHash {
		d = nil
	}
	r := &Run{ID: snap.Run.ID, DAGID: snap.Run.DAGID, State: snap.Run.State, Reason: snap.Run.Reason,
		Owner: snap.Run.Owner, CreatedAt: snap.Run.CreatedAt, EndedAt: snap.Run.EndedAt}
	order := make([]string, 0, len(snap.Tasks))
	for _, t := range snap.Tasks {
		order = append(order, t.TaskID)
	}
	edges := snap.Run.Upstream
	if d != nil {
		edges = d.edges()
	}
	if d != nil && len(d.order) == len(order) {
		order = d.order
	} else if edges != nil {
		order = dependencyOrder(order, edges)
	}
	// The tasks and the attempts by task ID: looked up by a pass over the
	// snapshot for each task, a report of a run of n tasks cost n² (5 s
	// for 20,000 tasks, at every Engine.Get and at the end of every Run).
	tasks := make(map[string]*wfstore.Task, len(snap.Tasks))
	for i := range snap.Tasks {
		if _, dup := tasks[snap.Tasks[i].TaskID]; !dup {
			tasks[snap.Tasks[i].TaskID] = &snap.Tasks[i]
		}
	}
	attempts := make(map[string][]Attempt, len(snap.Tasks))
	for _, a := range snap.Attempts {
		attempts[a.TaskID] = append(attempts[a.TaskID], Attempt{Number: a.Number, Instance: a.Owner,
			StartedAt: a.StartedAt, EndedAt: a.EndedAt, Outcome: string(a.Outcome), Error: a.Error})
	}
	for _, id := range order {
		t := tasks[id]
		if t == nil {
			continue
		}
		ts := TaskStatus{ID: id, State: t.State, Attempts: t.Attempt, Reason: t.Reason, Error: t.Error,
			NextAttemptAt: t.NextAttemptAt, DeadLetterID: t.DeadLetter, ReplayedFrom: t.ReplayOf}
		if edges != nil {
			ts.Upstream = append([]string{}, edges[id]...)
		}
		if t.Result != nil {
			ts.Result = json.RawMessage(slices.Clone(t.Result))
		}
		ts.History = attempts[id]
		switch t.State {
		case models.TaskStateSuccess:
			ts.Reason = ""
		case models.TaskStatePending:
			ts.Reason = pendingReason(edges, tasks, id)
		case models.TaskStateRunning:
			ts.Reason = fmt.Sprintf("running: attempt %d on instance %s since %s", t.Attempt, t.Owner,
				t.StartedAt.Format(time.RFC3339))
		}
		r.Tasks = append(r.Tasks, ts)
	}
	return r
}

// dependencyOrder orders ids so that every task comes after its upstream
// tasks, the lowest ID first among those ready (Kahn's algorithm); tasks
// left in a cycle, or after an upstream ID the run does not have, follow by
// ID.
func dependencyOrder(ids []string, edges map[string][]string) []string {
	have := make(map[string]bool, len(ids))
	for _, id := range ids {
		have[id] = true
	}
	waiting := make(map[string]int, len(ids))
	down := map[string][]string{}
	var ready []string
	for _, id := range ids {
		for _, up := range edges[id] {
			if have[up] {
				waiting[id]++
				down[up] = append(down[up], id)
			} else {
				waiting[id] = -len(ids) // never ready
			}
		}
		if waiting[id] == 0 {
			ready = append(ready, id)
		}
	}
	slices.Sort(ready)
	out := make([]string, 0, len(ids))
	placed := make(map[string]bool, len(ids))
	for len(ready) > 0 {
		id := ready[0]
		ready = ready[1:]
		out = append(out, id)
		placed[id] = true
		for _, next := range down[id] {
			if waiting[next]--; waiting[next] == 0 {
				i, _ := slices.BinarySearch(ready, next)
				ready = slices.Insert(ready, i, next)
			}
		}
	}
	rest := []string{}
	for _, id := range ids {
		if !placed[id] {
			rest = append(rest, id)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// pendingReason says what a pending task waits for, given the run's
// edges (nil when they are not known) and its tasks by ID.
func pendingReason(edges map[string][]string, tasks map[string]*wfstore.Task, id string) string {
	if edges == nil {
		return "pending"
	}
	var waiting []string
	for _, up := range edges[id] {
		if t := tasks[up]; t != nil && !t.State.Terminal() {
			waiting = append(waiting, up)
		}
	}
	if len(waiting) == 0 {
		return "pending: ready, waiting for a free worker"
	}
	return fmt.Sprintf("pending: waiting for upstream %s %s", plural(len(waiting), "task", "tasks"), list(waiting))
}

// Task returns the task with the ID, or nil.
func (r *Run) Task(id string) *TaskStatus {
	for i := range r.Tasks {
		if r.Tasks[i].ID == id {
			return &r.Tasks[i]
		}
	}
	return nil
}

// Err returns a *RunError when the run ended failed, nil otherwise.
func (r *Run) Err() error {
	if r.State != models.RunStateFailed {
		return nil
	}
	return &RunError{RunID: r.ID, DAGID: r.DAGID, State: r.State, Reason: r.Reason}
}

// Explain says in words what happened to the run: its state and why, then
// one line per task with its state and why (for a success, on which
// attempt), and the attempts of tasks tried more than once. What it
// prints of the store (IDs, reasons, errors) has its control and
// invisible characters escaped (termtext.Escape): a task's error holding
// a terminal escape sequence reached the operator's terminal as it was.
func (r *Run) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s of DAG %s: %s\n", termtext.Escape(r.ID), termtext.Escape(r.DAGID), termtext.Escape(string(r.State)))
	if r.Reason != "" {
		fmt.Fprintf(&b, "why: %s\n", termtext.Escape(r.Reason))
	} else if r.State == models.RunStateRunning && r.Owner != "" {
		fmt.Fprintf(&b, "why: running, held by instance %s\n", termtext.Escape(r.Owner))
	}
	ids, states := make([]string, len(r.Tasks)), make([]string, len(r.Tasks))
	idw, stw := 0, 0
	for i, t := range r.Tasks {
		ids[i], states[i] = termtext.Escape(t.ID), termtext.Escape(string(t.State))
		idw, stw = max(idw, utf8.RuneCountInString(ids[i])), max(stw, utf8.RuneCountInString(states[i]))
	}
	for i, t := range r.Tasks {
		fmt.Fprintf(&b, "  %-*s  %-*s  %s\n", idw, ids[i], stw, states[i], termtext.Escape(t.line()))
		if len(t.History) > 1 {
			fmt.Fprintf(&b, "  %-*s  %-*s  attempts: %s\n", idw, "", stw, "", termtext.Escape(t.history()))
		}
	}
	return b.String()
}

// line is the task's explanation.
func (t *TaskStatus) line() string {
	switch t.State {
	case models.TaskStateSuccess:
		s := fmt.Sprintf("succeeded on attempt %d", t.Attempts)
		if t.ReplayedFrom != "" {
			s += ", replayed from the dead-letter queue"
		}
		return s
	case models.TaskStateFailed:
		if t.DeadLetterID != "" {
			return fmt.Sprintf("%s; dead letter %s", t.Reason, t.DeadLetterID)
		}
	}
	return t.Reason
}

// history lists the attempts: "1 failed (boom); 2 success".
func (t *TaskStatus) history() string {
	parts := make([]string, 0, len(t.History))
	for _, a := range t.History {
		s := fmt.Sprintf("%d %s", a.Number, a.Outcome)
		if a.Error != "" {
			s += " (" + a.Error + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
