package workflow_test

import (
	"testing"

	"github.com/backstophq/backstop/workflow"
)

// Register refuses "a different DAG under a registered ID". Two DAGs of
// one ID and different shapes given in the same call (a list of
// definitions with a copy-pasted ID) were both taken, the second silently
// replacing the first: its runs were then created, and older runs of the
// first shape left, as if nothing was wrong.
func TestRegisterRefusesTwoShapesOfOneIDInOneCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	v1, err := workflow.NewDAG("etl", nil, tk("a"), tk("b", "a"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := workflow.NewDAG("etl", nil, tk("a"), tk("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.engine.Register(v1, v2); err == nil {
		t.Fatal("registering two shapes of DAG etl in one call succeeded")
	}
	// Nothing of the refused call is registered, as when it is refused
	// for a DAG registered earlier.
	if _, err := h.engine.Start(h.ctx, "etl", workflow.RunOptions{}); err == nil {
		t.Error("a run of etl was started after its registration was refused")
	}
	same, _ := workflow.NewDAG("etl", nil, tk("a"), tk("b", "a"))
	if err := h.engine.Register(v1, same); err != nil {
		t.Errorf("registering one shape twice in one call: %v", err)
	}
}
