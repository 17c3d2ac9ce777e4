package workflow_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// A run is shown as it was created even when the engine reading it
// registers another shape of its DAG under the same ID (a deploy renamed a
// task and rewired another): every task of the run is listed, with the
// dependencies the run kept. With as many tasks in both shapes, the
// report followed the registered DAG: the renamed task vanished from the
// run, and the rewired one showed the new shape's dependencies.
func TestRunOfAnOlderShapeIsShownAsCreated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("etl", nil, h.task("extract", nil), h.task("load", nil, "extract"), h.task("audit", nil, "extract"))
	if _, err := h.run("etl", workflow.RunOptions{ID: "r-old"}); err != nil {
		t.Fatal(err)
	}
	// Another engine on the same store, with the new shape: "load" is now
	// "store", and "audit" depends on it.
	next, err := workflow.NewEngine(h.store, workflow.Config{Clock: h.clock, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, *workflow.TaskContext) error { return nil }
	d, err := workflow.NewDAG("etl", nil, workflow.Task{ID: "extract", Run: ok},
		workflow.Task{ID: "store", Upstream: []string{"extract"}, Run: ok},
		workflow.Task{ID: "audit", Upstream: []string{"store"}, Run: ok})
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Register(d); err != nil {
		t.Fatal(err)
	}
	for name, get := range map[string]func() (*workflow.Run, error){
		"Get":    func() (*workflow.Run, error) { return next.Get(h.ctx, "r-old") },
		"Resume": func() (*workflow.Run, error) { return next.Resume(h.ctx, "r-old") },
		"Run": func() (*workflow.Run, error) {
			return next.Run(h.ctx, "etl", workflow.RunOptions{ID: "r-old"})
		},
	} {
		r, err := get()
		if err != nil && !errors.Is(err, workflow.ErrRunFailed) {
			t.Fatalf("%s: %v", name, err)
		}
		var ids []string
		for _, ts := range r.Tasks {
			ids = append(ids, ts.ID)
		}
		slices.Sort(ids)
		if want := []string{"audit", "extract", "load"}; !slices.Equal(ids, want) {
			t.Errorf("%s: the run shows tasks %q, want its own %q", name, ids, want)
		}
		if a := r.Task("audit"); a == nil || !slices.Equal(a.Upstream, []string{"extract"}) {
			t.Errorf("%s: audit shown as %+v, want it upstream of extract as the run was created", name, a)
		}
		if r.State != models.RunStateSuccess {
			t.Errorf("%s: run is %s", name, r.State)
		}
	}
}
