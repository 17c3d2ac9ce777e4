package errorhandling

import (
	"context"
	"fmt"
	"slices"

	"github.com/backstophq/backstop/workflow/models"
)

// PropagationPolicy says what a task's final failure does to the rest of its
// DAG run.
type PropagationPolicy string

// The propagation policies.
const (
	// PropagationPolicyFail stops the whole run at the first task failure:
	// tasks not yet started are skipped and the run fails.
	PropagationPolicyFail PropagationPolicy = "fail"
	// PropagationPolicySkipDownstream marks every task downstream of the
	// failed one upstream_failed; branches that do not depend on it go on.
	// It is the default.
	PropagationPolicySkipDownstream PropagationPolicy = "skip_downstream"
	// PropagationPolicyAllowPartial lets independent branches go on like
	// skip_downstream, and is meant to be used with AllowPartialSuccess so
	// that a run whose critical tasks all succeeded ends partial_success.
	PropagationPolicyAllowPartial PropagationPolicy = "allow_partial"
)

// Valid reports whether p is one of the policies. The empty policy is not
// valid here; PropagationConfig reads it as the default.
func (p PropagationPolicy) Valid() bool {
	switch p {
	case PropagationPolicyFail, PropagationPolicySkipDownstream, PropagationPolicyAllowPartial:
		return true
	}
	return false
}

// PropagationConfig controls how task failures propagate through a DAG run.
// The zero value (and a nil *PropagationConfig) is the default: skip
// downstream, no partial success, no critical tasks, no callbacks.
type PropagationConfig struct {
	// Policy is what a task failure does to the rest of the run. Empty
	// means PropagationPolicySkipDownstream.
	Policy PropagationPolicy
	// AllowPartialSuccess ends a run in which some tasks failed but every
	// critical task succeeded as partial_success instead of failed. It
	// cannot be combined with PropagationPolicyFail, which stops the run at
	// the first failure. Default false.
	AllowPartialSuccess bool
	// CriticalTasks are the IDs of tasks that must succeed for the run to
	// succeed, in addition to those with models.Task.Critical set. A failed
	// critical task fails the run whatever AllowPartialSuccess says. Empty
	// IDs are rejected by Validate.
	CriticalTasks []string
	// OnTaskFailure, when set, is called once for each task that has failed
	// for good (its retries are used up). Its error is logged by the engine
	// and does not change the task's outcome. It must be safe for
	// concurrent use.
	OnTaskFailure func(ctx context.Context, task *models.Task, ti *models.TaskInstance, err error) error
	// OnDAGFailure, when set, is called once when a run ends failed. Its
	// error is logged by the engine and does not change the run's outcome.
	OnDAGFailure func(ctx context.Context, dagRun *models.DAGRun, err error) error
}

// DefaultPropagationConfig returns the default configuration: the
// skip_downstream policy, no partial success, no critical tasks and no
// callbacks.
func DefaultPropagationConfig() *PropagationConfig {
	return &PropagationConfig{Policy: PropagationPolicySkipDownstream}
}

// EffectivePolicy returns the policy in force: Policy, or
// PropagationPolicySkipDownstream when Policy is empty or c is nil.
func (c *PropagationConfig) EffectivePolicy() PropagationPolicy {
	if c == nil || c.Policy == "" {
		return PropagationPolicySkipDownstream
	}
	return c.Policy
}

// Validate reports the first problem with c, naming the field at fault: an
// unknown Policy, AllowPartialSuccess with PropagationPolicyFail, or an
// empty ID in CriticalTasks. A nil config is valid (it is the default).
func (c *PropagationConfig) Validate() error {
	if c == nil {
		return nil
	}
	if c.Policy != "" && !c.Policy.Valid() {
		return fmt.Errorf("errorhandling: PropagationConfig.Policy: unknown policy %q (want %q, %q or %q)",
			c.Policy, PropagationPolicyFail, PropagationPolicySkipDownstream, PropagationPolicyAllowPartial)
	}
	if c.AllowPartialSuccess && c.EffectivePolicy() == PropagationPolicyFail {
		return fmt.Errorf("errorhandling: PropagationConfig.AllowPartialSuccess: cannot be true with policy %q, which stops the run at the first failure", PropagationPolicyFail)
	}
	for i, id := range c.CriticalTasks {
		if id == "" {
			return fmt.Errorf("errorhandling: PropagationConfig.CriticalTasks[%d]: empty task ID", i)
		}
	}
	return nil
}

// IsCritical reports whether taskID is listed in CriticalTasks. A nil
// config has no critical tasks.
func (c *PropagationConfig) IsCritical(taskID string) bool {
	return c != nil && slices.Contains(c.CriticalTasks, taskID)
}

// IsCriticalTask reports whether task is critical: marked Critical itself or
// listed in CriticalTasks. A nil task is not critical.
func (c *PropagationConfig) IsCriticalTask(task *models.Task) bool {
	return task != nil && (task.Critical || c.IsCritical(task.ID))
}
