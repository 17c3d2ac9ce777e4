package wfstoretest

import (
	"bytes"
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// testReload: Reload returns what Load returns, but hands back the results
// and the input the reader holds (the same slices, not read again) while
// the rows show them unchanged, and reads a result again once its task has
// a new attempt or a result of another size.
func testReload(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	big := bytes.Repeat([]byte("x"), 256<<10)
	for i, id := range []string{"a", "b"} {
		at := time.Duration(i) * time.Second
		must(t, "start "+id, s.StartAttempt(ctx, "r", id, 1, lease("one", at)))
		must(t, "finish "+id, s.FinishAttempt(ctx, &wfstore.Finish{RunID: "r", TaskID: id, Attempt: 1, Owner: "one",
			Now: t0.Add(at), Outcome: wfstore.OutcomeSuccess, State: models.TaskStateSuccess, Result: big}))
	}
	prev := load(t, s, "r")
	again, err := s.Reload(ctx, prev)
	must(t, "reload", err)
	if !reflect.DeepEqual(again, prev) {
		t.Fatalf("Reload = %+v\nwant what Load returned, %+v", again, prev)
	}
	same := func(x, y []byte) bool { return len(x) > 0 && len(y) > 0 && &x[0] == &y[0] }
	for i := range again.Tasks {
		if p := prev.Task(again.Tasks[i].TaskID); p.Result != nil && !same(again.Tasks[i].Result, p.Result) {
			t.Errorf("Reload read the unchanged result of task %s again", p.TaskID)
		}
	}
	if !same(again.Run.Input, prev.Run.Input) {
		t.Error("Reload read the run's input again")
	}

	// Task a gets a new result of another size, b one of the same size
	// from a new attempt; c is moved as by hand.
	must(t, "mark a", func() error {
		_, err := s.Mark(ctx, "r", lease("one", 2*time.Second), []wfstore.Mark{
			{TaskID: "a", From: []models.TaskState{models.TaskStateSuccess}, To: models.TaskStateUpForRetry},
			{TaskID: "b", From: []models.TaskState{models.TaskStateSuccess}, To: models.TaskStateUpForRetry},
			{TaskID: "c", From: []models.TaskState{models.TaskStatePending}, To: models.TaskStateSkipped, Reason: "by hand"}})
		return err
	}())
	other := bytes.Repeat([]byte("y"), len(big))
	for id, result := range map[string][]byte{"a": []byte(`"small"`), "b": other} {
		must(t, "start "+id+" again", s.StartAttempt(ctx, "r", id, 2, lease("one", 3*time.Second)))
		must(t, "finish "+id+" again", s.FinishAttempt(ctx, &wfstore.Finish{RunID: "r", TaskID: id, Attempt: 2, Owner: "one",
			Now: t0.Add(3 * time.Second), Outcome: wfstore.OutcomeSuccess, State: models.TaskStateSuccess, Result: result}))
	}
	again, err = s.Reload(ctx, prev)
	must(t, "reload after changes", err)
	if want := load(t, s, "r"); !reflect.DeepEqual(again, want) {
		t.Errorf("Reload after changes = %+v\nwant what Load returns, %+v", again, want)
	}
}
