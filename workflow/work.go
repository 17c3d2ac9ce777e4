package workflow

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// abandonedBatch is how many abandoned runs one pass of Work takes at most.
const abandonedBatch = 100

// postponeUnresumable is how long Work leaves a run it could not resume
// for a reason of the run's own (its rows damaged) before it tries again.
const postponeUnresumable = 10 * time.Minute

// Work drives, until ctx ends, the runs that need an instance: runs
// created with Start, and runs whose instance stopped renewing its lease
// (it crashed or lost the database), once the lease has lapsed. Every
// PollInterval, and once at the start, it looks for those of the DAGs
// registered here, in their registered shape (runs of others are left for
// the instances that register them), and resumes them, each in its own
// goroutine; with several instances on
// one database, each run is taken by one of them. It also finishes the
// replays of workflow dead letters that were replayed through the
// dead-letter queue itself (see ReplayMarked). When ctx ends, Work waits for
// the runs it drives to stop (their attempts are interrupted, not failed)
// and returns nil.
//
// A run of another shape of a DAG registered here (created before a
// deploy changed the DAG's tasks, edges or policy) is left for the
// instances that register its shape; once nobody has driven it for
// Config.OlderShapeGrace (10 minutes), Work ends it failed with a reason
// naming the change (see Config.OlderShapeGrace).
//
// A run Work cannot resume for a reason of its own (rows written by hand
// that the store cannot read, a task's row missing) is logged at ERROR and
// left for 10 minutes before Work tries it again, so that such runs do not
// keep the healthy ones behind them waiting; Resume still takes it at
// once. A run that failed to resume for want of the database is tried
// again on the next pass.
//
// A wait between two passes that ends later than PollInterval by more than
// a third of LeaseDuration, by the wall time of Config.Clock, means that
// the clock jumped forward (or the process was paused): every lease may
// look lapsed at once, also those of runs whose instances are alive and
// have not yet renewed on the new time. For a LeaseDuration after such a
// jump Work takes over no run, logged at WARN; the replays go on.
func (e *Engine) Work(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	var hold time.Time // no run is taken over before it
	for {
		e.pass(ctx, &wg, hold)
		slept := e.cfg.Clock.Now()
		if !clock.Sleep(e.cfg.Clock, e.cfg.PollInterval, ctx.Done()) {
			return nil
		}
		now := e.cfg.Clock.Now()
		// Round(0) drops the monotonic reading: leases are wall times.
		if late := now.Round(0).Sub(slept.Round(0)) - e.cfg.PollInterval; late > e.cfg.LeaseDuration/3 {
			hold = now.Add(e.cfg.LeaseDuration)
			e.log.LogAttrs(ctx, slog.LevelWarn, clockJumpedMsg, slog.Duration("late", late),
				slog.Time("take_over_from", hold))
		}
	}
}

// clockJumpedMsg is logged (WARN) when Work finds that its clock jumped.
const clockJumpedMsg = "the clock jumped forward: runs whose leases look lapsed are not taken over for a lease, so that the instances driving them can renew"

// pass takes the abandoned runs, unless now is before hold, and the
// pending replays once.
func (e *Engine) pass(ctx context.Context, wg *sync.WaitGroup, hold time.Time) {
	l := e.lease()
	var ids []string
	var err error
	if !l.Now.Before(hold) {
		ids, err = e.st.Abandoned(ctx, l, abandonedBatch, e.shapes())
	}
	if err != nil {
		if ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "looking for abandoned runs failed", slog.String("error", err.Error()))
		}
		return
	}
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Resume(ctx, id)
			e.logResume(ctx, id, err)
		}()
	}
	if !l.Now.Before(hold) {
		e.endOutdated(ctx)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := e.ReplayMarked(ctx); err != nil && ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "finishing replays failed", slog.String("error", err.Error()))
		}
	}()
}

// shapes names the registered DAGs' shapes for Abandoned: the runs this
// engine can resume. An empty list (nothing registered) matches nothing.
func (e *Engine) shapes() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.dags))
	for id, d := range e.dags {
		out = append(out, wfstore.ShapeKey(d.hash, id))
	}
	return out
}

