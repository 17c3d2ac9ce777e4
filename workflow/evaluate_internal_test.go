package workflow

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// evaluateByMaps is evaluate as it was written before it kept its memory
// by position (one map per call for the states, the causes and the rows):
// the reference the positional one must agree with.
func evaluateByMaps(d *DAG, snap *wfstore.Snapshot, now time.Time) plan {
	var p plan
	states := map[string]models.TaskState{}
	causes := map[string]string{}
	tasks := map[string]*wfstore.Task{}
	for i := range snap.Tasks {
		t := &snap.Tasks[i]
		states[t.TaskID], causes[t.TaskID], tasks[t.TaskID] = t.State, t.Cause, t
	}
	policy := d.policy()
	if policy == errorhandling.PropagationPolicyFail {
		var at time.Time
		for _, id := range d.order {
			if t := tasks[id]; t != nil && t.State == models.TaskStateFailed && (p.stopCause == "" || t.EndedAt.Before(at)) {
				p.stopCause, at = id, t.EndedAt
			}
		}
	}
	skip := func(id string) {
		p.skip(id, p.stopCause, reasonStopped(p.stopCause))
		states[id], causes[id] = models.TaskStateSkipped, p.stopCause
	}
	for _, id := range d.order {
		switch states[id] {
		case models.TaskStatePending:
			if p.stopCause != "" {
				skip(id)
				continue
			}
			blocked, waiting := "", false
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
				skip(id)
			case !t.NextAttemptAt.After(now):
				p.ready = append(p.ready, id)
			case p.nextDue.IsZero() || t.NextAttemptAt.Before(p.nextDue):
				p.nextDue = t.NextAttemptAt
			}
		}
	}
	p.done = true
	byPos := make([]models.TaskState, len(d.order))
	for i, id := range d.order {
		byPos[i] = states[id]
		if !states[id].Terminal() {
			p.done = false
		}
	}
	if p.done {
		p.state, p.reason = outcome(d, byPos)
	}
	return p
}

// TestEvaluateAgreesWithMaps: on random DAGs (random dependencies, tasks
// allowed to fail, critical tasks and policy) in random states, with the
// snapshot's rows in random order and some missing, evaluate plans what
// the map-based reference plans, also when its scratch is reused for
// another state of the same run.
func TestEvaluateAgreesWithMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	all := []models.TaskState{models.TaskStatePending, models.TaskStateRunning, models.TaskStateUpForRetry,
		models.TaskStateSuccess, models.TaskStateFailed, models.TaskStateUpstreamFailed, models.TaskStateSkipped}
	policies := []errorhandling.PropagationPolicy{errorhandling.PropagationPolicyFail,
		errorhandling.PropagationPolicySkipDownstream, errorhandling.PropagationPolicyAllowPartial}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	noop := func(context.Context, *TaskContext) error { return nil }
	compared := 0
	for range 400 {
		n := 1 + rng.IntN(25)
		tasks := make([]Task, n)
		for i := range tasks {
			tasks[i] = Task{ID: fmt.Sprintf("t%02d", i), Run: noop, Critical: rng.IntN(6) == 0}
			for j := range i {
				if rng.IntN(4) == 0 {
					tasks[i].Upstream = append(tasks[i].Upstream, tasks[j].ID)
					if rng.IntN(3) == 0 {
						tasks[i].AllowFailure = append(tasks[i].AllowFailure, tasks[j].ID)
					}
				}
			}
		}
		rng.Shuffle(n, func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
		prop := &errorhandling.PropagationConfig{Policy: policies[rng.IntN(len(policies))]}
		prop.AllowPartialSuccess = prop.Policy != errorhandling.PropagationPolicyFail && rng.IntN(2) == 0
		d, err := NewDAG("random", prop, tasks...)
		if err != nil {
			t.Fatal(err)
		}
		var sc scratch
		for range 3 { // states of one run, evaluated with one scratch
			snap := &wfstore.Snapshot{}
			for _, task := range tasks {
				if rng.IntN(40) == 0 {
					continue // no row: never ready, never done
				}
				snap.Tasks = append(snap.Tasks, wfstore.Task{TaskID: task.ID, State: all[rng.IntN(len(all))],
					Cause:         tasks[rng.IntN(n)].ID,
					EndedAt:       now.Add(time.Duration(rng.IntN(5)) * time.Second),
					NextAttemptAt: now.Add(time.Duration(rng.IntN(5)-2) * time.Second)})
			}
			want := evaluateByMaps(d, snap, now)
			got := evaluate(d, snap, now, &sc)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("DAG %v (%+v), rows %+v:\nevaluate  %+v\nreference %+v", tasks, prop, snap.Tasks, got, want)
			}
			if got.done || len(got.marks) > 0 || got.stopCause != "" {
				compared++
			}
			// the driver changes its snapshot's rows in place
			for i := range snap.Tasks {
				if rng.IntN(3) == 0 {
					snap.Tasks[i].State = all[rng.IntN(len(all))]
				}
			}
			if got, want := evaluate(d, snap, now, &sc), evaluateByMaps(d, snap, now); !reflect.DeepEqual(got, want) {
				t.Fatalf("rows changed in place: DAG %v (%+v), rows %+v:\nevaluate  %+v\nreference %+v",
					tasks, prop, snap.Tasks, got, want)
			}
		}
	}
	if compared < 100 {
		t.Fatalf("only %d plans ended, marked or stopped a run: the random states are too tame", compared)
	}
}
