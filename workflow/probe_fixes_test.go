package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// A replayed task that ends skipped (another task failed meanwhile under
// the fail policy) is not reported as succeeded: its entry is resolved
// saying how it ended, and it is dead-lettered again, so its failure stays
// in the queue. Its entry was resolved "succeeded on attempt 2".
func TestReplayedTaskThatEndsSkippedStaysDeadLettered(t *testing.T) {
	h := newHarness(t, workflow.Config{})
	var second atomic.Bool
	aStarted := make(chan struct{})
	h.register("two", &eh.PropagationConfig{Policy: eh.PropagationPolicyFail},
		h.task("a", func(ctx context.Context, _ *workflow.TaskContext) error {
			if !second.Load() {
				return errors.New("a broke")
			}
			close(aStarted)
			<-ctx.Done()
			return ctx.Err()
		}),
		h.task("b", func(ctx context.Context, _ *workflow.TaskContext) error {
			if !second.Load() {
				<-ctx.Done() // cancelled by a's failure
				return ctx.Err()
			}
			<-aStarted // fails while the replayed a runs
			return eh.Permanent(errors.New("b broke"))
		}),
	)
	r, _ := h.run("two", workflow.RunOptions{ID: "r-two"})
	entryID := r.Task("a").DeadLetterID
	if entryID == "" {
		t.Fatalf("a was not dead-lettered:\n%s", r.Explain())
	}
	second.Store(true)
	r, _ = h.engine.ReplayTask(h.ctx, entryID)
	if st := r.Task("a").State; st == models.TaskStateSuccess {
		t.Fatalf("a succeeded; the test wants it cancelled:\n%s", r.Explain())
	}
	e, err := h.store.DLQ().Get(h.ctx, entryID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.ResolutionNotes, "succeeded") || !strings.Contains(e.ResolutionNotes, "without succeeding") {
		t.Fatalf("a ended %s; its entry says %q", r.Task("a").State, e.ResolutionNotes)
	}
	again := r.Task("a").DeadLetterID
	if again == "" || again == entryID {
		t.Fatalf("a is not dead-lettered again (entry %q):\n%s", again, r.Explain())
	}
	if n, _ := h.store.DLQ().Get(h.ctx, again); n == nil || n.Status != "pending" {
		t.Fatalf("the new entry %q is not pending: %+v", again, n)
	}
}

