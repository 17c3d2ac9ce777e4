package errorhandling_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow/models"
)

func TestPropagationPolicyValues(t *testing.T) {
	t.Parallel()
	for p, want := range map[eh.PropagationPolicy]string{
		eh.PropagationPolicyFail:           "fail",
		eh.PropagationPolicySkipDownstream: "skip_downstream",
		eh.PropagationPolicyAllowPartial:   "allow_partial",
	} {
		if string(p) != want || !p.Valid() {
			t.Errorf("policy %q: want %q and valid", p, want)
		}
	}
	for _, p := range []eh.PropagationPolicy{"", "Fail", "skip-downstream", "partial"} {
		if p.Valid() {
			t.Errorf("PropagationPolicy(%q).Valid() = true", p)
		}
	}
}

func TestDefaultPropagationConfig(t *testing.T) {
	t.Parallel()
	c := eh.DefaultPropagationConfig()
	if c.Policy != eh.PropagationPolicySkipDownstream || c.AllowPartialSuccess || len(c.CriticalTasks) != 0 ||
		c.OnTaskFailure != nil || c.OnDAGFailure != nil {
		t.Errorf("DefaultPropagationConfig() = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
	if c2 := eh.DefaultPropagationConfig(); c2 == c {
		t.Error("DefaultPropagationConfig returns a shared value")
	}
	for _, c := range []*eh.PropagationConfig{nil, {}} {
		if got := c.EffectivePolicy(); got != eh.PropagationPolicySkipDownstream {
			t.Errorf("(%v).EffectivePolicy() = %q", c, got)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("(%v).Validate() = %v", c, err)
		}
	}
	if got := (&eh.PropagationConfig{Policy: eh.PropagationPolicyFail}).EffectivePolicy(); got != eh.PropagationPolicyFail {
		t.Errorf("EffectivePolicy() = %q, want fail", got)
	}
}

func TestPropagationConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		c       eh.PropagationConfig
		wantErr string // a substring naming the field; empty for valid
	}{
		{"fail", eh.PropagationConfig{Policy: eh.PropagationPolicyFail}, ""},
		{"skip downstream with partial", eh.PropagationConfig{Policy: eh.PropagationPolicySkipDownstream, AllowPartialSuccess: true}, ""},
		{"seed's allow partial", eh.PropagationConfig{
			Policy: eh.PropagationPolicyAllowPartial, AllowPartialSuccess: true, CriticalTasks: []string{"validate", "commit"},
		}, ""},
		{"allow partial without partial success", eh.PropagationConfig{Policy: eh.PropagationPolicyAllowPartial}, ""},
		{"empty policy with partial", eh.PropagationConfig{AllowPartialSuccess: true}, ""},
		{"unknown policy", eh.PropagationConfig{Policy: "retry_forever"}, "PropagationConfig.Policy"},
		{"wrong case", eh.PropagationConfig{Policy: "FAIL"}, "PropagationConfig.Policy"},
		{"fail with partial success", eh.PropagationConfig{Policy: eh.PropagationPolicyFail, AllowPartialSuccess: true}, "PropagationConfig.AllowPartialSuccess"},
		{"empty critical ID", eh.PropagationConfig{CriticalTasks: []string{"a", ""}}, "PropagationConfig.CriticalTasks[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestPropagationConfigCritical(t *testing.T) {
	t.Parallel()
	c := &eh.PropagationConfig{CriticalTasks: []string{"validate", "commit"}}
	for id, want := range map[string]bool{"validate": true, "commit": true, "load": false, "": false, "Commit": false} {
		if got := c.IsCritical(id); got != want {
			t.Errorf("IsCritical(%q) = %v, want %v", id, got, want)
		}
	}
	var nilConfig *eh.PropagationConfig
	if nilConfig.IsCritical("validate") {
		t.Error("nil config has critical tasks")
	}
	tests := []struct {
		task *models.Task
		want bool
	}{
		{&models.Task{ID: "commit"}, true},
		{&models.Task{ID: "load", Critical: true}, true},
		{&models.Task{ID: "load"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := c.IsCriticalTask(tt.task); got != tt.want {
			t.Errorf("IsCriticalTask(%+v) = %v, want %v", tt.task, got, tt.want)
		}
	}
	if !nilConfig.IsCriticalTask(&models.Task{ID: "x", Critical: true}) {
		t.Error("nil config ignores Task.Critical")
	}
}

// TestPropagationCallbacks checks the callbacks take the seed's signatures
// and receive what they are given.
func TestPropagationCallbacks(t *testing.T) {
	t.Parallel()
	var gotTask, gotRun string
	var gotErr error
	c := &eh.PropagationConfig{
		Policy: eh.PropagationPolicySkipDownstream,
		OnTaskFailure: func(ctx context.Context, task *models.Task, ti *models.TaskInstance, err error) error {
			gotTask, gotErr = task.ID+"/"+ti.ID, err
			return nil
		},
		OnDAGFailure: func(ctx context.Context, dagRun *models.DAGRun, err error) error {
			gotRun = dagRun.ID
			return errors.New("alert failed")
		},
	}
	boom := errors.New("boom")
	ctx := context.Background()
	if err := c.OnTaskFailure(ctx, &models.Task{ID: "load"}, &models.TaskInstance{ID: "ti-1", State: models.TaskStateFailed}, boom); err != nil {
		t.Fatal(err)
	}
	if err := c.OnDAGFailure(ctx, &models.DAGRun{ID: "run-1", State: models.RunStateFailed}, boom); err == nil {
		t.Error("OnDAGFailure's error was lost")
	}
	if gotTask != "load/ti-1" || gotErr != boom || gotRun != "run-1" {
		t.Errorf("callbacks saw %q, %v, %q", gotTask, gotErr, gotRun)
	}
}
