package workflow_test

import (
	"errors"
	"testing"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// A dead letter an operator resolved is "dealt with and closed; it can no
// longer be replayed" (dlq.StatusResolved), and the queue's own Replay
// refuses it (dlq.ErrResolved). Engine.ReplayTask did not look at the
// entry's status: it ran the task again, then its downstream tasks, and
// the run an operator had closed (say, "refunded by hand; do not charge
// again") went on, the queue's refusal to mark the entry replayed only
// logged.
func TestReplayRefusesAResolvedEntry(t *testing.T) {
	t.Parallel()
	h, fixed := newRepairable(t, nil)
	r, err := h.run("repair", workflow.RunOptions{ID: "r-resolved"})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("first run: %v\n%s", err, r.Explain())
	}
	entryID := r.Task("validate").DeadLetterID
	if err := h.store.DLQ().Resolve(h.ctx, entryID, "handled by hand; do not run again"); err != nil {
		t.Fatal(err)
	}
	fixed.Store(true)
	_, err = h.engine.ReplayTask(h.ctx, entryID)
	if !errors.Is(err, workflow.ErrNotReplayable) || !errors.Is(err, dlq.ErrResolved) {
		t.Errorf("ReplayTask of a resolved entry: %v, want ErrNotReplayable and dlq.ErrResolved", err)
	}
	if n := h.callsOf("validate") + h.callsOf("load") - 1; n != 0 {
		t.Errorf("the resolved task and its downstream ran %d more times", n)
	}
	got, err := h.engine.Get(h.ctx, "r-resolved")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != models.RunStateFailed || got.Task("validate").DeadLetterID != entryID {
		t.Errorf("after the refused replay the run is %s, validate %s with dead letter %q; want it as it ended\n%s",
			got.State, got.Task("validate").State, got.Task("validate").DeadLetterID, got.Explain())
	}
	if e, err := h.store.DLQ().Get(h.ctx, entryID); err != nil || e.Status != dlq.StatusResolved ||
		e.ResolutionNotes != "handled by hand; do not run again" {
		t.Errorf("entry after the refused replay: %+v, %v", e, err)
	}
}
