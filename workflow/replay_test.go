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

// newRepairable returns a harness with extract -> validate -> load, and
// audit on its own, registered; validate fails until fixed is set.
func newRepairable(t *testing.T, prop *eh.PropagationConfig) (h *harness, fixed *atomic.Bool) {
	h, fixed = newHarness(t, workflow.Config{}), &atomic.Bool{}
	h.register("repair", prop,
		h.task("extract", nil),
		h.task("validate", func(context.Context, *workflow.TaskContext) error {
			if !fixed.Load() {
				return errors.New("row 7: amount is negative")
			}
			return nil
		}, "extract"),
		h.task("load", nil, "validate"),
		h.task("audit", nil),
	)
	return h, fixed
}

// Replaying a failed task's dead letter re-runs it, then the tasks that
// were upstream_failed because of it; the repaired run succeeds, nothing
// that succeeded runs again, the history keeps both attempts, and the
// entry ends replayed and resolved.
func TestReplayRepairsTheRun(t *testing.T) {
	t.Parallel()
	var dagFailures atomic.Int32
	prop := &eh.PropagationConfig{OnDAGFailure: func(context.Context, *models.DAGRun, error) error {
		dagFailures.Add(1)
		return nil
	}}
	h, fixed := newRepairable(t, prop)
	r, err := h.run("repair", workflow.RunOptions{ID: "r-repair"})
	if !errors.Is(err, workflow.ErrRunFailed) || r.Task("load").State != models.TaskStateUpstreamFailed {
		t.Fatalf("first run: %v\n%s", err, r.Explain())
	}
	entryID := r.Task("validate").DeadLetterID

	fixed.Store(true) // the operator fixes the data
	r, err = h.engine.ReplayTask(h.ctx, entryID)
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("ReplayTask: %v\n%s", err, r.Explain())
	}
	wantStates(t, r, map[string]models.TaskState{"extract": models.TaskStateSuccess, "validate": models.TaskStateSuccess,
		"load": models.TaskStateSuccess, "audit": models.TaskStateSuccess})
	for id, want := range map[string]int{"extract": 1, "validate": 2, "load": 1, "audit": 1} {
		if got := h.callsOf(id); got != want {
			t.Errorf("%s ran %d times, want %d", id, got, want)
		}
	}
	v := r.Task("validate")
	if len(v.History) != 2 || v.History[0].Outcome != "failed" || v.History[0].Error != "row 7: amount is negative" ||
		v.History[1].Outcome != "success" || v.ReplayedFrom != entryID || v.DeadLetterID != "" {
		t.Errorf("validate after the replay: %+v", v)
	}
	if !strings.Contains(r.Explain(), "validate  success  succeeded on attempt 2, replayed from the dead-letter queue") {
		t.Errorf("explanation:\n%s", r.Explain())
	}
	e, err := h.store.DLQ().Get(h.ctx, entryID)
	if err != nil || !e.Replayed || e.Status != dlq.StatusResolved ||
		!strings.Contains(e.ResolutionNotes, "task validate of run r-repair succeeded on attempt 2") {
		t.Errorf("entry after the replay: %+v, %v", e, err)
	}
	if dagFailures.Load() != 1 {
		t.Errorf("OnDAGFailure called %d times, want 1 (the first run only)", dagFailures.Load())
	}
	if _, err := h.engine.ReplayTask(h.ctx, entryID); !errors.Is(err, workflow.ErrNotReplayable) {
		t.Errorf("second replay of the entry: %v, want ErrNotReplayable", err)
	}
}

// A replay that fails again dead-letters the task anew; the old entry is
// resolved with a note naming the new one, which can be replayed in turn.
func TestReplayThatFailsAgain(t *testing.T) {
	t.Parallel()
	h, fixed := newRepairable(t, nil)
	r, _ := h.run("repair", workflow.RunOptions{})
	first := r.Task("validate").DeadLetterID
	r, err := h.engine.ReplayTask(h.ctx, first)
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("replay of a task still broken: %v", err)
	}
	second := r.Task("validate").DeadLetterID
	if second == "" || second == first || r.Task("validate").Attempts != 2 {
		t.Fatalf("validate after a failed replay: %+v", r.Task("validate"))
	}
	old, _ := h.store.DLQ().Get(h.ctx, first)
	if old.Status != dlq.StatusResolved || !strings.Contains(old.ResolutionNotes, "failed again on attempt 2; new dead letter "+second) {
		t.Errorf("old entry: %+v", old)
	}
	fixed.Store(true)
	if r, err = h.engine.ReplayTask(h.ctx, second); err != nil || r.Task("validate").Attempts != 3 {
		t.Errorf("replay of the new entry: %v", err)
	}
}

