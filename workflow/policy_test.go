package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// Under fail, the first failure stops the run: the attempt still running is
// cancelled (its context's cause is ErrRunStopped), pending tasks are
// skipped, and only the failed task is dead-lettered.
func TestFailPolicyCancelsRunningAndSkipsPending(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var taskFailures, dagFailures []string
	var dagErr error
	prop := &eh.PropagationConfig{
		Policy: eh.PropagationPolicyFail,
		OnTaskFailure: func(ctx context.Context, task *models.Task, ti *models.TaskInstance, err error) error {
			mu.Lock()
			defer mu.Unlock()
			taskFailures = append(taskFailures, task.ID+": "+err.Error())
			return nil
		},
		OnDAGFailure: func(ctx context.Context, run *models.DAGRun, err error) error {
			mu.Lock()
			defer mu.Unlock()
			dagFailures = append(dagFailures, run.ID+" "+string(run.State))
			dagErr = err
			return nil
		},
	}
	h := newHarness(t, workflow.Config{})
	slowStarted := make(chan struct{})
	var slowCause error
	h.register("stop", prop,
		h.task("a", nil),
		h.task("slow", func(ctx context.Context, tc *workflow.TaskContext) error {
			close(slowStarted)
			<-ctx.Done()
			slowCause = context.Cause(ctx)
			return ctx.Err()
		}, "a"),
		h.task("bad", func(ctx context.Context, tc *workflow.TaskContext) error {
			<-slowStarted
			return errBoom
		}, "a"),
		h.task("join", nil, "slow", "bad"), // the diamond's bottom
		h.task("after", nil, "join"),
	)
	r, err := h.run("stop", workflow.RunOptions{ID: "run-fail"})
	var re *workflow.RunError
	if !errors.As(err, &re) || !errors.Is(err, workflow.ErrRunFailed) || r.State != models.RunStateFailed {
		t.Fatalf("Run = %v, %v; want a failed run", r.State, err)
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateSuccess, "slow": models.TaskStateSkipped,
		"bad": models.TaskStateFailed, "join": models.TaskStateSkipped, "after": models.TaskStateSkipped})
	wantReason(t, r, "slow", "cancelled while running: the run stopped when task bad failed under fail")
	wantReason(t, r, "join", "skipped: the run stopped when task bad failed under fail")
	if !errors.Is(slowCause, workflow.ErrRunStopped) {
		t.Errorf("slow's context cause = %v, want ErrRunStopped", slowCause)
	}
	if h.callsOf("join") != 0 || h.callsOf("after") != 0 {
		t.Error("a skipped task ran")
	}
	if got := r.Task("slow").History; len(got) != 1 || got[0].Outcome != "cancelled" {
		t.Errorf("slow's history = %+v, want one cancelled attempt", got)
	}
	if !strings.HasPrefix(r.Reason, "task bad failed under fail; tasks slow, join and after did not run") {
		t.Errorf("run reason = %q", r.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(taskFailures) != 1 || taskFailures[0] != "bad: boom" {
		t.Errorf("OnTaskFailure calls = %q, want one for bad", taskFailures)
	}
	if len(dagFailures) != 1 || dagFailures[0] != "run-fail failed" || !errors.Is(dagErr, workflow.ErrRunFailed) {
		t.Errorf("OnDAGFailure calls = %q (err %v), want one", dagFailures, dagErr)
	}
	entries, _ := h.store.DLQ().List(h.ctx, nil)
	if len(entries) != 1 || entries[0].TaskID != "bad" || entries[0].DAGRunID != "run-fail" ||
		entries[0].TaskInstanceID != "run-fail/bad/1" || entries[0].Attempts != 1 {
		t.Errorf("dead letters = %+v, want bad's only", entries)
	}
	if r.Task("bad").DeadLetterID != entries[0].ID {
		t.Errorf("bad's dead letter = %q, want %q", r.Task("bad").DeadLetterID, entries[0].ID)
	}
}

// Under skip_downstream, everything below the failure is upstream_failed,
// named after the task that failed; the other side of the diamond and an
// independent branch go on; the run fails.
func TestSkipDownstreamDiamondAndIndependentBranch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("etl", &eh.PropagationConfig{Policy: eh.PropagationPolicySkipDownstream},
		h.task("extract", nil),
		h.task("clean", nil, "extract"),
		h.task("validate", fail(errBoom), "extract"),
		h.task("load", nil, "clean", "validate"),
		h.task("report", nil, "load"),
		h.task("audit", nil),
		h.task("archive", nil, "audit"),
	)
	r, err := h.run("etl", workflow.RunOptions{})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("err = %v, want ErrRunFailed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"extract": models.TaskStateSuccess, "clean": models.TaskStateSuccess,
		"validate": models.TaskStateFailed, "load": models.TaskStateUpstreamFailed, "report": models.TaskStateUpstreamFailed,
		"audit": models.TaskStateSuccess, "archive": models.TaskStateSuccess})
	wantReason(t, r, "load", "skipped: upstream task validate failed under skip_downstream")
	wantReason(t, r, "report", "skipped: upstream task load did not run because validate failed, under skip_downstream")
	wantReason(t, r, "validate", "failed: boom (attempt 1; no retries allowed)")
	if want := "task validate failed under skip_downstream; tasks load and report did not run; partial success is not allowed"; r.Reason != want {
		t.Errorf("run reason = %q\nwant %q", r.Reason, want)
	}
	if h.callsOf("load")+h.callsOf("report") != 0 {
		t.Error("an upstream_failed task ran")
	}
}

