package workflow

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// The driver reads a run from the store when it takes the run, and then
// keeps it in memory: each change it records (an attempt started or
// ended, tasks marked, a dead letter set) is applied to what it read, as
// the store applied it. Reading the whole run again after every task's
// end made a run of n tasks cost n reads of n rows: 11 s and more for a
// fan-out to 1,000 no-op tasks.
//
// While this instance holds the run's lease nobody else changes the run's
// rows, except through fenced calls that fail once the lease is lost: the
// previous holder may still record the outcome of an attempt it left
// running, until settleLost records that attempt lost. The driver reads
// the run again (stale) whenever its memory may be behind the store:
// after settling lost attempts, after a renewal of the lease (taken every
// third of Config.LeaseDuration, so that a row changed by hand is still
// seen), after a renewal it had to make because the lease had lapsed,
// when a write moved other tasks than it expected, and when a write's
// outcome is unknown.

// load reads the run's stored state, and indexes it. Once the driver has
// read the run, it reads it again with Reload: the input and the results
// it holds are not read again unless their rows show them changed. A
// renewal read every result, a gigabyte every renewal for 1,000 results of
// 1 MB.
func (dr *driver) load() error { return dr.loadWith(dr.ctx) }

// loadWith is load under ctx.
func (dr *driver) loadWith(ctx context.Context) error {
	snap, err := dr.reread(ctx, dr.snap)
	if err != nil {
		return err
	}
	dr.snap, dr.stale = snap, false
	dr.tasks = make(map[string]int, len(snap.Tasks))
	for i, t := range snap.Tasks {
		dr.tasks[t.TaskID] = i
	}
	dr.attempts = make(map[attemptKey]int, len(snap.Attempts))
	for i, a := range snap.Attempts {
		dr.attempts[attemptKey{a.TaskID, a.Number}] = i
	}
	dr.succeeded = newResultLog(snap)
	return nil
}

// resultLog holds the results of a run's tasks that succeeded, for the
// attempts the driver starts. An attempt sees the results of the tasks
// that had succeeded when it started, as a copy taken then would show,
// without the copy: copying every result at every start cost a run of n
// tasks n² map writes. Within a driver's memory a success is final (marks
// move pending and up_for_retry tasks only), so the log only grows; load
// starts a new one, and attempts started before keep the old one.
type resultLog struct {
	mu sync.RWMutex
	m  map[string]logged
	n  int // successes logged since the load
}

// logged is a result and when it was logged.
type logged struct {
	at     int
	result []byte
}

// newResultLog logs the successes of a run as read.
func newResultLog(snap *wfstore.Snapshot) *resultLog {
	l := &resultLog{m: map[string]logged{}}
	for _, t := range snap.Tasks {
		if t.State == models.TaskStateSuccess {
			l.m[t.TaskID] = logged{result: t.Result}
		}
	}
	return l
}

// add logs a task's success with its result. A task logged already keeps
// its place: an attempt that saw its result goes on seeing one.
func (l *resultLog) add(taskID string, result []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[taskID]; ok {
		l.m[taskID] = logged{at: e.at, result: result}
		return
	}
	l.n++
	l.m[taskID] = logged{at: l.n, result: result}
}

// now returns the results as they stand: later successes are not in it.
func (l *resultLog) now() resultView {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return resultView{log: l, upTo: l.n}
}

// resultView is a resultLog as it stood when an attempt started.
type resultView struct {
	log  *resultLog
	upTo int
}

// get returns the result of a task that had succeeded, and whether it had.
func (v resultView) get(taskID string) ([]byte, bool) {
	v.log.mu.RLock()
	defer v.log.mu.RUnlock()
	e, ok := v.log.m[taskID]
	if !ok || e.at > v.upTo {
		return nil, false
	}
	return e.result, true
}

// attemptKey names an attempt of a run: its task and number.
type attemptKey struct {
	taskID string
	number int
}

// task returns the known state of the run's task with the ID, or nil.
func (dr *driver) task(id string) *wfstore.Task {
	if i, ok := dr.tasks[id]; ok {
		return &dr.snap.Tasks[i]
	}
	return nil
}

// attempt returns the known attempt of a task with the number, or nil.
func (dr *driver) attempt(taskID string, number int) *wfstore.Attempt {
	if i, ok := dr.attempts[attemptKey{taskID, number}]; ok {
		return &dr.snap.Attempts[i]
	}
	return nil
}

// started applies a recorded StartAttempt.
func (dr *driver) started(taskID string, number int, l wfstore.Lease) {
	t := dr.task(taskID)
	if t == nil {
		dr.stale = true
		return
	}
	t.State, t.Attempt, t.Owner = models.TaskStateRunning, number, l.Owner
	t.StartedAt, t.EndedAt, t.NextAttemptAt, t.Reason = l.Now, time.Time{}, time.Time{}, ""
	a := wfstore.Attempt{RunID: dr.runID, TaskID: taskID, Number: number, Owner: l.Owner, StartedAt: l.Now,
		Outcome: wfstore.OutcomeRunning}
	if p := dr.attempt(taskID, number); p != nil {
		*p = a
		return
	}
	dr.attempts[attemptKey{taskID, number}] = len(dr.snap.Attempts)
	dr.snap.Attempts = append(dr.snap.Attempts, a)
}

// finished applies a recorded FinishAttempt. As in the store, the task's
// error is cleared by a success, replaced by a failure and kept
// otherwise, and its result is kept when a success returns none.
func (dr *driver) finished(f *wfstore.Finish) {
	t := dr.task(f.TaskID)
	if t == nil {
		dr.stale = true
		return
	}
	t.State, t.Failures, t.NextAttemptAt, t.Owner, t.EndedAt = f.State, f.Failures, f.NextAttemptAt, "", f.Now
	t.Reason, t.Cause = f.Reason, f.Cause
	switch f.Outcome {
	case wfstore.OutcomeSuccess:
		t.Error = ""
		if f.Result != nil {
			t.Result = f.Result
		}
	case wfstore.OutcomeFailed:
		t.Error = f.Error
	}
	if t.State == models.TaskStateSuccess {
		dr.succeeded.add(f.TaskID, t.Result)
	}
	if a := dr.attempt(f.TaskID, f.Attempt); a != nil {
		a.EndedAt, a.Outcome, a.Error = f.Now, f.Outcome, f.Error
	} else {
		dr.stale = true
	}
	if f.State == models.TaskStateFailed && dr.d.policy() == errorhandling.PropagationPolicyFail {
		// The failure that stops the run is the one that ended first,
		// by the end times as stored: the store keeps them to its own
		// precision (milliseconds on SQLite), and a later read must not
		// name another one. Under fail, few tasks fail.
		dr.stale = true
	}
}

// marked applies a recorded Mark that moved moved tasks. When the store
// moved other tasks than the known states say it would, the run changed
// behind the driver, which reads it again.
func (dr *driver) marked(marks []wfstore.Mark, moved int) {
	n := 0
	for _, m := range marks {
		t := dr.task(m.TaskID)
		if t == nil || !slices.Contains(m.From, t.State) {
			continue
		}
		t.State, t.Reason, t.Cause, t.NextAttemptAt = m.To, m.Reason, m.Cause, m.NextAttemptAt
		n++
	}
	if n != moved {
		dr.stale = true
	}
}

// deadLettered applies a recorded SetDeadLetter.
func (dr *driver) deadLettered(taskID, entryID string) {
	if t := dr.task(taskID); t != nil {
		t.DeadLetter = entryID
	}
}