// Under fail, the tasks the failure skipped come back with the replay.
func TestReplayUnderFailPolicy(t *testing.T) {
	t.Parallel()
	h, fixed := newRepairable(t, &eh.PropagationConfig{Policy: eh.PropagationPolicyFail})
	r, _ := h.run("repair", workflow.RunOptions{})
	if r.Task("load").State != models.TaskStateSkipped {
		t.Fatalf("load is %s", r.Task("load").State)
	}
	fixed.Store(true)
	if r, err := h.engine.ReplayTask(h.ctx, r.Task("validate").DeadLetterID); err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("replay: %v", err)
	}
}

// An operator who replays a workflow dead letter through the dead-letter
// queue itself (which only marks it) gets the repair from ReplayMarked,
// which Work runs on every pass.
func TestReplayMarkedFinishesQueueReplays(t *testing.T) {
	t.Parallel()
	h, fixed := newRepairable(t, nil)
	r, _ := h.run("repair", workflow.RunOptions{ID: "r-marked"})
	fixed.Store(true)
	if _, err := h.store.DLQ().ReplayMatching(h.ctx, &dlq.Filters{DAGID: "repair"}, false); err != nil {
		t.Fatal(err)
	}
	runs, err := h.engine.ReplayMarked(h.ctx)
	if err != nil || len(runs) != 1 || runs[0].ID != "r-marked" || runs[0].State != models.RunStateSuccess {
		t.Fatalf("ReplayMarked = %v, %v", runs, err)
	}
	e, _ := h.store.DLQ().Get(h.ctx, r.Task("validate").DeadLetterID)
	if e.Status != dlq.StatusResolved {
		t.Errorf("entry status %s", e.Status)
	}
	if runs, err := h.engine.ReplayMarked(h.ctx); err != nil || len(runs) != 0 {
		t.Errorf("second ReplayMarked = %v, %v; want nothing to do", runs, err)
	}
}

func TestReplayRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	msg := &dlq.Entry{MessageID: "0192f0c4-0000-7000-8000-000000000001", Destination: "billing", Type: "x"}
	if err := h.store.DLQ().Add(h.ctx, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := h.engine.ReplayTask(h.ctx, msg.ID); !errors.Is(err, workflow.ErrNotReplayable) {
		t.Errorf("replaying a message's entry: %v, want ErrNotReplayable", err)
	}
	if _, err := h.engine.ReplayTask(h.ctx, "no-such-entry"); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("replaying an unknown entry: %v, want dlq.ErrNotFound", err)
	}

	// While the run still runs (another branch is busy), its dead letter
	// cannot be replayed yet.
	added := make(chan string, 1)
	h.engine.DeadLetters().OnEntryAdded(func(e *dlq.Entry) { added <- e.ID })
	release := make(chan struct{})
	h.register("busy", nil, h.task("bad", fail(errBoom)),
		h.task("long", func(context.Context, *workflow.TaskContext) error { <-release; return nil }))
	_, out := h.runAsync("busy", workflow.RunOptions{})
	id := <-added
	if _, err := h.engine.ReplayTask(h.ctx, id); !errors.Is(err, workflow.ErrRunActive) {
		t.Errorf("replay during the run: %v, want ErrRunActive", err)
	}
	close(release)
	out()
}

// A workflow entry marked replayed that ReplayMarked can never act on (its
// run is gone, say, swept after its retention) stays marked until an
// operator resolves it. Work calls ReplayMarked on every pass, and every
// pass loaded each such entry's whole run again: 50 stale entries, 50
// loads a pass, for as long as the engine ran. They are loaded once.
func TestReplayMarkedLoadsAStaleEntrysRunOnce(t *testing.T) {
	t.Parallel()
	base := newHarness(t, workflow.Config{})
	counted := &loads{Store: base.store}
	h := newHarnessOn(t, base.sqlite, counted, workflow.Config{Clock: base.clock, Logger: quiet})
	h.register("repair", nil, h.task("extract", nil), h.task("validate", nil, "extract"))
	const stale = 50
	for i := range stale {
		if err := h.store.DLQ().Add(h.ctx, &dlq.Entry{DAGID: "repair", DAGRunID: fmt.Sprint("swept-", i),
			TaskID: "validate", TaskInstanceID: fmt.Sprint("swept-", i, "/validate")}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := h.store.DLQ().ReplayMatching(h.ctx, &dlq.Filters{DAGID: "repair"}, false); err != nil || len(n) != stale {
		t.Fatalf("marked %d replayed, %v; want %d", len(n), err, stale)
	}
	for pass := range 3 {
		before := counted.n.Load()
		if runs, err := h.engine.ReplayMarked(h.ctx); err != nil || len(runs) != 0 {
			t.Fatalf("pass %d: ReplayMarked = %v, %v; want nothing done", pass, runs, err)
		}
		loaded := counted.n.Load() - before
		want := int64(0)
		if pass == 0 {
			want = stale
		}
		if loaded != want {
			t.Errorf("pass %d loaded %d runs for %d stale entries, want %d", pass, loaded, stale, want)
		}
	}
}
