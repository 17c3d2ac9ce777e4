// Package wfstore is the contract between the workflow engine and the
// database that keeps its runs: what a workflow store must do, atomically,
// for runs to survive a crash and for two engine instances never to run the
// same task at once.
//
// The engine decides; the store records. Every decision the engine takes
// (start an attempt, record its outcome, skip a task, end the run) is one
// call, fenced so that an instance that lost a run cannot overwrite what the
// instance that took it over recorded. wfsqlite and wfpostgres implement
// Store and pass the conformance suite in wfstore/wfstoretest.
//
// # Leases
//
// A run is driven by one engine instance at a time: the one holding its
// lease (Run.Owner until Run.LeaseExpiry). The holder renews the lease while
// it drives the run; when it stops renewing (it crashed, or lost its
// database connection) another instance may take the run over with
// AcquireRun once the lease has lapsed. An attempt is recorded with the
// instance that started it and its number, and its outcome is recorded only
// if both still match: a late outcome from an instance that lost the run is
// rejected (ErrConflict) and its transaction, with any outbox messages the
// task wrote, rolls back.
package wfstore

import (
	"context"
	"errors"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/workflow/models"
)

// Store keeps workflow runs, their task instances and the history of their
// attempts. Implementations must be safe for concurrent use and, for
// shared databases, for use by many processes.
type Store interface {
	// CreateRun writes a new run in state running with one pending task
	// instance per ID of tasks. A non-empty l.Owner takes the run's lease
	// at once; an empty one leaves the run for any instance to acquire.
	// If a run with the ID exists, nothing changes and the error matches
	// ErrRunExists.
	CreateRun(ctx context.Context, run *Run, tasks []string, l Lease) error
	// AcquireRun gives l.Owner the lease of a running run that nobody
	// holds, whose lease has lapsed (LeaseExpiry before l.Now), or that
	// l.Owner holds already. It fails with ErrNotFound, ErrRunEnded, or
	// ErrLeased when another instance holds a live lease. It does not
	// touch the run's tasks: attempts left running by a previous holder
	// are for the caller to settle with FinishAttempt.
	AcquireRun(ctx context.Context, runID string, l Lease) error
	// RenewRun extends l.Owner's lease to l.Now + l.TTL, or fails with
	// ErrLeaseLost when l.Owner no longer holds the running run.
	RenewRun(ctx context.Context, runID string, l Lease) error
	// ReleaseRun gives up owner's lease of a running run, so that another
	// instance may take it at once. Releasing a run not held is no error.
	ReleaseRun(ctx context.Context, runID, owner string) error
	// Load returns the run with its tasks (ordered by task ID) and its
	// attempts (ordered by task ID, then number), or ErrNotFound.
	Load(ctx context.Context, runID string) (*Snapshot, error)
	// StartAttempt moves a pending or up_for_retry task to running as
	// attempt number attempt, owned by l.Owner, and records the attempt
	// as running. It fails with ErrConflict unless the task's last attempt
	// was attempt-1, it is pending or up_for_retry, and l.Owner holds the
	// run's lease (not lapsed at l.Now).
	StartAttempt(ctx context.Context, runID, taskID string, attempt int, l Lease) error
	// FinishAttempt records the outcome of a running attempt and the
	// task's new state in one transaction. For a success it also writes
	// f.Messages to the outbox and runs f.TxFuncs in that transaction, so
	// that they exist if and only if the success is recorded. It fails
	// with ErrConflict, changing nothing, unless the task is running
	// attempt f.Attempt started by f.Owner.
	FinishAttempt(ctx context.Context, f *Finish) error
	// Mark moves tasks that are in one of a mark's From states to its To
	// state, with its reason and cause, while l.Owner holds the run. It
	// returns how many tasks moved; a task in another state is left
	// alone. It fails with ErrLeaseLost when l.Owner does not hold the
	// run.
	Mark(ctx context.Context, runID string, l Lease, marks []Mark) (int, error)
	// SetDeadLetter records the dead-letter entry of a failed task.
	SetDeadLetter(ctx context.Context, runID, taskID, entryID string) error
	// EndRun moves the run from running to state, with reason, ended at
	// l.Now, and releases its lease. It reports whether it did so: false
	// when the run had ended already or l.Owner did not hold it.
	EndRun(ctx context.Context, runID string, l Lease, state models.RunState, reason string) (bool, error)
	// Reopen takes an ended run back to running for a repair, with the
	// lease given to l.Owner: the task r.TaskID, which must be failed and
	// dead-lettered as r.EntryID, becomes pending with no failures
	// counted (its attempt numbers go on) and replay_of r.EntryID; every
	// task in state upstream_failed or skipped whose cause is r.TaskID
	// becomes pending again. It fails with ErrConflict, changing nothing,
	// when the run is running or the task is not failed with that entry.
	Reopen(ctx context.Context, r *Reopen) error
	// Abandoned returns up to limit IDs of running runs that nobody holds
	// or whose lease lapsed before now, oldest first.
	Abandoned(ctx context.Context, now time.Time, limit int) ([]string, error)
	// DLQ is the dead-letter queue of the database the store is in.
	DLQ() dlq.Operator
}

