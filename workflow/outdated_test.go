package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// A run of an older shape of a DAG (a deploy renamed a task and rewired
// another) whose instance died is ended by Work once nobody has driven it
// for OlderShapeGrace (10 minutes): failed, the attempt left running
// recorded lost, the tasks that had not run skipped, and a reason naming
// the change. It stayed running for ever: Work takes only runs of the
// shapes it registers, and no instance registered the old one any more.
func TestRunOfARemovedShapeIsEndedWithAReason(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"sqlite::memory:", "postgres:" + testenv.NewSchema(t, "wf_shape_")} {
		t.Run(strings.SplitN(spec, ":", 2)[0], func(t *testing.T) { runOfARemovedShapeIsEnded(t, spec) })
	}
}

func runOfARemovedShapeIsEnded(t *testing.T, spec string) {
	ws, _ := openCrashStore(t, spec)
	old := newHarnessOn(t, nil, ws, workflow.Config{})
	old.register("etl", nil, old.task("extract", nil), old.task("load", nil, "extract"), old.task("audit", nil, "extract"))
	ctx := context.Background()
	// The old instance "gone" started the run, ran extract and died
	// running load.
	if _, err := old.engine.Start(ctx, "etl", workflow.RunOptions{ID: "r-old"}); err != nil {
		t.Fatal(err)
	}
	gone := wfstore.Lease{Owner: "gone", Now: t0, TTL: 30 * time.Second}
	for _, step := range []error{
		old.store.AcquireRun(ctx, "r-old", gone),
		old.store.StartAttempt(ctx, "r-old", "extract", 1, gone),
		old.store.FinishAttempt(ctx, &wfstore.Finish{RunID: "r-old", TaskID: "extract", Attempt: 1, Owner: "gone", Now: t0,
			Outcome: wfstore.OutcomeSuccess, State: models.TaskStateSuccess}),
		old.store.StartAttempt(ctx, "r-old", "load", 1, gone),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}

	// The new shape: load is now store, and audit depends on it.
	h := newHarnessOn(t, nil, ws, workflow.Config{InstanceID: "new", Clock: old.clock, LeaseDuration: 30 * time.Second})
	var failures []error
	h.register("etl", &errorhandling.PropagationConfig{OnDAGFailure: func(_ context.Context, run *models.DAGRun, err error) error {
		failures = append(failures, err)
		return nil
	}}, h.task("extract", nil), h.task("store", nil, "extract"), h.task("audit", nil, "store"))
	workCtx, stop := context.WithCancel(ctx)
	workDone := make(chan struct{})
	go func() {
		defer close(workDone)
		_ = h.engine.Work(workCtx)
	}()
	t.Cleanup(func() {
		stop()
		<-workDone
	})
	// Work looks every 15 s; the run is left alone for ten minutes.
	for elapsed := time.Duration(0); elapsed < 9*time.Minute; elapsed += 15 * time.Second {
		h.clock.WaitForTimers(1, workDone)
		h.clock.Advance(15 * time.Second)
	}
	h.clock.WaitForTimers(1, workDone)
	if r, err := h.engine.Get(ctx, "r-old"); err != nil || r.State != models.RunStateRunning {
		t.Fatalf("9 minutes after its instance died the run is %v (%v), want running: an instance with its shape may still take it", r, err)
	}
	for elapsed := 9 * time.Minute; elapsed < 12*time.Minute; elapsed += 15 * time.Second {
		h.clock.WaitForTimers(1, workDone)
		h.clock.Advance(15 * time.Second)
	}
	h.clock.WaitForTimers(1, workDone)
	r, err := h.engine.Get(ctx, "r-old")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != models.RunStateFailed {
		t.Fatalf("12 minutes after its instance died, the run of the old shape is %s (%q), want failed", r.State, r.Reason)
	}
	for _, want := range []string{`DAG "etl" changed`, `tasks ["load"] removed or renamed`, `tasks ["store"] added`,
		`the dependencies of ["audit"] changed`} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("run reason %q does not say %s", r.Reason, want)
		}
	}
	wantStates(t, r, map[string]models.TaskState{"extract": models.TaskStateSuccess, "load": models.TaskStateSkipped,
		"audit": models.TaskStateSkipped})
	snap, err := h.store.Load(ctx, "r-old")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range snap.Attempts {
		if a.TaskID == "load" && a.Outcome != wfstore.OutcomeLost {
			t.Errorf("load's attempt left running is %s, want lost", a.Outcome)
		}
	}
	stop()
	<-workDone
	if len(failures) != 1 || !errors.Is(failures[0], workflow.ErrRunFailed) {
		t.Errorf("OnDAGFailure was called with %v, want once with the run's failure", failures)
	}
	if n := h.callsOf("store") + h.callsOf("audit") + h.callsOf("extract"); n != 0 {
		t.Errorf("the new shape's tasks ran %d times for the old run", n)
	}
}
