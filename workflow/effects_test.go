package workflow_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfsqlite"
)

// A task reads the run's input and its upstream tasks' results.
func TestResultsAndInputFlowDownstream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	type order struct{ ID, Items int }
	var got int
	h.register("flow", nil,
		h.task("count", func(ctx context.Context, tc *workflow.TaskContext) error {
			var in order
			if err := tc.Input(&in); err != nil {
				return err
			}
			return tc.SetResult(in.Items * 2)
		}),
		h.task("sum", func(ctx context.Context, tc *workflow.TaskContext) error {
			if err := tc.Result("count", &got); err != nil {
				return err
			}
			if err := tc.Result("sum", &got); !errors.Is(err, workflow.ErrNoResult) {
				t.Errorf("Result(sum) = %v, want ErrNoResult", err)
			}
			return nil
		}, "count"),
	)
	r, err := h.run("flow", workflow.RunOptions{Input: order{ID: 7, Items: 21}})
	if err != nil || got != 42 || string(r.Task("count").Result) != "42" || r.Task("sum").Result != nil {
		t.Fatalf("run %v: got %d, results %s / %s", err, got, r.Task("count").Result, r.Task("sum").Result)
	}
}

func outboxCount(t *testing.T, h *harness, typ string) int {
	t.Helper()
	var n int
	if err := h.sqlite.DB().QueryRowContext(h.ctx, `SELECT count(*) FROM backstop_outbox WHERE type = ?`, typ).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Messages a task enqueues, and rows it writes in OnCommit, are committed
// with its success only: a failed attempt leaves nothing, a retry does not
// double them.
func TestSideEffectsCommitWithTheSuccessOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	if _, err := h.sqlite.DB().ExecContext(h.ctx, `CREATE TABLE shipments (order_id INTEGER)`); err != nil {
		t.Fatal(err)
	}
	events := h.subscribe()
	ship := h.task("ship", func(ctx context.Context, tc *workflow.TaskContext) error {
		if err := tc.Enqueue(&outbox.Message{Destination: "billing", Type: "order.shipped", Payload: []byte(`{"order":7}`)}); err != nil {
			return err
		}
		wfsqlite.OnCommit(tc, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (7)`)
			return err
		})
		if tc.Attempt() == 1 {
			return errBoom // after enqueuing: nothing of attempt 1 may remain
		}
		return nil
	})
	ship.Retries = 1
	ship.Strategy = retry.NewFixedDelay(1, false)
	h.register("effects", nil, ship)
	done, out := h.runAsync("effects", workflow.RunOptions{})
	h.clock.Set(h.waitFor(events, done, upForRetry("ship")).NextAttemptAt)
	if _, err := out(); err != nil {
		t.Fatal(err)
	}
	var rows int
	_ = h.sqlite.DB().QueryRowContext(h.ctx, `SELECT count(*) FROM shipments`).Scan(&rows)
	if n := outboxCount(t, h, "order.shipped"); n != 1 || rows != 1 {
		t.Errorf("outbox messages = %d, shipments = %d; want 1 and 1", n, rows)
	}
}

// An invalid message fails the attempt that enqueues it.
func TestInvalidMessageFailsTheAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("invalid", nil, h.task("t", func(ctx context.Context, tc *workflow.TaskContext) error {
		return tc.Enqueue(&outbox.Message{Type: "no.destination"})
	}))
	r, _ := h.run("invalid", workflow.RunOptions{})
	if ts := r.Task("t"); ts.State != models.TaskStateFailed || ts.Error != "workflow: task t: outbox: invalid message: destination is required" {
		t.Errorf("task %s, error %q", ts.State, ts.Error)
	}
}

// A failing OnCommit function fails the attempt and rolls back the
// messages of that attempt.
func TestFailingOnCommitRollsBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("rollback", nil, h.task("t", func(ctx context.Context, tc *workflow.TaskContext) error {
		if err := tc.Enqueue(&outbox.Message{Destination: "d", Type: "never"}); err != nil {
			return err
		}
		tc.OnCommit(func(context.Context, any) error { return errors.New("constraint violated") })
		return nil
	}))
	r, _ := h.run("rollback", workflow.RunOptions{})
	if r.Task("t").State != models.TaskStateFailed || outboxCount(t, h, "never") != 0 {
		t.Errorf("task %s (%q); outbox has %d", r.Task("t").State, r.Task("t").Reason, outboxCount(t, h, "never"))
	}
}

// An OnCommit function that panics fails the attempt and rolls back what
// it wrote, as one that returns an error does. It runs inside the store's
// transaction on the driver's goroutine, and its panic took the process
// down (and again on every resume, the task and its function run again).
func TestPanickingOnCommitRollsBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("commit-panics", nil, h.task("t", func(ctx context.Context, tc *workflow.TaskContext) error {
		if err := tc.Enqueue(&outbox.Message{Destination: "d", Type: "never"}); err != nil {
			return err
		}
		tc.OnCommit(func(context.Context, any) error {
			panic("the function's own bug")
		})
		return nil
	}), h.task("after", nil, "t"))
	r, err := h.run("commit-panics", workflow.RunOptions{})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, want the run failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"t": models.TaskStateFailed, "after": models.TaskStateUpstreamFailed})
	if got := r.Task("t").Error; !strings.Contains(got, "an OnCommit function panicked: the function's own bug") {
		t.Errorf("t's error = %q", got)
	}
	if n := outboxCount(t, h, "never"); n != 0 {
		t.Errorf("the outbox holds %d messages of the attempt that failed", n)
	}
	// The store is usable after the rolled-back transaction.
	h.register("after-panic", nil, h.task("u", nil))
	if r, err := h.run("after-panic", workflow.RunOptions{}); err != nil || r.State != models.RunStateSuccess {
		t.Errorf("a run after the panic: %v, %v", r.State, err)
	}
	if logs := h.logs.String(); !strings.Contains(logs, `level=ERROR msg="an OnCommit function panicked; the attempt fails"`) {
		t.Errorf("no ERROR record of the panic in the logs:\n%.3000s", logs)
	}
}

// No more attempts run at once than MaxConcurrentTasks, and all run.
func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{MaxConcurrentTasks: 2})
	var now, peak atomic.Int32
	release := make(chan struct{})
	entered := make(chan struct{}, 5)
	var tasks []workflow.Task
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		tasks = append(tasks, h.task(id, func(ctx context.Context, tc *workflow.TaskContext) error {
			n := now.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			entered <- struct{}{}
			<-release
			now.Add(-1)
			return nil
		}))
	}
	h.register("wide", nil, tasks...)
	_, out := h.runAsync("wide", workflow.RunOptions{})
	<-entered
	<-entered
	close(release)
	if r, err := out(); err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("run: %v", err)
	}
	if peak.Load() != 2 {
		t.Errorf("peak concurrency = %d, want 2", peak.Load())
	}
}
