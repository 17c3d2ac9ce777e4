package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
)

func noop(context.Context, *workflow.TaskContext) error { return nil }

func tk(id string, up ...string) workflow.Task { return workflow.Task{ID: id, Upstream: up, Run: noop} }

func TestNewDAGRejectsBadDefinitions(t *testing.T) {
	t.Parallel()
	withAllow := tk("b", "a")
	withAllow.AllowFailure = []string{"c"}
	noRun := tk("a")
	noRun.Run = nil
	negative := tk("a")
	negative.Retries = -1
	tests := []struct {
		name     string
		prop     *eh.PropagationConfig
		tasks    []workflow.Task
		kind     error  // nil: no sentinel beyond ErrInvalidDAG
		contains string // the culprits, named
	}{
		{"duplicate IDs", nil, []workflow.Task{tk("a"), tk("b"), tk("a"), tk("b")}, workflow.ErrDuplicateTask, "duplicate task ID: a and b"},
		{"unknown dependencies", nil, []workflow.Task{tk("a"), tk("load", "stage"), tk("report", "sumary")},
			workflow.ErrUnknownDependency, "unknown dependency: load -> stage, report -> sumary"},
		{"cycle", nil, []workflow.Task{tk("root"), tk("a", "root", "c"), tk("b", "a"), tk("c", "b")}, workflow.ErrCycle, "dependency cycle: a -> c -> b -> a"},
		{"self dependency", nil, []workflow.Task{tk("a", "a")}, workflow.ErrCycle, "dependency cycle: a -> a"},
		{"unknown critical task", &eh.PropagationConfig{CriticalTasks: []string{"comit"}}, []workflow.Task{tk("commit")},
			workflow.ErrUnknownDependency, "critical task comit is not a task of the DAG"},
		{"allow failure outside upstream", nil, []workflow.Task{tk("a"), tk("c"), withAllow}, nil, "task b: AllowFailure lists c, which is not in its Upstream"},
		{"no run function", nil, []workflow.Task{noRun}, nil, "task a has no Run function"},
		{"negative retries", nil, []workflow.Task{negative}, nil, "task a: Retries must not be negative"},
		{"empty task ID", nil, []workflow.Task{tk("")}, nil, "task 0 has an empty ID"},
		{"NUL in a task ID", nil, []workflow.Task{tk("a\x00b")}, nil, `task "a\x00b": ID holds a NUL byte`},
		{"task ID not UTF-8", nil, []workflow.Task{tk("ok"), tk("l\xffoad", "ok")}, nil, `task "l\xffoad": ID is not valid UTF-8`},
		{"bad policy", &eh.PropagationConfig{Policy: eh.PropagationPolicyFail, AllowPartialSuccess: true}, []workflow.Task{tk("a")},
			nil, "PropagationConfig.AllowPartialSuccess"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := workflow.NewDAG("etl", tt.prop, tt.tasks...)
			var de *workflow.DefinitionError
			if !errors.As(err, &de) || !errors.Is(err, workflow.ErrInvalidDAG) || de.DAGID != "etl" {
				t.Fatalf("err = %v, want a *DefinitionError for etl", err)
			}
			if tt.kind != nil && !errors.Is(err, tt.kind) {
				t.Errorf("err = %v, want it to match %v", err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("err = %q, want it to contain %q", err, tt.contains)
			}
		})
	}
	if _, err := workflow.NewDAG("", nil, tk("a")); !errors.Is(err, workflow.ErrInvalidDAG) {
		t.Errorf("empty DAG ID: err = %v", err)
	}
	for _, id := range []string{"e\x00tl", "e\xfftl"} {
		if _, err := workflow.NewDAG(id, nil, tk("a")); !errors.Is(err, workflow.ErrInvalidDAG) || !strings.Contains(err.Error(), "DAG ID") {
			t.Errorf("DAG ID %q: err = %v", id, err)
		}
	}
	// Other control characters are valid IDs, shown quoted.
	if _, err := workflow.NewDAG("etl\x1b[31m", nil, tk("a\tb")); err != nil {
		t.Errorf("control characters: %v", err)
	}
}

func TestDAGOrderAndModel(t *testing.T) {
	t.Parallel()
	d, err := workflow.NewDAG("etl", &eh.PropagationConfig{CriticalTasks: []string{"load"}},
		tk("report", "load"), tk("load", "extract", "extract"), tk("extract"), tk("audit"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.TaskIDs(), " "); got != "extract audit load report" {
		t.Errorf("TaskIDs = %s", got)
	}
	m := d.Model()
	if m.ID != "etl" || len(m.Tasks) != 4 || m.Tasks[2].ID != "load" || !m.Tasks[2].Critical ||
		len(m.Tasks[2].Upstream) != 1 || m.Tasks[3].Critical {
		t.Errorf("Model = %+v", m)
	}
	m.Tasks[2].Upstream[0] = "changed"
	if d.Model().Tasks[2].Upstream[0] != "extract" {
		t.Error("Model shares its slices with the DAG")
	}
}

func TestRegisterRefusesAnotherShapeUnderOneID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("etl", nil, tk("a"), tk("b", "a"))
	again, _ := workflow.NewDAG("etl", nil, tk("a"), tk("b", "a"))
	if err := h.engine.Register(again); err != nil {
		t.Errorf("re-registering the same shape: %v", err)
	}
	other, _ := workflow.NewDAG("etl", nil, tk("a"), tk("b"))
	if err := h.engine.Register(other); err == nil {
		t.Error("registering another shape under etl succeeded")
	}
	if _, err := h.engine.Run(h.ctx, "nope", workflow.RunOptions{}); !errors.Is(err, workflow.ErrUnknownDAG) {
		t.Errorf("Run(nope) = %v, want ErrUnknownDAG", err)
	}
}

// NewEngine refuses, naming the field, a lease or a poll interval so short
// that the engine would spin: LeaseDuration: 30, meant as seconds, is 30
// ns. It was taken, and the lease was renewed in a loop that never
// waited, lapsed before another instance could read it, and Work looked
// for abandoned runs as fast as the database answered.
func TestNewEngineRefusesDurationsItWouldSpinOn(t *testing.T) {
	t.Parallel()
	_, ws := openSQLite(t, ":memory:")
	for _, tc := range []struct {
		cfg  workflow.Config
		want string
	}{
		{workflow.Config{LeaseDuration: 30}, "Config.LeaseDuration must be 0 (30 s) or at least 1s, got 30ns"},
		{workflow.Config{LeaseDuration: 999 * time.Millisecond}, "Config.LeaseDuration must be 0 (30 s) or at least 1s"},
		{workflow.Config{LeaseDuration: -time.Second}, "Config.LeaseDuration must not be negative"},
		{workflow.Config{PollInterval: 5}, "Config.PollInterval must be 0 (half the lease) or at least 10ms, got 5ns"},
		{workflow.Config{PollInterval: -1}, "Config.PollInterval must not be negative"},
	} {
		if _, err := workflow.NewEngine(ws, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewEngine(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	for _, cfg := range []workflow.Config{{}, {LeaseDuration: workflow.MinLeaseDuration, PollInterval: workflow.MinPollInterval}} {
		if _, err := workflow.NewEngine(ws, cfg); err != nil {
			t.Errorf("NewEngine(%+v) = %v", cfg, err)
		}
	}
}
