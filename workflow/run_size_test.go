package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// BenchmarkRunSize runs fan-outs and chains of growing size on SQLite:
// the time a task takes must not grow with the run's size. Each event of a
// run evaluated the whole run with maps, and each start copied every
// result: a 4,000-task fan-out took 1.6 ms a task against 0.5 ms at 500.
func BenchmarkRunSize(b *testing.B) {
	for _, c := range []struct {
		shape string
		n     int
	}{{"fan-out", 500}, {"fan-out", 4000}, {"chain", 500}, {"chain", 4000}} {
		b.Run(fmt.Sprintf("%s-%d", c.shape, c.n), func(b *testing.B) {
			d, tasks := fanOutDAG(b, c.n), c.n+2
			if c.shape == "chain" {
				d, tasks = chainDAG(b, c.n), c.n
			}
			_, ws := openSQLite(b, filepath.Join(b.TempDir(), "fan.db"))
			e, err := workflow.NewEngine(ws, workflow.Config{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			if err := e.Register(d); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				r, err := e.Run(context.Background(), c.shape, workflow.RunOptions{ID: fmt.Sprintf("run-%d", i)})
				if err != nil || r.State != models.RunStateSuccess {
					b.Fatalf("Run: %v, %v", r, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*tasks), "µs/task")
		})
	}
}

// chainDAG is n no-op tasks, each after the one before.
func chainDAG(tb testing.TB, n int) *workflow.DAG {
	tb.Helper()
	noop := func(context.Context, *workflow.TaskContext) error { return nil }
	tasks := make([]workflow.Task, n)
	for i := range tasks {
		tasks[i] = workflow.Task{ID: fmt.Sprintf("step-%05d", i), Run: noop}
		if i > 0 {
			tasks[i].Upstream = []string{tasks[i-1].ID}
		}
	}
	d, err := workflow.NewDAG("chain", nil, tasks...)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// A task reads the results of the tasks that had succeeded when its
// attempt started, and not those of tasks that succeed while it runs (the
// results are no longer copied at each start, but the attempt sees them as
// a copy taken then would).
func TestResultsAsTheyStoodAtTheStart(t *testing.T) {
	ySucceeded := make(chan struct{})
	h := newHarness(t, workflow.Config{OnEvent: func(ev workflow.Event) {
		if ev.TaskID == "y" && ev.TaskState == models.TaskStateSuccess {
			close(ySucceeded)
		}
	}})
	type seen struct {
		a string
		y error
	}
	var sawX seen
	var sawZ string
	d, err := workflow.NewDAG("results", nil,
		workflow.Task{ID: "a", Run: func(_ context.Context, tc *workflow.TaskContext) error { return tc.SetResult("A") }},
		workflow.Task{ID: "x", Upstream: []string{"a"}, Run: func(ctx context.Context, tc *workflow.TaskContext) error {
			select {
			case <-ySucceeded:
			case <-ctx.Done():
				return ctx.Err()
			}
			var y string
			sawX.y = tc.Result("y", &y)
			return tc.Result("a", &sawX.a)
		}},
		workflow.Task{ID: "y", Upstream: []string{"a"}, Run: func(_ context.Context, tc *workflow.TaskContext) error { return tc.SetResult("Y") }},
		workflow.Task{ID: "z", Upstream: []string{"x", "y"}, Run: func(_ context.Context, tc *workflow.TaskContext) error {
			return tc.Result("y", &sawZ)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.engine.Register(d); err != nil {
		t.Fatal(err)
	}
	r, err := h.engine.Run(h.ctx, "results", workflow.RunOptions{ID: "r"})
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("Run: %+v, %v", r, err)
	}
	if sawX.a != "A" || !errors.Is(sawX.y, workflow.ErrNoResult) {
		t.Fatalf("x saw a = %q and y's result error %v; want A and ErrNoResult (y succeeded after x started)", sawX.a, sawX.y)
	}
	if sawZ != "Y" {
		t.Fatalf("z saw y = %q, want Y", sawZ)
	}
}
