package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// driver drives one run in this engine: it evaluates the run's states
// (read once, then kept in memory: see load), applies what follows from
// them, starts ready tasks and records their outcomes, until the run ends;
// keepLease renews the run's lease meanwhile.
type driver struct {
	e       *Engine
	d       *DAG
	runID   string
	ctx     context.Context         // the caller's: its end stops the driver
	runCtx  context.Context         // parent of the attempts' contexts
	cancel  context.CancelCauseFunc // cancels runCtx
	running map[string]*inflight    // by task ID
	results chan result
	lease   *keeper // renews the run's lease while the driver holds it
	slot    bool    // holds an attempt token won in wait
	stopped string  // under fail: the failed task whose failure cancelled the running attempts
	handled map[string]bool
	rebased map[attemptKey]bool // retries moved after the clock went back (rebaseRetries)

	// The run as the driver knows it (see load): as read, with the
	// driver's changes since applied.
	snap      *wfstore.Snapshot
	tasks     map[string]int     // index in snap.Tasks by task ID
	attempts  map[attemptKey]int // index in snap.Attempts
	stale     bool               // the store may hold changes snap lacks: read the run again
	scratch   scratch            // evaluate's, between calls
	succeeded *resultLog         // the results of the tasks that succeeded, for the attempts
}

// inflight is an attempt running in this engine.
type inflight struct {
	attempt int
	cancel  context.CancelCauseFunc
}

// drive takes the run's lease and drives it until it ends.
func (e *Engine) drive(ctx context.Context, d *DAG, runID string) (*Run, error) {
	if !e.enter(runID) {
		return nil, fmt.Errorf("%w: run %s is being driven by this engine", ErrRunActive, runID)
	}
	defer e.leave(runID)
	return e.driveEntered(ctx, d, runID)
}

