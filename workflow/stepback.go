package workflow

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// rebaseRetries moves the retries scheduled before the clock was stepped
// back to their delay from now. A retry's due time is stored as a wall
// time, NextAttemptAt, set when its attempt ended (EndedAt) to EndedAt plus
// the delay; a task that ended after now was scheduled on a clock since
// stepped back, and its retry waited the step's length on top of its
// delay: a retry due in a minute when the clock went back an hour ran an
// hour and a minute later. Its due time becomes now plus its whole delay,
// once per attempt for this driver (its EndedAt stays ahead of the clock
// until the clock catches up, and each move would shorten the delay).
func (dr *driver) rebaseRetries(now time.Time) error {
	var marks []wfstore.Mark
	var was []time.Time
	for i := range dr.snap.Tasks {
		t := &dr.snap.Tasks[i]
		if t.State != models.TaskStateUpForRetry || !t.EndedAt.After(now) || !t.NextAttemptAt.After(now) {
			continue
		}
		key := attemptKey{t.TaskID, t.Attempt}
		if dr.rebased[key] {
			continue
		}
		dr.rebased[key] = true
		due := now.Add(max(t.NextAttemptAt.Sub(t.EndedAt), 0))
		if !due.Before(t.NextAttemptAt) {
			continue
		}
		reason, _, _ := strings.Cut(t.Reason, movedBack)
		marks = append(marks, wfstore.Mark{TaskID: t.TaskID, From: []models.TaskState{models.TaskStateUpForRetry},
			To: models.TaskStateUpForRetry, Cause: t.Cause, NextAttemptAt: due,
			Reason: fmt.Sprintf("%s%s%s", reason, movedBack, due.Format(time.RFC3339))})
		was = append(was, t.NextAttemptAt)
	}
	if len(marks) == 0 {
		return nil
	}
	if err := dr.storeMarks(marks); err != nil {
		return err
	}
	for i, m := range marks {
		dr.e.log.LogAttrs(dr.ctx, slog.LevelWarn, "the clock went back: a retry scheduled before is moved to its delay from now",
			slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id), slog.String("task_id", m.TaskID),
			slog.Time("was", was[i]), slog.Time("next_attempt_at", m.NextAttemptAt))
		dr.e.emit(Event{Time: now, RunID: dr.runID, DAGID: dr.d.id, TaskID: m.TaskID, TaskState: m.To, Reason: m.Reason,
			NextAttemptAt: m.NextAttemptAt})
	}
	return nil
}

// movedBack joins a retry's reason and the time rebaseRetries moved it to.
const movedBack = "; the clock went back, so it is moved to "
