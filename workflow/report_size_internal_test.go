package workflow

import (
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// TestReportOfALargeRun: the report of a run (Engine.Get, and what Run,
// Resume and ReplayTask return) looked each task up, and its attempts, by
// a pass over the whole snapshot: n² for n tasks, 5 s at 20,000 tasks and
// about a minute at 50,000, on every Get. The deadline only catches that:
// the report of 50,000 tasks of two attempts each now takes well under a
// second.
func TestReportOfALargeRun(t *testing.T) {
	t.Parallel()
	const n = 50_000
	snap := &wfstore.Snapshot{Run: wfstore.Run{ID: "r", DAGID: "wide", State: models.RunStateRunning,
		Upstream: map[string][]string{}}}
	for i := range n {
		id := fmt.Sprintf("task-%06d", i)
		state := models.TaskStateSuccess
		if i%2 == 1 {
			state = models.TaskStatePending
			snap.Run.Upstream[id] = []string{fmt.Sprintf("task-%06d", i-1)}
		} else {
			snap.Run.Upstream[id] = []string{}
		}
		snap.Tasks = append(snap.Tasks, wfstore.Task{RunID: "r", TaskID: id, State: state, Attempt: 2})
		for a := 1; a <= 2; a++ {
			snap.Attempts = append(snap.Attempts, wfstore.Attempt{RunID: "r", TaskID: id, Number: a,
				Outcome: wfstore.OutcomeFailed, Error: "boom"})
		}
	}
	done := make(chan *Run, 1)
	go func() { done <- newRun(nil, snap, time.Now()) }()
	var r *Run
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the report of a run of %d tasks took over 20 s", n)
	}
	if len(r.Tasks) != n {
		t.Fatalf("report has %d tasks, want %d", len(r.Tasks), n)
	}
	last := r.Task(fmt.Sprintf("task-%06d", n-1))
	if len(last.History) != 2 || last.History[1].Number != 2 ||
		last.Reason != "pending: ready, waiting for a free worker" {
		t.Errorf("last task: history %v, reason %q", last.History, last.Reason)
	}
}