// driveEntered is drive for a caller that has entered the run already.
func (e *Engine) driveEntered(ctx context.Context, d *DAG, runID string) (*Run, error) {
	l, err := e.acquire(ctx, runID)
	if err != nil {
		if errors.Is(err, wfstore.ErrRunEnded) {
			snap, lerr := e.st.Load(ctx, runID)
			if lerr != nil {
				return nil, fmt.Errorf("workflow: run %s: %w", runID, lerr)
			}
			return e.report(d, snap)
		}
		return nil, fmt.Errorf("workflow: run %s: %w", runID, err)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	dr := &driver{e: e, d: d, runID: runID, ctx: ctx, runCtx: runCtx, cancel: cancel,
		running: map[string]*inflight{}, results: make(chan result, len(d.order)), handled: map[string]bool{},
		rebased: map[attemptKey]bool{}}
	defer cancel(nil)
	dr.lease = dr.keepLease(l.Now)
	defer dr.lease.stop()
	return dr.run()
}

func (dr *driver) run() (*Run, error) {
	if err := dr.load(); err != nil {
		return dr.abort(err)
	}
	if dr.snap.Run.DAGHash != dr.d.hash {
		return dr.abort(fmt.Errorf("%w: run %s of DAG %s", ErrDAGChanged, dr.runID, dr.d.id))
	}
	if missing := dr.missingTasks(); len(missing) > 0 {
		// A task of the DAG without its row is never ready and never
		// ends: the run waited for it forever.
		return dr.abort(fmt.Errorf("workflow: run %s of DAG %s has no row for tasks %q: the run's rows are not the ones the engine wrote",
			dr.runID, dr.d.id, missing))
	}
	for {
		if err := dr.lease.err(); err != nil {
			return dr.abort(err)
		}
		if dr.runCtx.Err() != nil {
			// The driver gave the run up (dead-lettering found it lost)
			// or its caller ended: every attempt it started now would be
			// cancelled at once, recorded lost and started again.
			return dr.abort(context.Cause(dr.runCtx))
		}
		if dr.stale {
			if err := dr.load(); err != nil {
				return dr.abort(err)
			}
		}
		changed, err := dr.settleLost()
		if err != nil {
			return dr.abort(err)
		}
		if changed {
			dr.stale = true
			continue
		}
		dr.settleFailures()
		now := dr.e.cfg.Clock.Now()
		if err := dr.rebaseRetries(now); err != nil {
			return dr.abort(err)
		}
		p := evaluate(dr.d, dr.snap, now, &dr.scratch)
		if len(p.marks) > 0 {
			if err := dr.mark(p.marks); err != nil {
				return dr.abort(err)
			}
			continue
		}
		if p.stopCause != "" && dr.stopped == "" {
			dr.stopped = p.stopCause
			cause := fmt.Errorf("%w: task %s failed under fail", ErrRunStopped, p.stopCause)
			for _, f := range dr.running {
				f.cancel(cause)
			}
		}
		if p.done && len(dr.running) == 0 {
			return dr.finish(p)
		}
		blocked, err := dr.startReady(p.ready)
		if err != nil {
			return dr.abort(err)
		}
		if err := dr.wait(p.nextDue, blocked); err != nil {
			return dr.abort(err)
		}
	}
}

// missingTasks names the DAG's tasks the loaded run has no row for.
func (dr *driver) missingTasks() []string {
	have := make(map[string]bool, len(dr.snap.Tasks))
	for _, t := range dr.snap.Tasks {
		have[t.TaskID] = true
	}
	var out []string
	for _, id := range dr.d.order {
		if !have[id] {
			out = append(out, id)
		}
	}
	return out
}

// mark stores the marks of a plan and reports them.
func (dr *driver) mark(marks []wfstore.Mark) error {
	if err := dr.storeMarks(marks); err != nil {
		return err
	}
	now := dr.e.cfg.Clock.Now()
	for _, m := range marks {
		dr.e.log.LogAttrs(dr.ctx, slog.LevelInfo, "task not run", slog.String("run_id", dr.runID),
			slog.String("dag_id", dr.d.id), slog.String("task_id", m.TaskID), slog.String("state", string(m.To)),
			slog.String("reason", m.Reason))
		dr.e.emit(Event{Time: now, RunID: dr.runID, DAGID: dr.d.id, TaskID: m.TaskID, TaskState: m.To, Reason: m.Reason})
	}
	return nil
}

// startReady starts the ready tasks for which a token is free, and reports
// whether some had to wait for one.
func (dr *driver) startReady(ready []string) (blocked bool, err error) {
	for _, id := range ready {
		if _, ok := dr.running[id]; ok {
			continue
		}
		if !dr.slot {
			select {
			case dr.e.sem <- struct{}{}:
			default:
				return true, nil
			}
		}
		dr.slot = false
		if err := dr.start(id); err != nil {
			<-dr.e.sem
			return false, err
		}
	}
	return false, nil
}

// start records the next attempt of a task and runs it in a goroutine
// that holds one token.
func (dr *driver) start(id string) error {
	t := dr.task(id)
	attempt := t.Attempt + 1
	l, err := dr.startAttempt(id, attempt)
	if errors.Is(err, wfstore.ErrConflict) {
		// The lease may have lapsed while this instance was paused.
		// Renewing fails if another instance took the run over; if it
		// succeeds, nobody can now, and the attempt may start.
		var now time.Time
		if now, err = dr.renew(); err == nil {
			dr.lease.held.Store(now.UnixNano())
			dr.stale = true // the lease had lapsed: read the run again
			l, err = dr.startAttempt(id, attempt)
		}
	}
	if err != nil {
		return fmt.Errorf("workflow: run %s: %w", dr.runID, err)
	}
	dr.started(id, attempt, l)
	task := dr.d.task(id)
	tc := &TaskContext{dag: dr.d, task: task, runID: dr.runID, attempt: attempt, started: l.Now,
		input: dr.snap.Run.Input, results: dr.succeeded.now(),
		logger: dr.e.cfg.Logger.With(slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id),
			slog.String("task_id", id), slog.Int("attempt", attempt))}
	ctx, cancel := context.WithCancelCause(dr.runCtx)
	dr.running[id] = &inflight{attempt: attempt, cancel: cancel}
	dr.e.log.LogAttrs(dr.ctx, slog.LevelDebug, "task started", slog.String("run_id", dr.runID),
		slog.String("dag_id", dr.d.id), slog.String("task_id", id), slog.Int("attempt", attempt))
	dr.e.emit(Event{Time: l.Now, RunID: dr.runID, DAGID: dr.d.id, TaskID: id, Attempt: attempt,
		TaskState: models.TaskStateRunning})
	go dr.e.runAttempt(ctx, cancel, tc, dr.results)
	return nil
}