// allow_partial with AllowPartialSuccess: the run succeeds (partially) when
// every critical task succeeded, and fails when one did not, even if it
// only did not run.
func TestAllowPartialCriticalTasks(t *testing.T) {
	t.Parallel()
	prop := func() *eh.PropagationConfig {
		return &eh.PropagationConfig{Policy: eh.PropagationPolicyAllowPartial, AllowPartialSuccess: true,
			CriticalTasks: []string{"validate", "commit"}}
	}
	tests := []struct {
		name       string
		failing    string
		want       models.RunState
		wantReason string
	}{
		{"everything succeeds", "", models.RunStateSuccess, "all 6 tasks succeeded"},
		{"a non-critical branch fails", "enrich", models.RunStatePartialSuccess,
			"partial success: task enrich failed under allow_partial; task report did not run; every critical task (validate, commit and notify) succeeded and partial success is allowed"},
		{"a critical task fails", "validate", models.RunStateFailed,
			"task validate failed under allow_partial; tasks transform, enrich, commit and report did not run; critical tasks validate and commit did not succeed"},
		{"a critical task's upstream fails", "transform", models.RunStateFailed,
			"task transform failed under allow_partial; task commit did not run; critical task commit did not succeed"},
		{"a task marked Critical fails", "notify", models.RunStateFailed,
			"task notify failed under allow_partial; critical task notify did not succeed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, workflow.Config{})
			fn := func(id string) func(context.Context, *workflow.TaskContext) error {
				if id == tt.failing {
					return fail(errBoom)
				}
				return nil
			}
			notify := h.task("notify", fn("notify"))
			notify.Critical = true
			h.register("partial", prop(),
				h.task("validate", fn("validate")),
				h.task("transform", fn("transform"), "validate"),
				h.task("enrich", fn("enrich"), "validate"),
				h.task("commit", fn("commit"), "transform"),
				h.task("report", fn("report"), "enrich"),
				notify,
			)
			r, err := h.run("partial", workflow.RunOptions{})
			if r.State != tt.want || r.Reason != tt.wantReason {
				t.Errorf("run = %s: %q\nwant %s: %q", r.State, r.Reason, tt.want, tt.wantReason)
			}
			if tt.want.Succeeded() != (err == nil) {
				t.Errorf("err = %v for a %s run", err, r.State)
			}
		})
	}
}

// AllowPartialSuccess under skip_downstream ends the run as allow_partial
// does; without critical tasks any partial run succeeds partially.
func TestSkipDownstreamWithPartialSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("p", &eh.PropagationConfig{AllowPartialSuccess: true},
		h.task("a", fail(errBoom)), h.task("b", nil, "a"), h.task("c", nil))
	r, err := h.run("p", workflow.RunOptions{})
	if err != nil || r.State != models.RunStatePartialSuccess ||
		!strings.HasSuffix(r.Reason, "there are no critical tasks and partial success is allowed") {
		t.Errorf("run = %s %q, %v", r.State, r.Reason, err)
	}
}
