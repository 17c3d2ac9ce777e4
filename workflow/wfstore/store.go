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
//
// A lease whose expiry lies further ahead than twice the asker's TTL was
// taken before the clock it is judged on (the engine's, or the database's
// on PostgreSQL) was stepped back. Abandoned moves such a lease to one
// lease from the asker's now, keeping its holder: a live holder renews it
// (every third of a lease, on the stepped clock) and keeps its run; one
// that died before the step loses the run a lease later, where it kept
// it for the step's length (an hour's step: an hour more). The run is not
// taken at once, since its holder may be alive and not yet renewed since
// the step.
package wfstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/backstophq/backstop/dlq"
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
	// ReleaseRun gives up l.Owner's lease of a running run, so that another
	// instance may take it at once: the lease is left lapsed just before
	// l.Now (LeaseExpiry), which keeps when the run was last held (Outdated
	// reads it). Releasing a run not held is no error.
	ReleaseRun(ctx context.Context, runID string, l Lease) error
	// Load returns the run with its tasks (ordered by task ID) and its
	// attempts (ordered by task ID, then number), or ErrNotFound.
	Load(ctx context.Context, runID string) (*Snapshot, error)
	// Reload returns the run as Load does, for a reader that holds it
	// already as prev (from Load or Reload): it does not read again what
	// prev holds and the run's rows do not show to have changed. The
	// run's input, which nothing changes once the run is created, is
	// prev's; a task's result is read only when prev does not hold the
	// task at the same attempt number with a result of the same size
	// (see KnownResults), and is prev's otherwise, the same slice. The
	// engine reads its runs again at every renewal of their leases
	// (every third of a lease), so that a change made behind it is seen:
	// reading every result and the input each time, a run of 1,000
	// tasks with 1 MB results read 1 GB every 10 s.
	Reload(ctx context.Context, prev *Snapshot) (*Snapshot, error)
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
	// attempt f.Attempt started by f.Owner. An error for want of the
	// database (a connection killed or refused, a timeout) matches
	// store.ErrUnavailable: the engine then takes the attempt for lost,
	// not failed, as when the instance crashes; an error of a TxFunc on a
	// live connection must not match it.
	FinishAttempt(ctx context.Context, f *Finish) error
	// Mark moves tasks that are in one of a mark's From states to its To
	// state, with its reason and cause, while l.Owner holds the run. It
	// returns how many tasks moved; a task in another state is left
	// alone. It fails with ErrLeaseLost when l.Owner does not hold the
	// run.
	Mark(ctx context.Context, runID string, l Lease, marks []Mark) (int, error)
	// SetDeadLetter records the dead-letter entry of a failed task, while
	// l.Owner holds the running run (lapsed or not, as RenewRun): it fails
	// with ErrLeaseLost once another instance took the run over or it
	// ended, so that an instance that stalled cannot replace the entry the
	// new holder recorded.
	SetDeadLetter(ctx context.Context, runID, taskID, entryID string, l Lease) error
	// EndRun moves the run from running to state, with reason, ended at
	// l.Now, and releases its lease. It reports whether it did so: false
	// when the run had ended already or l.Owner did not hold it.
	EndRun(ctx context.Context, runID string, l Lease, state models.RunState, reason string) (bool, error)
	// Reopen takes an ended run back to running for a repair, with the
	// lease given to l.Owner: the task r.TaskID, which must be failed and
	// dead-lettered as r.EntryID, becomes pending with no failures
	// counted (its attempt numbers go on) and replay_of r.EntryID; every
	// task in state upstream_failed or skipped whose cause is r.TaskID
	// becomes pending again, and one that was dead-lettered (a replayed
	// task that ended so) is now replayed from that entry: its dead
	// letter becomes its replay_of, to be settled when the task ends
	// again. It fails with ErrConflict, changing nothing, when the run is
	// running or the task is not failed with that entry.
	Reopen(ctx context.Context, r *Reopen) error
	// Abandoned returns up to limit IDs of running runs that nobody holds
	// or whose lease lapsed before l.Now, oldest first, of the DAG shapes
	// named ("HASH:DAGID", see ShapeKey); nil names every shape. An
	// engine names the DAGs it registered: runs it cannot resume (an
	// unknown DAG, an older shape of one) took the first places of every
	// batch, and 100 of them kept it from ever taking another run. A
	// held lease further ahead than l.Now + l.StepLimit() (taken before
	// the clock was stepped back; see Leases) it moves to l.Expiry()
	// instead of returning its run.
	Abandoned(ctx context.Context, l Lease, limit int, shapes []string) ([]string, error)
	// Outdated returns up to limit IDs of running runs of the DAGs that
	// shapes name ("HASH:DAGID", see ShapeKey) whose shape is none of
	// those named: runs created before their DAG's tasks, edges or policy
	// changed. It returns only the runs nobody has driven for idle before
	// l.Now: their lease lapsed before then (or they have none), they
	// were created before then, and none of their tasks started or ended
	// since. Oldest lease first. Abandoned never returns these runs to an
	// engine that registers another shape of their DAG; left running,
	// they were never taken again once every instance had the new shape.
	Outdated(ctx context.Context, l Lease, idle time.Duration, limit int, shapes []string) ([]string, error)
	// PostponeRun keeps a running run that nobody holds (no owner, or a
	// lease lapsed before now) out of Abandoned until now + d, and leaves
	// it with no owner, so that AcquireRun can still take it at once. A
	// run that is held or has ended is left alone. Work postpones the runs
	// it cannot resume (rows it cannot read, or that it never writes):
	// left in place they took the first places of every batch of
	// Abandoned, and 100 of them kept it from ever taking a healthy run.
	PostponeRun(ctx context.Context, runID string, now time.Time, d time.Duration) error
	// DLQ is the dead-letter queue of the database the store is in.
	DLQ() dlq.Operator
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
	// ErrUnreadable: a run's stored rows hold values the store cannot
	// read back (written with plain SQL: text in a time column, an
	// infinite time, edges that are not a JSON object). Load's error
	// matches it, and is an *UnreadableError naming the row.
	ErrUnreadable = errors.New("wfstore: run's rows cannot be read")
)

