package wfstoretest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

func finish(owner string, attempt int, outcome wfstore.Outcome, state models.TaskState) *wfstore.Finish {
	return &wfstore.Finish{RunID: "r", TaskID: "a", Attempt: attempt, Owner: owner, Now: t0.Add(2 * time.Second),
		Outcome: outcome, State: state}
}

func testFinishSuccess(t *testing.T, h Harness) {
	s, count := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	must(t, "start", s.StartAttempt(ctx, "r", "a", 1, lease("one", 0)))

	// A fenced-out success writes nothing, messages included.
	f := finish("two", 1, wfstore.OutcomeSuccess, models.TaskStateSuccess)
	f.Messages = []*outbox.Message{msg("suite.fenced")}
	mustIs(t, "finish by a stranger", s.FinishAttempt(ctx, f), wfstore.ErrConflict)
	if n := count("suite.fenced"); n != 0 {
		t.Errorf("a fenced-out success wrote %d messages", n)
	}

	// A failing TxFunc rolls the success back.
	f = finish("one", 1, wfstore.OutcomeSuccess, models.TaskStateSuccess)
	f.Messages = []*outbox.Message{msg("suite.rolled-back")}
	boom := errors.New("boom")
	f.TxFuncs = []func(context.Context, any) error{func(context.Context, any) error { return boom }}
	mustIs(t, "finish with a failing TxFunc", s.FinishAttempt(ctx, f), boom)
	if a := load(t, s, "r").Task("a"); a.State != models.TaskStateRunning || count("suite.rolled-back") != 0 {
		t.Errorf("after a rolled-back success: task %s, %d messages", a.State, count("suite.rolled-back"))
	}

	f = finish("one", 1, wfstore.OutcomeSuccess, models.TaskStateSuccess)
	f.Result = []byte(`{"rows":3}`)
	f.Messages = []*outbox.Message{msg("suite.ok"), msg("suite.ok")}
	var txType string
	f.TxFuncs = []func(context.Context, any) error{func(_ context.Context, tx any) error {
		txType = fmt.Sprintf("%T", tx)
		return nil
	}}
	must(t, "finish", s.FinishAttempt(ctx, f))
	if txType == "" || txType == "<nil>" {
		t.Error("the TxFunc did not get the transaction")
	}
	if n := count("suite.ok"); n != 2 {
		t.Errorf("the success wrote %d messages, want 2", n)
	}
	snap := load(t, s, "r")
	a := snap.Task("a")
	if a.State != models.TaskStateSuccess || string(a.Result) != `{"rows":3}` || a.Owner != "" ||
		!a.EndedAt.Equal(t0.Add(2*time.Second)) || a.Error != "" {
		t.Errorf("succeeded task = %+v", a)
	}
	if at := snap.Attempts[0]; at.Outcome != wfstore.OutcomeSuccess || !at.EndedAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("attempt = %+v", at)
	}
	mustIs(t, "finish twice", s.FinishAttempt(ctx, finish("one", 1, wfstore.OutcomeSuccess, models.TaskStateSuccess)),
		wfstore.ErrConflict)
	if n := count("suite.ok"); n != 2 {
		t.Errorf("a second finish wrote messages: %d", n)
	}
}

func testFinishFailureAndLost(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	must(t, "start", s.StartAttempt(ctx, "r", "a", 1, lease("one", 0)))
	f := finish("one", 1, wfstore.OutcomeFailed, models.TaskStateUpForRetry)
	f.Failures, f.Error, f.Reason, f.NextAttemptAt = 1, "boom", "up for retry", t0.Add(time.Hour)
	must(t, "finish failed", s.FinishAttempt(ctx, f))
	a := load(t, s, "r").Task("a")
	if a.State != models.TaskStateUpForRetry || a.Failures != 1 || a.Error != "boom" || a.Reason != "up for retry" ||
		!a.NextAttemptAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("failed task = %+v", a)
	}

	// A lost attempt keeps the task's last error and failures.
	must(t, "renew", s.RenewRun(ctx, "r", lease("one", time.Hour)))
	must(t, "start 2", s.StartAttempt(ctx, "r", "a", 2, lease("one", time.Hour)))
	f = finish("one", 2, wfstore.OutcomeLost, models.TaskStateUpForRetry)
	f.Failures, f.Error, f.NextAttemptAt = 1, "lost: instance one stopped", t0.Add(2*time.Hour)
	must(t, "finish lost", s.FinishAttempt(ctx, f))
	snap := load(t, s, "r")
	a = snap.Task("a")
	if a.Error != "boom" || a.Failures != 1 || a.Attempt != 2 {
		t.Errorf("after a lost attempt: %+v", a)
	}
	if len(snap.Attempts) != 2 || snap.Attempts[1].Outcome != wfstore.OutcomeLost || snap.Attempts[1].Error != "lost: instance one stopped" {
		t.Errorf("attempts = %+v", snap.Attempts)
	}
	mustIs(t, "dead letter by a stranger", s.SetDeadLetter(ctx, "r", "a", "entry-0", lease("two", time.Hour)), wfstore.ErrLeaseLost)
	must(t, "dead letter", s.SetDeadLetter(ctx, "r", "a", "entry-1", lease("one", time.Hour)))
	if load(t, s, "r").Task("a").DeadLetter != "entry-1" {
		t.Error("SetDeadLetter did not stick")
	}
}

