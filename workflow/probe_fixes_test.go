package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
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
