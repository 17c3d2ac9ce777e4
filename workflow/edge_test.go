package workflow_test

import (
	"context"
	"errors"
	"testing"

	"github.com/backstophq/backstop/dlq"
	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// A dependency allowed to fail does not stop its dependent, which runs
// once it has ended; other dependents of the failed task are
// upstream_failed, and the failure still counts for the run.
func TestAllowFailureEdge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	cleanup := h.task("cleanup", func(ctx context.Context, tc *workflow.TaskContext) error {
		var v int
		if err := tc.Result("optional", &v); !errors.Is(err, workflow.ErrNoResult) {
			t.Errorf("Result(optional) = %v, want ErrNoResult", err)
		}
		return nil
	}, "optional", "base")
	cleanup.AllowFailure = []string{"optional"}
	h.register("edge", nil,
		h.task("base", nil),
		h.task("optional", fail(errBoom), "base"),
		cleanup,
		h.task("strict", nil, "optional"),
		h.task("final", nil, "cleanup"),
	)
	r, err := h.run("edge", workflow.RunOptions{})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Errorf("err = %v, want the run to fail: optional failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"cleanup": models.TaskStateSuccess, "final": models.TaskStateSuccess,
		"strict": models.TaskStateUpstreamFailed, "optional": models.TaskStateFailed})
}

// Nothing a failed run leaves behind is lost: the dead letter carries the
// run, the DAG and the attempts.
func TestDeadLetterCarriesTheRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	var added []*dlq.Entry
	h.engine.DeadLetters().OnEntryAdded(func(e *dlq.Entry) { added = append(added, e) })
	h.register("dl", nil, h.task("only", fail(eh.Permanent(errBoom))))
	r, _ := h.run("dl", workflow.RunOptions{ID: "r-dl"})
	if len(added) != 1 {
		t.Fatalf("entries added = %d, want 1", len(added))
	}
	e := added[0]
	if e.DAGID != "dl" || e.DAGRunID != "r-dl" || e.TaskID != "only" || e.TaskInstanceID != "r-dl/only/1" ||
		e.Attempts != 1 || e.ErrorMessage != "boom" || e.ID != r.Task("only").DeadLetterID {
		t.Errorf("entry = %+v", e)
	}
}
