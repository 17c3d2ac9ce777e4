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

// scratch is evaluate's memory between calls for one run: where each
// task of the DAG is in the snapshot, and the working states. evaluate
// runs after every change to a run, so nothing it does may cost more than
// a pass over slices: with maps built on each call, a run of n tasks cost
// n² map operations (see graph).
type scratch struct {
	snap   *wfstore.Snapshot // the snapshot at was built for
	at     []int             // by position in the DAG's order: index in snap.Tasks, or -1
	states []models.TaskState
	causes []string
}

// index points sc at snap, unless it already is.
func (sc *scratch) index(d *DAG, snap *wfstore.Snapshot) {
	n := len(d.order)
	if sc.snap == snap && len(sc.at) == n {
		return
	}
	sc.snap = snap
	sc.at = make([]int, n)
	for i := range sc.at {
		sc.at[i] = -1
	}
	for i, t := range snap.Tasks {
		if p, ok := d.graph.pos[t.TaskID]; ok {
			sc.at[p] = i
		}
	}
	sc.states, sc.causes = make([]models.TaskState, n), make([]string, n)
}

// task returns the snapshot's row of the task at position p, or nil.
func (sc *scratch) task(p int) *wfstore.Task {
	if i := sc.at[p]; i >= 0 {
		return &sc.snap.Tasks[i]
	}
	return nil
}

// evaluate plans the next step of a run. sc is the run's scratch (kept
// between calls; the zero value is ready to use).
func evaluate(d *DAG, snap *wfstore.Snapshot, now time.Time, sc *scratch) plan {
	var p plan
	sc.index(d, snap)
	states, causes := sc.states, sc.causes
	for i := range states {
		if t := sc.task(i); t != nil {
			states[i], causes[i] = t.State, t.Cause
		} else {
			states[i], causes[i] = "", ""
		}
	}
	g := &d.graph
	policy := d.policy()
	stop := -1
	if policy == errorhandling.PropagationPolicyFail {
		stop = firstFailure(sc)
		if stop >= 0 {
			p.stopCause = d.order[stop]
		}
	}
	for i, id := range d.order {
		switch states[i] {
		case models.TaskStatePending:
			if stop >= 0 {
				p.skip(id, p.stopCause, reasonStopped(p.stopCause))
				states[i], causes[i] = models.TaskStateSkipped, p.stopCause
				continue
			}
			blocked, waiting := g.blockedBy(i, states)
			switch {
			case blocked >= 0:
				name, root := d.order[blocked], d.order[blocked]
				reason := fmt.Sprintf("skipped: upstream task %s failed under %s", name, policy)
				if states[blocked] != models.TaskStateFailed {
					root = causes[blocked]
					reason = fmt.Sprintf("skipped: upstream task %s did not run because %s failed, under %s",
						name, root, policy)
				}
				p.marks = append(p.marks, wfstore.Mark{TaskID: id, From: []models.TaskState{models.TaskStatePending},
					To: models.TaskStateUpstreamFailed, Reason: reason, Cause: root})
				states[i], causes[i] = models.TaskStateUpstreamFailed, root
			case !waiting:
				p.ready = append(p.ready, id)
			}
		case models.TaskStateUpForRetry:
			t := sc.task(i)
			switch {
			case stop >= 0:
				p.skip(id, p.stopCause, reasonStopped(p.stopCause))
				states[i], causes[i] = models.TaskStateSkipped, p.stopCause
			case !t.NextAttemptAt.After(now):
				p.ready = append(p.ready, id)
			case p.nextDue.IsZero() || t.NextAttemptAt.Before(p.nextDue):
				p.nextDue = t.NextAttemptAt
			}
		}
	}
	p.done = true
	for _, st := range states {
		if !st.Terminal() {
			p.done = false
			break
		}
	}
	if p.done {
		p.state, p.reason = outcome(d, states)
	}
	return p
}

// skip marks a pending or up_for_retry task skipped because the run
// stopped.
func (p *plan) skip(id, cause, reason string) {
	p.marks = append(p.marks, wfstore.Mark{TaskID: id,
		From: []models.TaskState{models.TaskStatePending, models.TaskStateUpForRetry},
		To:   models.TaskStateSkipped, Reason: reason, Cause: cause})
}

// blockedBy returns the position of the first upstream task whose failure
// (failed, upstream_failed or skipped) the task at position i does not
// tolerate, or -1, and whether some upstream task has not ended.
func (g *graph) blockedBy(i int, states []models.TaskState) (blocked int, waiting bool) {
	blocked = -1
	for k, up := range g.ups[i] {
		switch st := states[up]; {
		case st == models.TaskStateSuccess:
		case st.Terminal():
			if blocked < 0 && !g.allowed[i][k] {
				blocked = up
			}
		default:
			waiting = true
		}
	}
	return blocked, waiting
}

// firstFailure returns the position of the failed task that ended first
// (ties in dependency order), or -1.
func firstFailure(sc *scratch) int {
	first := -1
	var at time.Time
	for i := range sc.at {
		t := sc.task(i)
		if t != nil && t.State == models.TaskStateFailed && (first < 0 || t.EndedAt.Before(at)) {
			first, at = i, t.EndedAt
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
func outcome(d *DAG, states []models.TaskState) (models.RunState, string) {
	var failed, notRun, criticalMissed []string
	for i, id := range d.order {
		switch states[i] {
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
