// Package models holds the plain data of workflow runs: a DAG of tasks, one
// run of a DAG, and one attempt at running a task within it.
//
// The types carry no behaviour beyond small state predicates; the engine in
// package workflow drives them (schedules task instances, moves their
// states, applies errorhandling's propagation policies and hands failed
// tasks to the dead-letter queue), and hands them to the callbacks of
// errorhandling.PropagationConfig and to dlq.Manager.AddFailedTask. The
// package imports nothing of Backstop's, so any package may depend on it.
package models

import "time"

// DAG is a workflow: a set of tasks whose Upstream lists form a directed
// acyclic graph.
type DAG struct {
	// ID identifies the DAG; DAGRun.DAGID and Task.DAGID refer to it.
	ID string
	// Name is a human-readable name.
	Name string
	// Description says what the workflow does; optional.
	Description string
	// Tasks are the DAG's tasks, in no particular order.
	Tasks []Task
}

// Task returns the task with the given ID, and false when the DAG has none.
func (d *DAG) Task(id string) (*Task, bool) {
	for i := range d.Tasks {
		if d.Tasks[i].ID == id {
			return &d.Tasks[i], true
		}
	}
	return nil, false
}

// Task is one step of a DAG.
type Task struct {
	// ID identifies the task within its DAG.
	ID string
	// DAGID is the ID of the DAG the task belongs to.
	DAGID string
	// Retries is how many times a failed attempt is retried; 0 means the
	// task runs once.
	Retries int
	// Timeout bounds one attempt; 0 means no bound beyond the run's own.
	Timeout time.Duration
	// Critical says the task must succeed for its run to succeed, even when
	// partial success is allowed (see errorhandling.PropagationConfig).
	Critical bool
	// Upstream lists the IDs of the tasks that must succeed before this one
	// runs.
	Upstream []string
}

// TaskState is the state of a task instance.
type TaskState string

// The task states. A task instance starts pending and ends in one of the
// terminal states: success, failed, upstream_failed or skipped. Between
// attempts it is up_for_retry.
const (
	// TaskStatePending: waiting for its upstream tasks or for a worker.
	TaskStatePending TaskState = "pending"
	// TaskStateRunning: an attempt is in progress.
	TaskStateRunning TaskState = "running"
	// TaskStateUpForRetry: an attempt failed and another is scheduled.
	TaskStateUpForRetry TaskState = "up_for_retry"
	// TaskStateSuccess: an attempt succeeded.
	TaskStateSuccess TaskState = "success"
	// TaskStateFailed: the last allowed attempt failed.
	TaskStateFailed TaskState = "failed"
	// TaskStateUpstreamFailed: not run because an upstream task failed
	// (the skip_downstream and allow_partial propagation policies).
	TaskStateUpstreamFailed TaskState = "upstream_failed"
	// TaskStateSkipped: not run for another reason, such as the run being
	// stopped by the fail propagation policy.
	TaskStateSkipped TaskState = "skipped"
)

// Valid reports whether s is one of the task states.
func (s TaskState) Valid() bool {
	switch s {
	case TaskStatePending, TaskStateRunning, TaskStateUpForRetry, TaskStateSuccess, TaskStateFailed,
		TaskStateUpstreamFailed, TaskStateSkipped:
		return true
	}
	return false
}

// Terminal reports whether s is final: success, failed, upstream_failed or
// skipped.
func (s TaskState) Terminal() bool {
	switch s {
	case TaskStateSuccess, TaskStateFailed, TaskStateUpstreamFailed, TaskStateSkipped:
		return true
	}
	return false
}

// TaskInstance is one attempt at running a task within a DAG run.
type TaskInstance struct {
	// ID identifies the instance.
	ID string
	// TaskID is the ID of the task being run.
	TaskID string
	// DAGRunID is the ID of the run the instance belongs to.
	DAGRunID string
	// DAGID is the ID of the DAG, repeated for filtering.
	DAGID string
	// Attempt counts attempts from 1.
	Attempt int
	// State is the instance's state.
	State TaskState
	// StartedAt is when the attempt started; zero while pending.
	StartedAt time.Time
	// EndedAt is when the attempt ended; zero until State is terminal.
	EndedAt time.Time
	// Error is the failed attempt's error message; empty otherwise.
	Error string
}

// Duration returns how long the attempt ran: EndedAt - StartedAt, or 0
// while either is unset.
func (ti *TaskInstance) Duration() time.Duration {
	if ti.StartedAt.IsZero() || ti.EndedAt.IsZero() {
		return 0
	}
	return ti.EndedAt.Sub(ti.StartedAt)
}

// RunState is the state of a DAG run.
type RunState string

// The run states. A run starts running and ends success, failed or
// partial_success.
const (
	// RunStateRunning: tasks are still to run.
	RunStateRunning RunState = "running"
	// RunStateSuccess: every task succeeded.
	RunStateSuccess RunState = "success"
	// RunStateFailed: a critical task failed, or a task failed and partial
	// success is not allowed.
	RunStateFailed RunState = "failed"
	// RunStatePartialSuccess: some non-critical tasks failed or were
	// skipped, every critical task succeeded, and partial success is
	// allowed.
	RunStatePartialSuccess RunState = "partial_success"
)

// Valid reports whether s is one of the run states.
func (s RunState) Valid() bool {
	switch s {
	case RunStateRunning, RunStateSuccess, RunStateFailed, RunStatePartialSuccess:
		return true
	}
	return false
}

// Terminal reports whether s is final: anything but running.
func (s RunState) Terminal() bool {
	return s.Valid() && s != RunStateRunning
}

// Succeeded reports whether s is a successful end: success, or
// partial_success (every critical task succeeded and partial success was
// allowed).
func (s RunState) Succeeded() bool {
	return s == RunStateSuccess || s == RunStatePartialSuccess
}

// DAGRun is one execution of a DAG.
type DAGRun struct {
	// ID identifies the run.
	ID string
	// DAGID is the ID of the DAG being run.
	DAGID string
	// State is the run's state.
	State RunState
	// StartedAt is when the run started.
	StartedAt time.Time
	// EndedAt is when the run reached a terminal state; zero until then.
	EndedAt time.Time
}
