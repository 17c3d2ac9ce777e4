package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/dlq"
	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// wantUntouched checks that a refused replay changed nothing: the run is
// still failed with its task failed and dead-lettered as entryID, and the
// entry is still pending, not marked replayed.
func wantUntouched(t *testing.T, h *harness, runID, taskID, entryID string) {
	t.Helper()
	r, err := h.engine.Get(h.ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if ts := r.Task(taskID); r.State != models.RunStateFailed || ts.State != models.TaskStateFailed || ts.DeadLetterID != entryID {
		t.Errorf("after a refused replay, run %s is %s and task %s is %s with dead letter %q; want failed, failed, %q",
			runID, r.State, taskID, ts.State, ts.DeadLetterID, entryID)
	}
	e, err := h.store.DLQ().Get(h.ctx, entryID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != dlq.StatusPending || e.Replayed {
		t.Errorf("after a refused replay, entry %s is %s (replayed %v); want pending", entryID, e.Status, e.Replayed)
	}
}

// A replay is refused before it changes anything when the DAG registered
// is not the one the run was created with: a new deploy changed its
// shape, or the entry names another DAG than its run's. The run was
// reopened first, then refused by the driver: it stayed running with
// nobody to drive it, and the entry was no longer replayable. An instance
// registering the run's shape can still replay the entry.
func TestReplayRefusesAnotherShapeBeforeReopening(t *testing.T) {
	t.Parallel()
	old := newHarness(t, workflow.Config{InstanceID: "old"})
	var fixed atomic.Bool
	old.register("etl", nil, old.task("x", func(_ context.Context, _ *workflow.TaskContext) error {
		if !fixed.Load() {
			return eh.Permanent(errBoom)
		}
		return nil
	}))
	r, err := old.run("etl", workflow.RunOptions{ID: "r1"})
	if !errors.Is(err, workflow.ErrRunFailed) || r.Task("x").DeadLetterID == "" {
		t.Fatalf("run: %v\n%s", err, r.Explain())
	}
	entry := r.Task("x").DeadLetterID

	// A new deploy: etl has a task more.
	next := newHarnessOn(t, old.sqlite, old.store, workflow.Config{InstanceID: "new", Clock: old.clock})
	next.register("etl", nil, next.task("x", nil), next.task("y", nil, "x"))
	if _, err := next.engine.ReplayTask(next.ctx, entry); !errors.Is(err, workflow.ErrDAGChanged) {
		t.Fatalf("replay with a changed DAG = %v, want ErrDAGChanged", err)
	}
	wantUntouched(t, old, "r1", "x", entry)

	// The entry names another (registered) DAG than its run's.
	next.register("other", nil, next.task("x", nil))
	if _, err := old.sqlite.DB().Exec(`UPDATE backstop_dead_letters SET dag_id = 'other' WHERE id = ?`, entry); err != nil {
		t.Fatal(err)
	}
	if _, err := next.engine.ReplayTask(next.ctx, entry); !errors.Is(err, workflow.ErrDAGChanged) {
		t.Fatalf("replay of an entry naming another DAG = %v, want ErrDAGChanged", err)
	}
	wantUntouched(t, old, "r1", "x", entry)
	if _, err := old.sqlite.DB().Exec(`UPDATE backstop_dead_letters SET dag_id = 'etl' WHERE id = ?`, entry); err != nil {
		t.Fatal(err)
	}

	// Marked replayed through the queue, the entry is left by the new
	// shape's ReplayMarked (no error on every pass), and repaired by an
	// instance that registers the old one.
	if err := old.store.DLQ().Replay(old.ctx, entry); err != nil {
		t.Fatal(err)
	}
	if runs, err := next.engine.ReplayMarked(next.ctx); err != nil || len(runs) != 0 {
		t.Fatalf("ReplayMarked with the new shape = %v, %v; want nothing done", runs, err)
	}
	fixed.Store(true)
	runs, err := old.engine.ReplayMarked(old.ctx)
	if err != nil || len(runs) != 1 || runs[0].State != models.RunStateSuccess {
		t.Fatalf("ReplayMarked with the run's shape = %v, %v; want r1 repaired", runs, err)
	}
}

// Under fail, a and b fail together. Replaying a's entry alone skips a at
// once, before a new attempt (b's failure still stops the run): a's
// failure stays in a new pending entry, which repeats its error, and the
// entry it was replayed from is resolved saying so. The new entry was the
// resolved original (same task instance), so a's failure was in no
// pending entry. Replaying b then brings a back, and a's success resolves
// its new entry too.
func TestReplayedTaskSkippedBeforeAnAttemptStaysDeadLettered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	var fixed atomic.Bool
	var meetAt chan struct{} // set before each run, read by its two attempts
	var arrived atomic.Int32
	meet := func(context.Context, *workflow.TaskContext) error {
		if fixed.Load() {
			return nil
		}
		barrier := meetAt
		if arrived.Add(1) == 2 {
			close(barrier)
		}
		<-barrier // both fail at once
		return eh.Permanent(errBoom)
	}
	h.register("two", &eh.PropagationConfig{Policy: eh.PropagationPolicyFail}, h.task("a", meet), h.task("b", meet))
	// Both fail at once; which failure the driver records first is a
	// race, and the other attempt is cancelled if the run stops before its
	// function returned. Runs go on until one ends with both failed.
	var r *workflow.Run
	for i := 0; ; i++ {
		barrier, calls := make(chan struct{}), h.callsOf("a")+h.callsOf("b")
		arrived.Store(0)
		meetAt = barrier
		r, _ = h.run("two", workflow.RunOptions{ID: fmt.Sprintf("r-two-%d", i)})
		if h.callsOf("a")+h.callsOf("b") != calls+2 {
			t.Fatalf("run %d made %d calls, want one of each task", i, h.callsOf("a")+h.callsOf("b")-calls)
		}
		if r.Task("a").State == models.TaskStateFailed && r.Task("b").State == models.TaskStateFailed {
			break
		}
		if i == 20 {
			wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateFailed})
		}
	}
	first, entryB := r.Task("a").DeadLetterID, r.Task("b").DeadLetterID
	callsA := h.callsOf("a")

	r, err := h.engine.ReplayTask(h.ctx, first)
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("replay of a while b is failed: %v", err)
	}
	a := r.Task("a")
	if a.State != models.TaskStateSkipped || a.Attempts != 1 || h.callsOf("a") != callsA {
		t.Fatalf("a after its replay: %s, %d attempts, %d more calls; want skipped before a new attempt", a.State, a.Attempts, h.callsOf("a")-callsA)
	}
	if a.DeadLetterID == "" || a.DeadLetterID == first {
		t.Fatalf("a's dead letter is %q, the entry it was replayed from is %q: its failure is in no pending entry", a.DeadLetterID, first)
	}
	again, err := h.store.DLQ().Get(h.ctx, a.DeadLetterID)
	if err != nil {
		t.Fatal(err)
	}
	if again.Status != dlq.StatusPending || !strings.HasPrefix(again.ErrorMessage, errBoom.Error()) {
		t.Errorf("a's new entry: %s, %q; want pending, with a's error", again.Status, again.ErrorMessage)
	}
	old, _ := h.store.DLQ().Get(h.ctx, first)
	if old.Status != dlq.StatusResolved || !strings.Contains(old.ResolutionNotes, "new dead letter "+again.ID) {
		t.Errorf("a's first entry: %s, %q", old.Status, old.ResolutionNotes)
	}

	fixed.Store(true)
	if r, err = h.engine.ReplayTask(h.ctx, entryB); err != nil {
		t.Fatalf("replay of b: %v\n%s", err, r.Explain())
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateSuccess, "b": models.TaskStateSuccess})
	again, _ = h.store.DLQ().Get(h.ctx, again.ID)
	if again.Status != dlq.StatusResolved || !strings.Contains(again.ResolutionNotes, "succeeded") {
		t.Errorf("a's new entry once a succeeded: %s, %q; want resolved", again.Status, again.ResolutionNotes)
	}
}
