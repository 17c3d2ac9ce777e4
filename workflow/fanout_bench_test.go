package workflow_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// fanOutDAG is one root, n independent children of it and one join task
// after them all, every task a no-op.
func fanOutDAG(tb testing.TB, n int) *workflow.DAG {
	tb.Helper()
	noop := func(context.Context, *workflow.TaskContext) error { return nil }
	tasks := []workflow.Task{{ID: "root", Run: noop}}
	children := make([]string, n)
	for i := range children {
		children[i] = fmt.Sprintf("child-%04d", i)
		tasks = append(tasks, workflow.Task{ID: children[i], Upstream: []string{"root"}, Run: noop})
	}
	tasks = append(tasks, workflow.Task{ID: "join", Upstream: children, Run: noop})
	d, err := workflow.NewDAG("fan-out", nil, tasks...)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// loads counts the Load calls made through a store.
type loads struct {
	wfstore.Store
	n atomic.Int64
}

func (l *loads) Load(ctx context.Context, runID string) (*wfstore.Snapshot, error) {
	l.n.Add(1)
	return l.Store.Load(ctx, runID)
}

// A run reads its stored state a bounded number of times, whatever the
// number of its tasks: reading the whole run again after each task ended
// made a run of 1,000 tasks take 1,000 reads of 1,000 rows.
func TestFanOutReadsTheRunABoundedNumberOfTimes(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 300} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			base := newHarness(t, workflow.Config{})
			counted := &loads{Store: base.store}
			h := newHarnessOn(t, base.sqlite, counted, workflow.Config{Clock: base.clock, Logger: quiet})
			if err := h.engine.Register(fanOutDAG(t, n)); err != nil {
				t.Fatal(err)
			}
			r, err := h.engine.Run(h.ctx, "fan-out", workflow.RunOptions{ID: "fan"})
			if err != nil || r.State != models.RunStateSuccess {
				t.Fatalf("Run: %v, %v", r, err)
			}
			// Resume's and the driver's first reads, and the report's.
			if got := counted.n.Load(); got > 5 {
				t.Errorf("%d tasks: the run was read %d times, want at most 5", n+2, got)
			}
		})
	}
}

// BenchmarkFanOut1000 runs a DAG of one root, 1,000 children and one
// join task, all no-ops, to its end.
func BenchmarkFanOut1000(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		_, ws := openSQLite(b, filepath.Join(b.TempDir(), "fan.db"))
		benchFanOut(b, ws)
	})
	b.Run("postgres", func(b *testing.B) {
		ws, _ := openCrashStore(b, "postgres:"+testenv.NewSchema(b, "wf_fan_"))
		benchFanOut(b, ws)
	})
}

func benchFanOut(b *testing.B, ws wfstore.Store) {
	e, err := workflow.NewEngine(ws, workflow.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Register(fanOutDAG(b, 1000)); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		r, err := e.Run(context.Background(), "fan-out", workflow.RunOptions{ID: fmt.Sprintf("fan-%d", i)})
		if err != nil || r.State != models.RunStateSuccess {
			b.Fatalf("Run: %v, %v", r, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/run")
}
