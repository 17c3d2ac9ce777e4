package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/backstophq/backstop/workflow/models"
)

// Sentinel errors. Errors returned by the package wrap them, so test with
// errors.Is.
var (
	// ErrInvalidDAG is matched by every *DefinitionError.
	ErrInvalidDAG = errors.New("workflow: invalid DAG")
	// ErrInvalidRunID is matched by the error of Start or Run given a
	// RunOptions.ID that wfstore.CheckID refuses.
	ErrInvalidRunID = errors.New("workflow: invalid run ID")
	// ErrRunOfAnotherDAG is matched by the error of Start or Run given
	// the ID of a run of another DAG (run IDs are shared by every DAG).
	ErrRunOfAnotherDAG = errors.New("workflow: run ID belongs to another DAG")
	// ErrDuplicateTask: two tasks of a DAG share an ID.
	ErrDuplicateTask = errors.New("duplicate task ID")
	// ErrUnknownDependency: a task depends on a task the DAG does not have.
	ErrUnknownDependency = errors.New("unknown dependency")
	// ErrCycle: the dependencies form a cycle.
	ErrCycle = errors.New("dependency cycle")

	// ErrUnknownDAG: no DAG with the ID is registered with the engine.
	ErrUnknownDAG = errors.New("workflow: DAG not registered")
	// ErrDAGChanged: the registered DAG's tasks, edges or policy differ
	// from those the run was created with, so it cannot be resumed or
	// repaired by ReplayTask (which then changes nothing); or a dead
	// letter names another DAG than its run's.
	ErrDAGChanged = errors.New("workflow: DAG changed since the run was created")
	// ErrRunFailed is matched by the *RunError of a run that ended failed.
	ErrRunFailed = errors.New("workflow: run failed")
	// ErrRunActive: the run is being driven (by this engine, or, for a
	// replay, by any instance) and cannot be taken now.
	ErrRunActive = errors.New("workflow: run is active")
	// ErrNotReplayable: the dead-letter entry is not a workflow task's,
	// or its task is no longer failed with that entry.
	ErrNotReplayable = errors.New("workflow: dead letter cannot be replayed as a workflow task")
	// ErrNoResult: the task has no result (it has not succeeded, or did
	// not set one), or the run has no input.
	ErrNoResult = errors.New("workflow: no result")
	// ErrTaskTimeout is matched by the error of an attempt that ran past
	// its task's Timeout.
	ErrTaskTimeout = errors.New("workflow: task timed out")
	// ErrRunStopped is the cause of the context of an attempt cancelled
	// because the run stopped (the fail policy).
	ErrRunStopped = errors.New("workflow: run stopped")
)

// DefinitionError says what is wrong with a DAG definition. It matches
// ErrInvalidDAG and its Kind (ErrDuplicateTask, ErrUnknownDependency,
// ErrCycle, or nil for other problems).
type DefinitionError struct {
	// DAGID is the DAG's ID.
	DAGID string
	// Kind is the sentinel of the problem, nil when it has none.
	Kind error
	// Detail names what is wrong, such as "load -> stage" for an unknown
	// dependency or "a -> b -> a" for a cycle.
	Detail string
}

// Error says which DAG is wrong and how.
func (e *DefinitionError) Error() string {
	kind := "definition"
	if e.Kind != nil {
		kind = e.Kind.Error()
	}
	return fmt.Sprintf("workflow: DAG %q: %s: %s", e.DAGID, kind, e.Detail)
}

// Unwrap returns ErrInvalidDAG and the Kind.
func (e *DefinitionError) Unwrap() []error {
	if e.Kind == nil {
		return []error{ErrInvalidDAG}
	}
	return []error{ErrInvalidDAG, e.Kind}
}

func defErr(dagID string, kind error, format string, args ...any) error {
	return &DefinitionError{DAGID: dagID, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// RunError is the error of a run that ended failed. It matches
// ErrRunFailed.
type RunError struct {
	// RunID and DAGID identify the run.
	RunID, DAGID string
	// State is the run's final state.
	State models.RunState
	// Reason says why, in words.
	Reason string
}

// Error names the run and says why it failed.
func (e *RunError) Error() string {
	return fmt.Sprintf("workflow: run %s of DAG %s %s: %s", e.RunID, e.DAGID, e.State, e.Reason)
}

// Is reports whether target is ErrRunFailed.
func (e *RunError) Is(target error) bool { return target == ErrRunFailed }

// TimeoutError is the error of an attempt that ran past its task's
// Timeout. It matches ErrTaskTimeout and context.DeadlineExceeded (so
// classifiers treat it as a transient timeout) and unwraps to what the task
// returned.
type TimeoutError struct {
	// TaskID is the task that timed out.
	TaskID string
	// Timeout is the task's bound.
	Timeout time.Duration
	// Err is what the task returned once cancelled; may be nil.
	Err error
}

// Error names the task and its bound.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("task %s timed out after %s", e.TaskID, e.Timeout)
}

// Unwrap returns ErrTaskTimeout, context.DeadlineExceeded and Err.
func (e *TimeoutError) Unwrap() []error {
	errs := []error{ErrTaskTimeout, context.DeadlineExceeded}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// PanicError is the error of an attempt whose function panicked. The panic
// is recovered and the attempt fails like any other.
type PanicError struct {
	// Value is what the function panicked with.
	Value any
}

// Error says what the function panicked with.
func (e *PanicError) Error() string { return fmt.Sprintf("task panicked: %v", e.Value) }

// list joins names as "a, b and c".
func list(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