// Lease says who acts and when: the engine instance, the time of the
// action, and for how long a lease it takes or renews.
type Lease struct {
	// Owner is the engine instance's ID.
	Owner string
	// Now is the time of the action, from the engine's clock.
	Now time.Time
	// TTL is how long a lease taken or renewed lasts.
	TTL time.Duration
}

// Expiry returns l.Now + l.TTL.
func (l Lease) Expiry() time.Time { return l.Now.Add(l.TTL) }

// Run is a stored DAG run.
type Run struct {
	// ID identifies the run.
	ID string
	// DAGID is the DAG it runs.
	DAGID string
	// DAGHash fingerprints the DAG's shape (tasks, edges, policy) when the
	// run was created, so a run is not resumed with a different DAG.
	DAGHash string
	// State is the run's state.
	State models.RunState
	// Reason says, in words, why the run ended as it did; empty while it
	// runs.
	Reason string
	// Input is the run's input, JSON; nil when none.
	Input []byte
	// Owner is the instance holding the lease; empty when none.
	Owner string
	// LeaseExpiry is when the lease lapses; zero when none.
	LeaseExpiry time.Time
	// CreatedAt is when the run was created.
	CreatedAt time.Time
	// EndedAt is when the run last ended; zero while it runs.
	EndedAt time.Time
}

// Task is a stored task instance: one task of one run.
type Task struct {
	// RunID and TaskID identify the instance.
	RunID, TaskID string
	// State is the instance's state.
	State models.TaskState
	// Attempt is the number of the last attempt started; 0 before the
	// first. Numbers go on after a replay.
	Attempt int
	// Failures counts the failed attempts that count against the task's
	// retries (lost and cancelled attempts do not); a replay resets it.
	Failures int
	// NextAttemptAt is when an up_for_retry task is due.
	NextAttemptAt time.Time
	// Owner is the instance running the current attempt.
	Owner string
	// StartedAt and EndedAt bound the last attempt.
	StartedAt, EndedAt time.Time
	// Error is the last failed attempt's error.
	Error string
	// Reason says, in words, why the task is in its state.
	Reason string
	// Cause is the ID of the failed task that made this one
	// upstream_failed or skipped.
	Cause string
	// Result is what the task's last successful attempt returned, JSON.
	Result []byte
	// DeadLetter is the ID of the dead-letter entry of a failed task.
	DeadLetter string
	// ReplayOf is the dead-letter entry the task was last replayed from.
	ReplayOf string
}

// Outcome is how one attempt ended.
type Outcome string

