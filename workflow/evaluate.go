package workflow

import (
	"fmt"
	"strings"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// plan is what the engine must do next for a run, derived from nothing but
// the DAG, the stored states and the time. Because it is recomputed from
// the stored states (as the driver read them, with what it recorded since)
// after every change, a run resumed after a crash takes the same decisions
// the crashed instance would have.
type plan struct {
	// marks move tasks that can no longer run to upstream_failed or
	// skipped.
	marks []wfstore.Mark
	// ready are the tasks that may start now, in dependency order.
	ready []string
	// nextDue is when the earliest up_for_retry task not yet due is due.
	nextDue time.Time
	// stopCause is, under the fail policy, the failed task that stops the
	// run: running attempts are to be cancelled.
	stopCause string
	// done says every task has ended (once marks are applied); state and
	// reason are then the run's outcome.
	done   bool
	state  models.RunState
	reason string
}

// evaluate plans the next step of a run.
func evaluate(d *DAG, snap *wfstore.Snapshot, now time.Time) plan {
	var p plan
	states := make(map[string]models.TaskState, len(snap.Tasks))
	causes := make(map[string]string, len(snap.Tasks))
	tasks := make(map[string]*wfstore.Task, len(snap.Tasks))
	for i := range snap.Tasks {
		t := &snap.Tasks[i]
		states[t.TaskID], causes[t.TaskID], tasks[t.TaskID] = t.State, t.Cause, t
	}
	policy := d.policy()
	if policy == errorhandling.PropagationPolicyFail {
		p.stopCause = firstFailure(d, tasks)
	}
	for _, id := range d.order {
		switch states[id] {
		case models.TaskStatePending:
			if p.stopCause != "" {
				p.skip(id, p.stopCause, reasonStopped(p.stopCause), states, causes)
				continue
			}
			blocked, waiting := d.blockedBy(id, states)
			switch {
			case blocked != "":
				root := blocked
				reason := fmt.Sprintf("skipped: upstream task %s failed under %s", blocked, policy)
				if states[blocked] != models.TaskStateFailed {
					root = causes[blocked]
					reason = fmt.Sprintf("skipped: upstream task %s did not run because %s failed, under %s",
						blocked, root, policy)
				}
				p.marks = append(p.marks, wfstore.Mark{TaskID: id, From: []models.TaskState{models.TaskStatePending},
					To: models.TaskStateUpstreamFailed, Reason: reason, Cause: root})
				states[id], causes[id] = models.TaskStateUpstreamFailed, root
			case !waiting:
				p.ready = append(p.ready, id)
			}
		case models.TaskStateUpForRetry:
			t := tasks[id]
			switch {
			case p.stopCause != "":
				p.skip(id, p.stopCause, reasonStopped(p.stopCause), states, causes)
			case !t.NextAttemptAt.After(now):
				p.ready = append(p.ready, id)
			case p.nextDue.IsZero() || t.NextAttemptAt.Before(p.nextDue):
				p.nextDue = t.NextAttemptAt
			}
		}
	}
	p.done = true
	for _, id := range d.order {
		if !states[id].Terminal() {
			p.done = false
		}
	}
	if p.done {
		p.state, p.reason = outcome(d, states)
	}
	return p
}

// skip marks a pending or up_for_retry task skipped because the run
// stopped.
func (p *plan) skip(id, cause, reason string, states map[string]models.TaskState, causes map[string]string) {
	p.marks = append(p.marks, wfstore.Mark{TaskID: id,
		From: []models.TaskState{models.TaskStatePending, models.TaskStateUpForRetry},
		To:   models.TaskStateSkipped, Reason: reason, Cause: cause})
	states[id], causes[id] = models.TaskStateSkipped, cause
}

// blockedBy returns the first upstream task whose failure (failed,
// upstream_failed or skipped) id does not tolerate, and whether some
// upstream task has not ended.
func (d *DAG) blockedBy(id string, states map[string]models.TaskState) (blocked string, waiting bool) {
	for _, up := range d.upstream(id) {
		switch st := states[up]; {
		case st == models.TaskStateSuccess:
		case st.Terminal():
			if blocked == "" && !d.allow[[2]string{id, up}] {
				blocked = up
			}
		default:
			waiting = true
		}
	}
	return blocked, waiting
}

// firstFailure returns the failed task that ended first (ties in
// dependency order), or "".
func firstFailure(d *DAG, tasks map[string]*wfstore.Task) string {
	first := ""
	var at time.Time
	for _, id := range d.order {
		t := tasks[id]
		if t != nil && t.State == models.TaskStateFailed && (first == "" || t.EndedAt.Before(at)) {
			first, at = id, t.EndedAt
		}
	}
	return first
}

func reasonStopped(cause string) string {
	return fmt.Sprintf("skipped: the run stopped when task %s failed under %s", cause, errorhandling.PropagationPolicyFail)
}

func reasonCancelled(cause string) string {
	return fmt.Sprintf("cancelled while running: the run stopped when task %s failed under %s",
		cause, errorhandling.PropagationPolicyFail)
}

// outcome decides how a run whose tasks have all ended ends, and says why.
func outcome(d *DAG, states map[string]models.TaskState) (models.RunState, string) {
	var failed, notRun, criticalMissed []string
	for _, id := range d.order {
		switch states[id] {
		case models.TaskStateSuccess:
			continue
		case models.TaskStateFailed:
			failed = append(failed, id)
		default:
			notRun = append(notRun, id)
		}
		if d.critical[id] {
			criticalMissed = append(criticalMissed, id)
		}
	}
	if len(failed)+len(notRun) == 0 {
		return models.RunStateSuccess, fmt.Sprintf("all %d tasks succeeded", len(d.order))
	}
	policy := d.policy()
	var parts []string
	if len(failed) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s failed under %s", plural(len(failed), "task", "tasks"), list(failed), policy))
	}
	if len(notRun) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s did not run", plural(len(notRun), "task", "tasks"), list(notRun)))
	}
	why := strings.Join(parts, "; ")
	switch {
	case policy == errorhandling.PropagationPolicyFail:
		return models.RunStateFailed, why + "; the fail policy stops the run at the first failure"
	case len(criticalMissed) > 0:
		return models.RunStateFailed, why + fmt.Sprintf("; critical %s %s did not succeed",
			plural(len(criticalMissed), "task", "tasks"), list(criticalMissed))
	case !d.prop.AllowPartialSuccess:
		return models.RunStateFailed, why + "; partial success is not allowed"
	}
	crit := "there are no critical tasks"
	if len(d.critical) > 0 {
		var cs []string
		for _, id := range d.order {
			if d.critical[id] {
				cs = append(cs, id)
			}
		}
		crit = fmt.Sprintf("every critical task (%s) succeeded", list(cs))
	}
	return models.RunStatePartialSuccess, fmt.Sprintf("partial success: %s; %s and partial success is allowed", why, crit)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