func testMark(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	must(t, "start", s.StartAttempt(ctx, "r", "a", 1, lease("one", 0)))
	marks := []wfstore.Mark{
		{TaskID: "a", From: []models.TaskState{models.TaskStatePending}, To: models.TaskStateSkipped, Reason: "no"},
		{TaskID: "b", From: []models.TaskState{models.TaskStatePending, models.TaskStateUpForRetry},
			To: models.TaskStateUpstreamFailed, Reason: "skipped: upstream task a failed", Cause: "a"},
	}
	n, err := s.Mark(ctx, "r", lease("one", 0), marks)
	if err != nil || n != 1 {
		t.Fatalf("Mark = %d, %v; want 1 (a is running, not pending)", n, err)
	}
	snap := load(t, s, "r")
	if b := snap.Task("b"); b.State != models.TaskStateUpstreamFailed || b.Cause != "a" || b.Reason != "skipped: upstream task a failed" {
		t.Errorf("marked task = %+v", b)
	}
	if snap.Task("a").State != models.TaskStateRunning {
		t.Error("a running task was marked")
	}
	_, err = s.Mark(ctx, "r", lease("two", 0), marks[1:])
	mustIs(t, "mark by a stranger", err, wfstore.ErrLeaseLost)
}

func testEndAndReopen(t *testing.T, h Harness) {
	s, _ := h.New(t)
	ctx := context.Background()
	newRun(t, s)
	reopen := &wfstore.Reopen{RunID: "r", TaskID: "a", EntryID: "e1", Lease: lease("two", time.Hour), Reason: "replayed"}
	mustIs(t, "reopen a running run", s.Reopen(ctx, reopen), wfstore.ErrConflict)

	must(t, "start", s.StartAttempt(ctx, "r", "a", 1, lease("one", 0)))
	f := finish("one", 1, wfstore.OutcomeFailed, models.TaskStateFailed)
	f.Failures, f.Error = 1, "boom"
	must(t, "fail", s.FinishAttempt(ctx, f))
	must(t, "dead letter", s.SetDeadLetter(ctx, "r", "a", "e1", lease("one", 0)))
	marks := []wfstore.Mark{
		{TaskID: "b", From: []models.TaskState{models.TaskStatePending}, To: models.TaskStateUpstreamFailed, Cause: "a"},
		{TaskID: "c", From: []models.TaskState{models.TaskStatePending}, To: models.TaskStateSkipped, Cause: "other"},
	}
	if _, err := s.Mark(ctx, "r", lease("one", 0), marks); err != nil {
		t.Fatal(err)
	}
	must(t, "dead letter of a dependent", s.SetDeadLetter(ctx, "r", "b", "e-b", lease("one", 0)))
	ok, err := s.EndRun(ctx, "r", lease("one", time.Minute), models.RunStateFailed, "a failed")
	if !ok || err != nil {
		t.Fatalf("EndRun = %v, %v", ok, err)
	}
	mustIs(t, "dead letter after the run ended", s.SetDeadLetter(ctx, "r", "a", "e9", lease("one", 0)), wfstore.ErrLeaseLost)
	if ok, _ := s.EndRun(ctx, "r", lease("one", time.Minute), models.RunStateFailed, "again"); ok {
		t.Error("a second EndRun reported ending the run")
	}
	r := load(t, s, "r").Run
	if r.State != models.RunStateFailed || r.Reason != "a failed" || r.Owner != "" || !r.EndedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("ended run = %+v", r)
	}
	bad := *reopen
	bad.EntryID = "e2"
	mustIs(t, "reopen with another entry", s.Reopen(ctx, &bad), wfstore.ErrConflict)
	must(t, "reopen", s.Reopen(ctx, reopen))
	snap := load(t, s, "r")
	if r := snap.Run; r.State != models.RunStateRunning || r.Owner != "two" || r.Reason != "" || !r.EndedAt.IsZero() {
		t.Errorf("reopened run = %+v", r)
	}
	a, b, c := snap.Task("a"), snap.Task("b"), snap.Task("c")
	if a.State != models.TaskStatePending || a.Failures != 0 || a.Attempt != 1 || a.ReplayOf != "e1" || a.DeadLetter != "" ||
		a.Reason != "replayed" {
		t.Errorf("reopened task = %+v", a)
	}
	if b.State != models.TaskStatePending || b.Cause != "" || c.State != models.TaskStateSkipped {
		t.Errorf("dependents: b %s (cause %q), c %s; want b pending, c (another cause) skipped", b.State, b.Cause, c.State)
	}
	if b.DeadLetter != "" || b.ReplayOf != "e-b" {
		t.Errorf("dead-lettered dependent b: dead letter %q, replay_of %q; want \"\", e-b", b.DeadLetter, b.ReplayOf)
	}
	must(t, "start after the reopen", s.StartAttempt(ctx, "r", "a", 2, lease("two", time.Hour)))
	mustIs(t, "reopen again", s.Reopen(ctx, reopen), wfstore.ErrConflict)
}
