package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Two engine instances working on one PostgreSQL database share the runs
// started there: every run ends, and no task runs twice.
func TestTwoInstancesShareRunsOnPostgres(t *testing.T) {
	t.Parallel()
	spec := "postgres:" + testenv.NewSchema(t, "wf_pair_")
	var mu sync.Mutex
	calls := map[string]int{}
	ended := make(chan string, 100)
	hook := func(ctx context.Context, id string) error { return nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var engines []*workflow.Engine
	var wg sync.WaitGroup
	for _, name := range []string{"one", "two"} {
		ws, _ := openCrashStore(t, spec)
		e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: name, Logger: quiet, OnEvent: func(ev workflow.Event) {
			if ev.TaskState == models.TaskStateRunning {
				mu.Lock()
				calls[ev.RunID+"/"+ev.TaskID]++
				mu.Unlock()
			}
			if ev.RunState.Terminal() {
				ended <- ev.RunID
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(crashDAG(t, hook)); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	const runs = 12
	for i := range runs {
		if _, err := engines[i%2].Start(ctx, "crash", workflow.RunOptions{ID: fmt.Sprintf("run-%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range engines {
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Work(ctx) }()
	}
	seen := map[string]bool{}
	for len(seen) < runs {
		seen[<-ended] = true
	}
	cancel()
	wg.Wait()
	for i := range runs {
		r, err := engines[0].Get(context.Background(), fmt.Sprintf("run-%02d", i))
		if err != nil || r.State != models.RunStateSuccess {
			t.Errorf("run %d: %v, %v", i, r, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != runs*5 {
		t.Errorf("%d task attempts started, want %d", len(calls), runs*5)
	}
	for k, n := range calls {
		if n != 1 {
			t.Errorf("%s started %d times", k, n)
		}
	}
}

// When the caller's context ends, the attempt in flight is interrupted,
// not failed: the run is released, and resuming it runs the task again
// without counting a failure.
func TestShutdownInterruptsWithoutFailing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	started := make(chan struct{}, 2)
	slow := h.task("slow", func(ctx context.Context, tc *workflow.TaskContext) error {
		if tc.Attempt() == 1 {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	h.register("shutdown", nil, h.task("first", nil), slow)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.engine.Run(ctx, "shutdown", workflow.RunOptions{ID: "r"})
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	mid, _ := h.engine.Get(h.ctx, "r")
	if s := mid.Task("slow"); s.State != models.TaskStateUpForRetry || mid.Owner != "" || s.History[0].Outcome != "lost" {
		t.Fatalf("after the shutdown: slow %s, owner %q, history %+v", s.State, mid.Owner, s.History)
	}
	r, err := h.engine.Resume(h.ctx, "r")
	if err != nil || r.State != models.RunStateSuccess || h.callsOf("first") != 1 {
		t.Fatalf("Resume: %v; first ran %d times\n%s\n%s", err, h.callsOf("first"), r.Explain(), h.logs.String())
	}
	if again, err := h.engine.Run(h.ctx, "shutdown", workflow.RunOptions{ID: "r"}); err != nil || again.State != models.RunStateSuccess ||
		h.callsOf("slow") != 2 {
		t.Errorf("Run with the ID of an ended run: %v, %v; slow ran %d times", again, err, h.callsOf("slow"))
	}
}

// Work drives the runs created with Start: at once, and on each poll.
func TestWorkDrivesStartedRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{PollInterval: time.Minute})
	h.register("w", nil, h.task("a", nil), h.task("b", nil, "a"))
	events := h.subscribe()
	ended := func(id string) func(workflow.Event) bool {
		return func(ev workflow.Event) bool { return ev.RunID == id && ev.RunState.Terminal() }
	}
	id, err := h.engine.Start(h.ctx, "w", workflow.RunOptions{ID: "first"})
	if err != nil || id != "first" {
		t.Fatalf("Start = %q, %v", id, err)
	}
	if again, err := h.engine.Start(h.ctx, "w", workflow.RunOptions{ID: "first"}); err != nil || again != "first" {
		t.Errorf("Start with the same ID = %q, %v", again, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.engine.Work(ctx) }()
	h.waitFor(events, done, ended("first"))

	if _, err := h.engine.Start(h.ctx, "w", workflow.RunOptions{ID: "second"}); err != nil {
		t.Fatal(err)
	}
	h.clock.WaitForTimers(1, done) // Work waits for its next poll
	h.clock.Advance(time.Minute)
	h.waitFor(events, done, ended("second"))
	cancel()
	<-done
	for _, id := range []string{"first", "second"} {
		if r, _ := h.engine.Get(h.ctx, id); r.State != models.RunStateSuccess {
			t.Errorf("run %s is %s", id, r.State)
		}
	}
}

// TestRunIDsNoStoreKeeps: a run ID with a NUL or invalid UTF-8 is refused
// before anything is stored (PostgreSQL could not keep it, SQLite would),
// and a lookup of one finds no run.
func TestRunIDsNoStoreKeeps(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("w", nil, h.task("a", nil))
	for _, id := range []string{"run\x00", "run\xff"} {
		if _, err := h.engine.Start(h.ctx, "w", workflow.RunOptions{ID: id}); !errors.Is(err, workflow.ErrInvalidRunID) {
			t.Errorf("Start(%q): err = %v, want ErrInvalidRunID", id, err)
		}
		if _, err := h.engine.Run(h.ctx, "w", workflow.RunOptions{ID: id}); !errors.Is(err, workflow.ErrInvalidRunID) {
			t.Errorf("Run(%q): err = %v, want ErrInvalidRunID", id, err)
		}
		if _, err := h.engine.Get(h.ctx, id); !errors.Is(err, wfstore.ErrNotFound) {
			t.Errorf("Get(%q): err = %v, want wfstore.ErrNotFound", id, err)
		}
	}
	if _, err := h.engine.Start(h.ctx, "w", workflow.RunOptions{ID: "run\x1b[2J"}); err != nil {
		t.Errorf("a run ID with another control character: %v", err)
	}
}

// A task that ignores its context and does not return holds up a shutdown
// for a few seconds (the engine's clock), not for ever: the attempt is
// abandoned with a warning, Run returns, and the run is left to its lease,
// not released, so that nobody runs the task again while it may still be
// running. Once the lease lapses, another instance's resume finds the
// attempt lost and runs the task again, no failure counted. Run, and so Work's shutdown, waited
// for the function to return.
func TestShutdownAbandonsAnAttemptThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{LeaseDuration: 30 * time.Second})
	started, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	stuck := h.task("stuck", func(ctx context.Context, tc *workflow.TaskContext) error {
		if tc.Attempt() == 1 {
			close(started)
			<-release // ignores ctx
		}
		return nil
	})
	h.register("stuck", nil, stuck, h.task("after", nil, "stuck"))
	if err := h.runCancelled("stuck", "r", started); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	if !strings.Contains(h.logs.String(), "attempt abandoned") {
		t.Errorf("no warning of the abandoned attempt:\n%s", h.logs.String())
	}
	mid, _ := h.engine.Get(h.ctx, "r")
	if mid.Owner == "" {
		t.Errorf("the run was released while its attempt may still run")
	}
	b := newHarnessOn(t, h.sqlite, h.store, workflow.Config{InstanceID: "B", Clock: h.clock})
	b.register("stuck", nil, stuck, b.task("after", nil, "stuck"))
	if _, err := b.engine.Resume(h.ctx, "r"); !errors.Is(err, wfstore.ErrLeased) {
		t.Fatalf("another instance's Resume before the lease lapsed: %v, want ErrLeased", err)
	}
	h.clock.Advance(time.Minute)
	r, err := b.engine.Resume(h.ctx, "r")
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("Resume: %v\n%s", err, h.logs.String())
	}
	if s := r.Task("stuck"); len(s.History) != 2 || s.History[0].Outcome != "lost" || s.History[1].Outcome != "success" {
		t.Errorf("stuck: history %+v; want the first attempt lost, the second a success", s.History)
	}
}

// After a shutdown abandons an attempt whose task ignores its context, the
// same engine does not drive the run again until the task has returned:
// Resume took the run at once (the lease was its own) and ran the task a
// second time beside the abandoned attempt. Once it returns, Resume goes
// on and the attempt is recorded lost.
func TestAbandonedAttemptKeepsItsRunFromThisEngine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{LeaseDuration: 30 * time.Second})
	started, release := make(chan struct{}), make(chan struct{})
	var running atomic.Int32
	stuck := h.task("stuck", func(ctx context.Context, tc *workflow.TaskContext) error {
		if running.Add(1) > 1 {
			t.Errorf("attempt %d of stuck started while another ran", tc.Attempt())
		}
		defer running.Add(-1)
		if tc.Attempt() == 1 {
			close(started)
			<-release // ignores ctx
		}
		return nil
	})
	h.register("stuck", nil, stuck)
	if err := h.runCancelled("stuck", "r", started); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	if _, err := h.engine.Resume(h.ctx, "r"); !errors.Is(err, workflow.ErrRunActive) {
		t.Fatalf("Resume while the abandoned attempt runs: %v, want ErrRunActive", err)
	}
	close(release)
	giveUp := time.After(10 * time.Second)
	for {
		r, err := h.engine.Resume(h.ctx, "r")
		if errors.Is(err, workflow.ErrRunActive) {
			select {
			case <-giveUp:
				t.Fatal("the run stayed active 10 s after the abandoned attempt returned")
			case <-time.After(time.Millisecond):
			}
			continue
		}
		if err != nil || r.State != models.RunStateSuccess {
			t.Fatalf("Resume after the attempt returned: %v\n%s", err, h.logs.String())
		}
		if s := r.Task("stuck"); len(s.History) != 2 || s.History[0].Outcome != "lost" {
			t.Errorf("stuck: history %+v; want the first attempt lost, the second a success", s.History)
		}
		return
	}
}

// runCancelled runs the DAG as run runID, cancels Run's context once
// started is closed (its task is running), and moves the clock on a
// second at a time, past the grace a cancelled attempt has to return,
// until Run returns; it returns Run's error. The test fails if Run has not
// returned 10 s later.
func (h *harness) runCancelled(dagID, runID string, started <-chan struct{}) error {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := h.engine.Run(ctx, dagID, workflow.RunOptions{ID: runID})
		done <- err
	}()
	<-started
	cancel()
	giveUp := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			return err
		case <-giveUp:
			h.t.Fatalf("Run did not return 10 s after its context ended (the clock moved %s)", h.clock.Now().Sub(t0))
		case <-time.After(time.Millisecond):
			h.clock.Advance(time.Second)
		}
	}
}