// The attempt outcomes.
const (
	// OutcomeRunning: the attempt has not ended.
	OutcomeRunning Outcome = "running"
	// OutcomeSuccess: the attempt succeeded.
	OutcomeSuccess Outcome = "success"
	// OutcomeFailed: the attempt failed.
	OutcomeFailed Outcome = "failed"
	// OutcomeCancelled: the run stopped while the attempt ran.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeLost: the instance running it stopped (shut down or died)
	// before it ended; it does not count as a failure.
	OutcomeLost Outcome = "lost"
)

// Attempt is one stored attempt at a task.
type Attempt struct {
	// RunID, TaskID and Number identify it.
	RunID, TaskID string
	Number        int
	// Owner is the instance that ran it.
	Owner string
	// StartedAt and EndedAt bound it; EndedAt is zero while it runs.
	StartedAt, EndedAt time.Time
	// Outcome is how it ended.
	Outcome Outcome
	// Error is a failed attempt's error, or why it was lost or cancelled.
	Error string
}

// Snapshot is a run as stored: the run, its tasks and its attempts.
type Snapshot struct {
	Run      Run
	Tasks    []Task
	Attempts []Attempt
}

// Task returns the snapshot's task with the ID, or nil.
func (s *Snapshot) Task(id string) *Task {
	for i := range s.Tasks {
		if s.Tasks[i].TaskID == id {
			return &s.Tasks[i]
		}
	}
	return nil
}

// Finish is the outcome of one attempt and the task's state after it.
type Finish struct {
	// RunID, TaskID and Attempt name the attempt; Owner is the instance
	// that started it (the fence).
	RunID, TaskID string
	Attempt       int
	Owner         string
	// Now is when it ended.
	Now time.Time
	// Outcome is how the attempt ended.
	Outcome Outcome
	// State is the task's new state.
	State models.TaskState
	// Failures is the task's failure count after the attempt.
	Failures int
	// NextAttemptAt is when an up_for_retry task is due.
	NextAttemptAt time.Time
	// Error, Reason and Cause are the task's new fields (see Task); Error
	// is also the attempt's.
	Error, Reason, Cause string
	// Result is a successful attempt's result.
	Result []byte
	// Messages are written to the outbox with a success.
	Messages []*outbox.Message
	// TxFuncs run inside the transaction that records a success, with the
	// store's transaction: a *sql.Tx for wfsqlite, a pgx.Tx for
	// wfpostgres. An error rolls everything back.
	TxFuncs []func(ctx context.Context, tx any) error
}

// Mark moves a task that is in one of From to To.
type Mark struct {
	TaskID string
	From   []models.TaskState
	To     models.TaskState
	// Reason and Cause are the task's new fields (see Task).
	Reason, Cause string
	// NextAttemptAt is set when To is up_for_retry.
	NextAttemptAt time.Time
}

// Reopen is a repair: the failed task of an ended run goes back to pending.
type Reopen struct {
	RunID, TaskID string
	// EntryID is the dead-letter entry being replayed.
	EntryID string
	// Lease is the instance that drives the run after the repair.
	Lease Lease
	// Reason is the task's new reason.
	Reason string
}

// Errors of a Store. Implementations wrap them with what they concern.
var (
	// ErrNotFound: no run has the ID.
	ErrNotFound = errors.New("wfstore: run not found")
	// ErrRunExists: a run with the ID exists already.
	ErrRunExists = errors.New("wfstore: run exists")
	// ErrRunEnded: the run is not running.
	ErrRunEnded = errors.New("wfstore: run has ended")
	// ErrLeased: another instance holds a live lease on the run.
	ErrLeased = errors.New("wfstore: run is held by another instance")
	// ErrLeaseLost: the instance no longer holds the run.
	ErrLeaseLost = errors.New("wfstore: lease lost")
	// ErrConflict: the task or run is not in the state the change
	// requires; someone else changed it first.
	ErrConflict = errors.New("wfstore: state changed by someone else")
)