// logResume logs what a resume of Work came to; losing the race for a run
// to another instance is normal. A run that failed to resume for a reason
// of its own is postponed (postponeUnresumable): it would otherwise stay
// first in every batch of Abandoned, its lease never taken or released at
// once, and 100 of them kept Work from ever taking a healthy run.
func (e *Engine) logResume(ctx context.Context, runID string, err error) {
	switch {
	case err == nil, errors.Is(err, ErrRunFailed), errors.Is(err, wfstore.ErrLeased),
		errors.Is(err, ErrRunActive), errors.Is(err, ErrUnknownDAG), ctx.Err() != nil:
		return
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, wfstore.ErrLeaseLost):
		e.log.LogAttrs(ctx, slog.LevelWarn, "resuming a run failed", slog.String("run_id", runID),
			slog.String("error", err.Error()))
		return
	}
	now := e.cfg.Clock.Now()
	if perr := e.st.PostponeRun(ctx, runID, now, postponeUnresumable); perr != nil {
		err = errors.Join(err, perr)
	}
	e.log.LogAttrs(ctx, slog.LevelError, "resuming a run failed", slog.String("run_id", runID),
		slog.String("error", err.Error()), slog.Time("next_try", now.Add(postponeUnresumable)))
}

// ReplayMarked finishes the replays that the dead-letter queue started but
// cannot carry out itself: entries of registered DAGs' tasks marked
// replayed (by an operator's dlq Replay or ReplayMatching, status
// replayed) and not yet resolved, whose task is still failed with that
// entry in a run that has ended and was created with the DAG as it is
// registered. Each is repaired as ReplayTask does; the returned runs are
// those repaired, whatever their outcome. Work calls it on every pass.
func (e *Engine) ReplayMarked(ctx context.Context) ([]*Run, error) {
	e.mu.Lock()
	var dags []*DAG
	for _, d := range e.dags {
		dags = append(dags, d)
	}
	e.mu.Unlock()
	replayed := true
	var runs []*Run
	var errs []error
	for _, d := range dags {
		entries, err := e.dlq.List(ctx, &dlq.Filters{DAGID: d.id, Status: dlq.StatusReplayed, Replayed: &replayed})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, en := range entries {
			e.mu.Lock()
			settled := e.settled[en.ID]
			e.mu.Unlock()
			if settled {
				continue
			}
			awaits, never := e.awaitsReplay(ctx, en, d)
			if never {
				e.mu.Lock()
				e.settled[en.ID] = true
				e.mu.Unlock()
			}
			if !awaits {
				continue
			}
			r, err := e.ReplayTask(ctx, en.ID)
			if r != nil {
				runs = append(runs, r)
			}
			if err != nil && !errors.Is(err, ErrRunFailed) {
				errs = append(errs, err)
			}
		}
	}
	return runs, errors.Join(errs...)
}

// awaitsReplay reports whether the entry's task is still failed with it in
// a run of d, in its registered shape, that has ended. Runs of another
// shape are left for the instances that register it, as Abandoned leaves
// them: ReplayTask refuses them (ErrDAGChanged).
//
// never says that the answer is no for as long as this engine runs: the
// entry names no run or task, its run is gone, is of another shape (the
// engine's DAGs keep theirs), or has ended with the task settled otherwise
// (succeeded, or failed with a later entry). Such entries stay marked
// replayed until an operator resolves them, and every pass of Work loaded
// each one's whole run again (TestReplayMarkedLoadsAStaleEntrysRunOnce). A
// run still going, or a store that did not answer, is asked again.
func (e *Engine) awaitsReplay(ctx context.Context, en *dlq.Entry, d *DAG) (awaits, never bool) {
	if en.DAGRunID == "" || en.TaskID == "" {
		return false, true
	}
	snap, err := e.st.Load(ctx, en.DAGRunID)
	if err != nil {
		return false, errors.Is(err, wfstore.ErrNotFound)
	}
	if snap.Run.DAGID != d.id || snap.Run.DAGHash != d.hash {
		return false, true
	}
	if !snap.Run.State.Terminal() {
		return false, false
	}
	t := snap.Task(en.TaskID)
	if t != nil && t.State == models.TaskStateFailed && t.DeadLetter == en.ID {
		return true, false
	}
	return false, true
}
