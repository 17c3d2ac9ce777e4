package wfstore

import (
	"context"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/workflow/models"
)

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

// StepLimit is how far ahead of l.Now a run's lease may expire before it
// is taken for one granted before the clock was stepped back: 2*l.TTL.
// Abandoned moves such a lease to l.Expiry() (see Leases in the package
// doc). It is 0, meaning no limit, when l.TTL is not positive.
func (l Lease) StepLimit() time.Duration {
	if l.TTL <= 0 {
		return 0
	}
	return 2 * l.TTL
}

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
	// Upstream are the DAG's edges when the run was created: each task's
	// upstream task IDs. Nil for a run stored before they were kept.
	Upstream map[string][]string
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

// KnownResults indexes the results of prev, a snapshot the caller holds,
// for Reload: by task ID, each task's attempt number and result.
type KnownResults map[string]Task

// Known returns the results of prev; nil when prev is nil.
func Known(prev *Snapshot) KnownResults {
	if prev == nil {
		return nil
	}
	k := make(KnownResults, len(prev.Tasks))
	for _, t := range prev.Tasks {
		k[t.TaskID] = Task{Attempt: t.Attempt, Result: t.Result}
	}
	return k
}

// Result returns the result k holds for a task read again at attempt with
// a stored result of size bytes (-1 when it has none), and whether it may
// stand for the stored one: k holds the task at the same attempt with a
// result of that size. Otherwise the store reads the result.
func (k KnownResults) Result(taskID string, attempt int, size int64) ([]byte, bool) {
	t, ok := k[taskID]
	if !ok || t.Attempt != attempt {
		return nil, false
	}
	if t.Result == nil {
		return nil, size < 0
	}
	return t.Result, size == int64(len(t.Result))
}