// Run IDs are shared by every DAG: Start or Run with the ID of another
// DAG's run is an error, not that run (Run returned the other DAG's
// success, and this DAG's task never ran).
func TestRunIDOfAnotherDAGIsRefused(t *testing.T) {
	h := newHarness(t, workflow.Config{})
	h.register("fulfilment", nil, h.task("ship", nil))
	h.register("refund", nil, h.task("pay-back", nil))
	if _, err := h.run("fulfilment", workflow.RunOptions{ID: "order-1001"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.engine.Run(h.ctx, "refund", workflow.RunOptions{ID: "order-1001"}); !errors.Is(err, workflow.ErrRunOfAnotherDAG) {
		t.Fatalf("Run(refund, order-1001) = %v, want ErrRunOfAnotherDAG", err)
	}
	if _, err := h.engine.Start(h.ctx, "refund", workflow.RunOptions{ID: "order-1001"}); !errors.Is(err, workflow.ErrRunOfAnotherDAG) {
		t.Fatalf("Start(refund, order-1001) = %v, want ErrRunOfAnotherDAG", err)
	}
	if n := h.callsOf("pay-back"); n != 0 {
		t.Fatalf("pay-back ran %d times", n)
	}
	// The same DAG's ID stays idempotent.
	if r, err := h.engine.Run(h.ctx, "fulfilment", workflow.RunOptions{ID: "order-1001"}); err != nil || r.DAGID != "fulfilment" {
		t.Fatalf("Run(fulfilment, order-1001) again = %v, %v", r, err)
	}
}

// renewals signals each RenewRun of one engine.
type renewals struct {
	wfstore.Store
	done chan struct{}
}

func (r *renewals) RenewRun(ctx context.Context, runID string, l wfstore.Lease) error {
	err := r.Store.RenewRun(ctx, runID, l)
	r.done <- struct{}{}
	return err
}

// While the driver waits in a slow OnTaskFailure (an alert posted to a
// slow endpoint), the run's lease is still renewed: it lapsed, another
// instance took the run over and started the still-running task a second
// time at once.
func TestSlowFailureCallbackKeepsTheLease(t *testing.T) {
	base := newHarness(t, workflow.Config{})
	rn := &renewals{Store: base.store, done: make(chan struct{}, 16)}
	cfgA := workflow.Config{InstanceID: "A", LeaseDuration: 30 * time.Second, Clock: base.clock}
	a := newHarnessOn(t, base.sqlite, rn, cfgA)
	b := newHarnessOn(t, base.sqlite, base.store, workflow.Config{InstanceID: "B", LeaseDuration: 30 * time.Second, Clock: base.clock})

	var running, most atomic.Int32
	longStarted, releaseLong := make(chan struct{}), make(chan struct{})
	inCallback, releaseCallback := make(chan struct{}), make(chan struct{})
	long := func(ctx context.Context, _ *workflow.TaskContext) error {
		n := running.Add(1)
		defer running.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		if n == 1 {
			close(longStarted)
		}
		<-releaseLong // a task that finishes its side effect whatever its context says
		return nil
	}
	bad := func(context.Context, *workflow.TaskContext) error {
		<-longStarted
		return eh.Permanent(errors.New("boom"))
	}
	prop := func(slow bool) *eh.PropagationConfig {
		p := &eh.PropagationConfig{Policy: eh.PropagationPolicyAllowPartial, AllowPartialSuccess: true}
		if slow {
			p.OnTaskFailure = func(context.Context, *models.Task, *models.TaskInstance, error) error {
				close(inCallback)
				<-releaseCallback
				return nil
			}
		}
		return p
	}
	a.register("dbl", prop(true), workflow.Task{ID: "long", Run: long}, workflow.Task{ID: "bad", Run: bad})
	b.register("dbl", prop(false), workflow.Task{ID: "long", Run: long}, workflow.Task{ID: "bad", Run: bad})

	done, out := a.runAsync("dbl", workflow.RunOptions{ID: "r-dbl"})
	<-inCallback
	for range 4 { // 44 s pass, in steps, while the callback waits
		base.clock.Advance(11 * time.Second)
		select {
		case <-rn.done:
		case <-time.After(30 * time.Second): // only a hang gets here
			t.Fatal("no renewal of the lease while the callback waits")
		}
	}
	if _, err := b.engine.Resume(base.ctx, "r-dbl"); err == nil {
		t.Fatal("instance B took over the run while A, renewing, still drove it")
	}
	close(releaseCallback)
	close(releaseLong)
	<-done
	if _, err := out(); err != nil && !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("A: %v", err)
	}
	if n := most.Load(); n != 1 {
		t.Fatalf("task long ran %d times at once", n)
	}
}

// Work takes the runs it can resume, however many it cannot are ahead of
// them: 100 runs of a DAG it does not register, or of an older shape of
// one it does, filled every batch of abandoned runs, so a new run was
// never driven.
func TestWorkIsNotStarvedByRunsItCannotResume(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dagID string
	}{{"another DAG", "alien"}, {"an older shape", "etl"}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, workflow.Config{InstanceID: "main"})
			other := newHarnessOn(t, h.sqlite, h.store, workflow.Config{InstanceID: "other", Clock: h.clock})
			other.register(tc.dagID, nil, other.task("x", nil))
			for i := range 100 {
				if _, err := other.engine.Start(h.ctx, tc.dagID, workflow.RunOptions{ID: fmt.Sprintf("a-%03d", i)}); err != nil {
					t.Fatal(err)
				}
			}
			h.register("etl", nil, h.task("x", nil), h.task("y", nil, "x")) // etl's new shape
			id, err := h.engine.Start(h.ctx, "etl", workflow.RunOptions{ID: "z-new"})
			if err != nil {
				t.Fatal(err)
			}
			events := h.subscribe()
			ctx, cancel := context.WithCancel(h.ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = h.engine.Work(ctx) }() // a pass at once
			ended := make(chan workflow.Event, 1)
			go func() {
				for ev := range events {
					if ev.RunID == id && ev.RunState != "" && ev.RunState.Terminal() {
						ended <- ev
						return
					}
				}
			}()
			select {
			case ev := <-ended:
				if ev.RunState != models.RunStateSuccess {
					t.Errorf("run %s ended %s", id, ev.RunState)
				}
			case <-time.After(30 * time.Second): // only a starved Work gets here
				t.Errorf("run %s of a registered DAG was not driven by Work", id)
			}
			cancel()
			<-done
		})
	}
}

// Rows written by plain SQL that the engine never writes stop the run with
// an error naming the task, instead of hanging it or spinning: a run
// missing a task's row waited for it forever, and a running task with a
// NULL owner had the driver record it lost thousands of times a second.
func TestRunsWithRowsTheEngineNeverWrote(t *testing.T) {
	for _, tc := range []struct{ name, sql, want string }{
		{"a task's row missing", `DELETE FROM backstop_wf_tasks WHERE run_id = ? AND task_id = 'y'`, `no row for tasks ["y"]`},
		{"running with a NULL owner", `UPDATE backstop_wf_tasks SET state = 'running', attempt = 1, owner = NULL WHERE run_id = ? AND task_id = 'x'`,
			"recording it lost changes nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, workflow.Config{})
			h.register("d", nil, h.task("x", nil), h.task("y", nil, "x"))
			id, err := h.engine.Start(h.ctx, "d", workflow.RunOptions{ID: "r-bad"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.sqlite.DB().Exec(tc.sql, id); err != nil {
				t.Fatal(err)
			}
			// The deadline only catches a hang: the run must stop at once.
			ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
			defer cancel()
			_, err = h.engine.Resume(ctx, id)
			if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Resume = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
