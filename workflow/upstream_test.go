package workflow_test

import (
	"slices"
	"testing"

	"github.com/backstophq/backstop/workflow"
)

// TestRunKeepsItsEdges: a run stores its DAG's edges when it is created,
// so that an engine without the DAG (backstop serve's admin API) reads the
// run with each task's upstream, in dependency order, and says what a
// pending task waits for, as the engine that has the DAG does.
func TestRunKeepsItsEdges(t *testing.T) {
	h := newHarness(t, workflow.Config{InstanceID: "app"})
	// IDs sort against the dependency order: z is the root.
	h.register("etl", nil,
		h.task("z", nil),
		h.task("b", nil, "z"),
		h.task("a", nil, "b"),
		h.task("c", nil, "z", "b"),
	)
	id, err := h.engine.Start(h.ctx, "etl", workflow.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	withDAG, err := h.engine.Get(h.ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	reader, err := workflow.NewEngine(h.store, workflow.Config{InstanceID: "reader", Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	got, err := reader.Get(h.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for i, ts := range got.Tasks {
		order = append(order, ts.ID)
		want := withDAG.Tasks[i]
		if ts.ID != want.ID || !slices.Equal(ts.Upstream, want.Upstream) || ts.Upstream == nil || ts.Reason != want.Reason {
			t.Errorf("task %d without the DAG: %s upstream %v reason %q; with it: %s upstream %v reason %q",
				i, ts.ID, ts.Upstream, ts.Reason, want.ID, want.Upstream, want.Reason)
		}
	}
	if want := []string{"z", "b", "a", "c"}; !slices.Equal(order, want) {
		t.Errorf("order without the DAG %v, want %v", order, want)
	}
	if c := got.Task("c"); c == nil || !slices.Equal(c.Upstream, []string{"z", "b"}) ||
		c.Reason != "pending: waiting for upstream tasks z and b" {
		t.Errorf("c: %+v", c)
	}
}