// UnreadableError says which of a run's stored rows holds a value the
// store cannot read, and what: Err names the column, and usually the
// value.
type UnreadableError struct {
	// RunID is the run.
	RunID string
	// Table is the table of the row, without prefix: wf_runs, wf_tasks
	// or wf_attempts.
	Table string
	// Err is the store's error reading the row.
	Err error
}

// Error returns, for example, `run "r1": a row of wf_runs cannot be read:
// ... name "created_at": ... "yesterday" ...`.
func (e *UnreadableError) Error() string {
	return fmt.Sprintf("run %q: a row of %s cannot be read: %v", e.RunID, e.Table, e.Err)
}

// Unwrap returns ErrUnreadable and Err.
func (e *UnreadableError) Unwrap() []error { return []error{ErrUnreadable, e.Err} }

// MaxIDLen is the longest ID, in bytes, of a DAG, a task or a run.
const MaxIDLen = 255

// CheckID reports why id cannot name a DAG, a task or a run: it is longer
// than MaxIDLen, not valid UTF-8, or it holds a NUL. PostgreSQL's text keeps neither, and a
// workflow must behave the same on every store, so no store keeps such
// an ID: a lookup of one finds nothing. Other control characters are
// valid (and quoted wherever an ID is shown).
func CheckID(id string) error {
	switch {
	case len(id) > MaxIDLen:
		return fmt.Errorf("is longer than %d bytes", MaxIDLen)
	case !utf8.ValidString(id):
		return errors.New("is not valid UTF-8")
	case strings.IndexByte(id, 0) >= 0:
		return errors.New("holds a NUL byte")
	}
	return nil
}

// CheckRun reports the first ID of a run to create (its own, its DAG's or
// one of its tasks') that CheckID refuses.
func CheckRun(run *Run, tasks []string) error {
	if err := CheckID(run.ID); err != nil {
		return fmt.Errorf("run ID %q %v", run.ID, err)
	}
	if err := CheckID(run.DAGID); err != nil {
		return fmt.Errorf("DAG ID %q %v", run.DAGID, err)
	}
	for _, t := range tasks {
		if err := CheckID(t); err != nil {
			return fmt.Errorf("task ID %q %v", t, err)
		}
	}
	return nil
}

// ShapeKey names a DAG shape for Abandoned: the run's DAG hash and ID.
func ShapeKey(hash, dagID string) string { return hash + ":" + dagID }

// ShapeDAGs returns the DAG IDs of shape keys (ShapeKey), in their order.
// A DAG's hash holds no colon, so a key's DAG ID is what follows its
// first.
func ShapeDAGs(shapes []string) []string {
	out := make([]string, 0, len(shapes))
	for _, k := range shapes {
		_, dag, _ := strings.Cut(k, ":")
		out = append(out, dag)
	}
	return out
}
