package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// logSignal is a slog handler that sends the level of every record with
// message msg on c.
type logSignal struct {
	msg string
	c   chan slog.Level
}

func (l *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSignal) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logSignal) WithGroup(string) slog.Handler            { return l }
func (l *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.c <- r.Level
	}
	return nil
}

// Runs whose rows were damaged by plain SQL cannot be resumed; Work logs
// each at ERROR and leaves it for a while, so the healthy runs behind them
// are taken on the next pass. They stayed first in every batch of
// abandoned runs (never held, or released at once), and 100 of them kept
// Work from ever driving a healthy run.
func TestWorkIsNotStarvedByRunsItCannotLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, sql string }{
		{"a task's row missing", `DELETE FROM backstop_wf_tasks WHERE run_id = ? AND task_id = 'y'`},
		{"upstream not an object", `UPDATE backstop_wf_runs SET upstream = '[1,2]' WHERE id = ?`},
		{"attempt not a number", `UPDATE backstop_wf_tasks SET attempt = 'abc' WHERE run_id = ? AND task_id = 'x'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failed := &logSignal{msg: "resuming a run failed", c: make(chan slog.Level, 256)}
			h := newHarness(t, workflow.Config{InstanceID: "main", PollInterval: time.Minute, Logger: slog.New(failed)})
			h.register("etl", nil, h.task("x", nil), h.task("y", nil, "x"))
			const damaged = 100 // a batch of Abandoned
			for i := range damaged {
				id, err := h.engine.Start(h.ctx, "etl", workflow.RunOptions{ID: fmt.Sprintf("a-%03d", i)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := h.sqlite.DB().Exec(tc.sql, id); err != nil {
					t.Fatal(err)
				}
			}
			healthy, err := h.engine.Start(h.ctx, "etl", workflow.RunOptions{ID: "z-new"})
			if err != nil {
				t.Fatal(err)
			}
			events := h.subscribe()
			ctx, cancel := context.WithCancel(h.ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = h.engine.Work(ctx) }()
			t.Cleanup(func() { cancel(); <-done }) // before the store closes

			// The first pass takes the damaged runs, which come first.
			for range damaged {
				select {
				case level := <-failed.c:
					if level != slog.LevelError {
						t.Errorf("a damaged run is logged at %s, want ERROR", level)
					}
				case <-time.After(30 * time.Second): // only a hang gets here
					t.Fatal("not every damaged run was tried")
				}
			}
			h.clock.WaitForTimers(1, done) // Work waits for its next poll
			h.clock.Advance(time.Minute)
			for ended := false; !ended; {
				select {
				case ev := <-events:
					ended = ev.RunID == healthy && ev.RunState.Terminal()
					if ended && ev.RunState != models.RunStateSuccess {
						t.Fatalf("run %s ended %s", healthy, ev.RunState)
					}
				case <-failed.c:
					t.Fatalf("the second pass took the damaged runs again, not run %s", healthy)
				}
			}
			// Resume still tries a postponed run at once.
			if _, err := h.engine.Resume(h.ctx, "a-000"); err == nil || errors.Is(err, wfstore.ErrLeased) {
				t.Errorf("Resume of a postponed damaged run = %v, want it tried (and refused for its rows)", err)
			}
		})
	}
}
