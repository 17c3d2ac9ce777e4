package workflow_test

import (
	"errors"
	"strings"
	"testing"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// A DAG keeps the propagation configuration it was defined with, as it
// keeps its tasks: one PropagationConfig variable reused for the next
// DAG's definition does not change the policy of a DAG defined and
// registered before, nor its critical tasks. The DAG kept the caller's
// pointer, so a fail DAG ran under allow_partial (and ended
// partial_success) while its runs' fingerprint still said fail.
func TestDAGKeepsThePropagationItWasDefinedWith(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	prop := &eh.PropagationConfig{Policy: eh.PropagationPolicyFail, CriticalTasks: []string{"a"}}
	d := h.register("strict", prop,
		h.task("a", fail(eh.Permanent(errors.New("a broke")))),
		h.task("c", nil, "a"),
		h.task("x", nil),
	)
	// The same variable, reused for another DAG.
	prop.Policy, prop.AllowPartialSuccess = eh.PropagationPolicyAllowPartial, true
	prop.CriticalTasks[0] = "y"
	h.register("lenient", prop, h.task("y", nil))

	r, err := h.run("strict", workflow.RunOptions{ID: "r-strict"})
	if r.State != models.RunStateFailed || !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("run ended %s (%v), want failed under fail:\n%s", r.State, err, r.Explain())
	}
	if !strings.Contains(r.Reason, "under fail") {
		t.Errorf("run reason %q, want the fail policy's", r.Reason)
	}
	if p := d.Propagation(); p.Policy != eh.PropagationPolicyFail || p.AllowPartialSuccess || p.CriticalTasks[0] != "a" {
		t.Errorf("Propagation() = %+v, want the one the DAG was defined with", p)
	}
}
