package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/workflow/models"
)

// TaskContext is what a task's function knows about its attempt, and how
// it hands results and side effects to the engine. What it collects
// (SetResult, Enqueue, OnCommit) is written in the transaction that records
// the attempt's success, and dropped if the attempt fails: a task's side
// effects are neither lost by a crash nor written twice by a retry. Its
// methods are safe for concurrent use by the task's goroutines.
type TaskContext struct {
	dag      *DAG
	task     *Task
	runID    string
	attempt  int
	started  time.Time
	input    []byte
	results  resultView // the results of the tasks that had succeeded when the attempt started
	logger   *slog.Logger
	mu       sync.Mutex
	result   []byte
	messages []*outbox.Message
	txFuncs  []func(ctx context.Context, tx any) error
}

// RunID returns the ID of the run.
func (tc *TaskContext) RunID() string { return tc.runID }

// DAGID returns the ID of the DAG.
func (tc *TaskContext) DAGID() string { return tc.dag.id }

// TaskID returns the ID of the task.
func (tc *TaskContext) TaskID() string { return tc.task.ID }

// Attempt returns the attempt's number, from 1. Numbers go on after a
// replay from the dead-letter queue.
func (tc *TaskContext) Attempt() int { return tc.attempt }

// Logger returns the engine's logger with the run, DAG, task and attempt
// attached.
func (tc *TaskContext) Logger() *slog.Logger { return tc.logger }

// Input decodes the run's input (RunOptions.Input, stored as JSON) into v.
// It returns an error matching ErrNoResult when the run has none.
func (tc *TaskContext) Input(v any) error {
	if tc.input == nil {
		return fmt.Errorf("%w: run %s has no input", ErrNoResult, tc.runID)
	}
	return json.Unmarshal(tc.input, v)
}

// Result decodes into v the result of task taskID, as it set it with
// SetResult in its successful attempt. Every upstream task has succeeded
// by the time a task runs (except those it allows to fail), so their
// results are there; for a task that has not succeeded or set no result
// the error matches ErrNoResult.
func (tc *TaskContext) Result(taskID string, v any) error {
	b, ok := tc.results.get(taskID)
	if !ok || b == nil {
		return fmt.Errorf("%w: task %s of run %s", ErrNoResult, taskID, tc.runID)
	}
	return json.Unmarshal(b, v)
}

// SetResult records v, encoded as JSON, as the task's result, for its
// downstream tasks to read with Result. It is stored with the attempt's
// success; a later call replaces an earlier one.
func (tc *TaskContext) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("workflow: task %s result: %w", tc.task.ID, err)
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.result = b
	return nil
}

// Enqueue adds messages to write to the outbox in the transaction that
// records the attempt's success, so that they are delivered if and only if
// the task succeeded, once. Each message is validated (and given an ID)
// now; an invalid one is an error and nothing is added.
func (tc *TaskContext) Enqueue(msgs ...*outbox.Message) error {
	for _, m := range msgs {
		if err := m.Prepare(); err != nil {
			return fmt.Errorf("workflow: task %s: %w", tc.task.ID, err)
		}
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.messages = append(tc.messages, msgs...)
	return nil
}

// OnCommit registers fn to run inside the transaction that records the
// attempt's success, with that transaction: a *sql.Tx on SQLite, a pgx.Tx
// on PostgreSQL (the store packages wfsqlite and wfpostgres have typed
// helpers). An error from fn fails the attempt and rolls everything back;
// so does a panic, which is logged at ERROR and becomes the attempt's
// error.
// fn must not use the store's own methods.
func (tc *TaskContext) OnCommit(fn func(ctx context.Context, tx any) error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.txFuncs = append(tc.txFuncs, fn)
}

// Task returns the task as plain data.
func (tc *TaskContext) Task() *models.Task {
	for _, t := range tc.dag.model.Tasks {
		if t.ID == tc.task.ID {
			t.Upstream = slices.Clone(t.Upstream)
			return &t
		}
	}
	return nil
}

// TaskInstance returns the running attempt as plain data.
func (tc *TaskContext) TaskInstance() *models.TaskInstance {
	return &models.TaskInstance{ID: instanceID(tc.runID, tc.task.ID, tc.attempt), TaskID: tc.task.ID,
		DAGRunID: tc.runID, DAGID: tc.dag.id, Attempt: tc.attempt, State: models.TaskStateRunning,
		StartedAt: tc.started}
}

// DAG returns the DAG as plain data.
func (tc *TaskContext) DAG() *models.DAG { return tc.dag.Model() }

// collected returns what the attempt handed over. The OnCommit functions
// run on the driver's goroutine, inside the store's transaction: one that
// panicked took the process down, and again on every resume of the run
// (the task ran again, and so did the function). Each is wrapped so that a
// panic is its error instead, which rolls the transaction back and fails
// the attempt, and is logged at ERROR with its stack; so is an error whose
// Error, Unwrap, Is or As method panics or whose chain never ends (see
// checkError), which the driver reads on its own goroutine.
func (tc *TaskContext) collected() ([]byte, []*outbox.Message, []func(context.Context, any) error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	fns := make([]func(context.Context, any) error, len(tc.txFuncs))
	for i, fn := range tc.txFuncs {
		fns[i] = func(ctx context.Context, tx any) (err error) {
			// On a goroutine of its own, waited for: a function that calls
			// runtime.Goexit (t.FailNow in a test) ended the driver's
			// goroutine with it, which left the run running for ever and,
			// on SQLite, its write transaction open, holding every other
			// write of the database.
			returned := false
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() {
					if v := recover(); v != nil {
						returned = true
						err = fmt.Errorf("an OnCommit function panicked: %v", v)
						logPanic(ctx, tc.logger, "an OnCommit function panicked; the attempt fails", v)
					}
				}()
				if err = fn(ctx, tx); err != nil {
					checkError(err) // the driver walks its chain: see call
				}
				returned = true
			}()
			<-done
			if !returned {
				return errCommitGoexit
			}
			return err
		}
	}
	return tc.result, tc.messages, fns
}

// errCommitGoexit is the error of an OnCommit function that called
// runtime.Goexit instead of returning.
var errCommitGoexit = errors.New("an OnCommit function ended its goroutine with runtime.Goexit instead of returning")

// instanceID is the ID of one attempt at a task: run/task/attempt.
func instanceID(runID, taskID string, attempt int) string {
	return fmt.Sprintf("%s/%s/%d", runID, taskID, attempt)
}