// startAttempt records the start of a task's attempt, tried again while
// the database is unavailable (whileHeld), and returns the lease it was
// recorded under. When a try's outcome was unknown and a later one is
// refused (ErrConflict), the run is read again: the attempt the first try
// started, running for this instance, is taken as started. It was taken
// for a conflict, and the driver stopped.
func (dr *driver) startAttempt(id string, attempt int) (wfstore.Lease, error) {
	var l wfstore.Lease
	retried, err := dr.whileHeld(dr.ctx, func(ctx context.Context) error {
		l = dr.e.lease()
		return dr.e.st.StartAttempt(ctx, dr.runID, id, attempt, l)
	})
	if !retried || !errors.Is(err, wfstore.ErrConflict) {
		return l, err
	}
	if still, lerr := dr.stillRunning(id, attempt, dr.e.cfg.InstanceID); lerr != nil {
		return l, errors.Join(err, lerr)
	} else if still {
		dr.stale = true // started by an earlier try, at another time
		return l, nil
	}
	return l, err
}

// wait blocks until an attempt ends, a retry falls due, the lease is
// renewed (the loop then reads the run again) or cannot be, a token frees
// up (when wantSlot), or the caller's context ends.
func (dr *driver) wait(nextDue time.Time, wantSlot bool) error {
	clk := dr.e.cfg.Clock
	var fired <-chan time.Time
	if !nextDue.IsZero() {
		if !clk.Now().Before(nextDue) {
			return nil
		}
		timer := clk.NewTimer(nextDue.Sub(clk.Now()))
		defer timer.Stop()
		fired = timer.C()
		if !clk.Now().Before(nextDue) {
			// The clock moved past nextDue while the timer was made,
			// which may then be set for later: do not wait for it.
			now := make(chan time.Time, 1)
			now <- nextDue
			fired = now
		}
	}
	var sem chan struct{}
	if wantSlot {
		sem = dr.e.sem
	}
	select {
	case r := <-dr.results:
		if err := dr.record(dr.ctx, r); err != nil {
			return err
		}
	case sem <- struct{}{}:
		dr.slot = true
	case <-fired:
	case <-dr.lease.renewed:
		dr.stale = true
	case <-dr.lease.lost:
		return dr.lease.err()
	case <-dr.ctx.Done():
		return context.Cause(dr.ctx)
	}
	return nil
}

// storeMarks stores marks while the run is held and takes what moved
// into the driver's copy of the run (marked).
func (dr *driver) storeMarks(marks []wfstore.Mark) error {
	var moved int
	_, err := dr.whileHeld(dr.ctx, func(ctx context.Context) (err error) {
		// A try whose outcome was unknown and that was recorded moves
		// nothing the second time: marked then reads the run again.
		moved, err = dr.e.st.Mark(ctx, dr.runID, dr.e.lease(), marks)
		return err
	})
	if err != nil {
		return fmt.Errorf("workflow: run %s: %w", dr.runID, err)
	}
	dr.marked(marks, moved)
	return nil
}
