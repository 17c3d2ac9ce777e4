package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
)

func TestDeliversEveryMessageOnceInStreamOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var msgs []*outbox.Message
	for i := range 20 {
		for _, s := range []string{"a", "b", "c", "d", "e"} {
			msgs = append(msgs, msg("orders", s, i))
		}
		msgs = append(msgs, msg("orders", "", i))
	}
	e.enqueue(msgs...)
	rec := &recorder{}
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport()}})
	cfg.Workers = 4
	rn := e.start(cfg)
	rn.settle()

	got := rec.got()
	if len(got) != len(msgs) {
		t.Fatalf("transport saw %d deliveries, want %d", len(got), len(msgs))
	}
	seen := map[string]int{}
	last := map[string]int{}
	for _, p := range got {
		seen[p]++
		var stream string
		var n int
		if _, err := fmt.Sscanf(strings.ReplaceAll(strings.TrimPrefix(p, "payload-"), "-", " "), "%s %d", &stream, &n); err != nil {
			continue // the stream-less messages ("payload--7")
		}
		if prev, ok := last[stream]; ok && n < prev {
			t.Errorf("stream %s: %d delivered after %d", stream, n, prev)
		}
		last[stream] = n
	}
	for _, m := range msgs {
		if seen[string(m.Payload)] != 1 {
			t.Errorf("%s delivered %d times", m.Payload, seen[string(m.Payload)])
		}
		if e.get(m.ID) != nil {
			t.Errorf("%s still in the outbox", m.Payload)
		}
	}
	if s := rn.r.Stats(); s.Delivered != int64(len(msgs)) || s.Claimed != int64(len(msgs)) || s.InFlight != 0 {
		t.Errorf("stats = %+v", s)
	}
}

func TestInProcessRetryRidesOutABlip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call <= 2 {
			return errorhandling.Transient(errors.New("connection reset"))
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"orders": {
		Transport: rec.transport(),
		InProcess: retry.NewConfig(3, retry.NewFixedDelay(0, false)),
	}}))
	rn.settle()
	if n := len(rec.got()); n != 3 {
		t.Fatalf("transport calls = %d, want 3", n)
	}
	if e.get(m.ID) != nil {
		t.Fatal("message not delivered")
	}
	if s := rn.r.Stats(); s.Retries != 2 || s.Delivered != 1 || s.Failed != 0 || s.Released != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestMessageFaultIsRetriedDurably(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			return errorhandling.WithBlame(errorhandling.Transient(errors.New("stale schema")), errorhandling.BlameMessage)
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	rn.settle()
	got := e.get(m.ID)
	if got == nil || got.Attempts != 1 || !got.Status.Has(outbox.StatusFailed) || got.Error != "stale schema" {
		t.Fatalf("after one failure: %+v", got)
	}
	if !got.ScheduledFor.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("scheduled for %v, want %v", got.ScheduledFor, epoch.Add(time.Minute))
	}
	rn.advance(59 * time.Second)
	if n := len(rec.got()); n != 1 {
		t.Fatalf("retried before it was due: %d calls", n)
	}
	rn.advance(time.Second)
	if e.get(m.ID) != nil || len(rec.got()) != 2 {
		t.Fatalf("not delivered on retry: %d calls", len(rec.got()))
	}
}

func TestPermanentFaultDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	m.Headers = map[string]string{"Authorization": "secret-header"}
	e.enqueue(m)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		return errorhandling.WithHTTPStatus(errors.New("400 bad request: missing field"), 400)
	}}
	rn := e.start(e.config(map[string]Destination{"orders": {
		Transport: rec.transport(),
		InProcess: retry.NewConfig(3, retry.NewFixedDelay(0, false)),
	}}))
	rn.settle()
	if n := len(rec.got()); n != 1 {
		t.Fatalf("a permanent fault was retried: %d calls", n)
	}
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].MessageID != m.ID.String() || dl[0].Reason != errorhandling.ReasonValidationFailure || dl[0].Attempts != 1 {
		t.Fatalf("dead letters = %+v", dl)
	}
	logs := e.logs.find("message failed permanently")
	if len(logs) != 1 || logs[0].attrs["message_id"] != m.ID.String() || logs[0].attrs["reason"] != "ValidationFailure" ||
		logs[0].attrs["destination"] != "orders" || logs[0].attrs["blame"] != "message" {
		t.Fatalf("operations log = %+v", logs)
	}
	if e.logs.contains("payload-s-1") || e.logs.contains("secret-header") {
		t.Fatal("a payload or header reached the log")
	}
	if s := rn.r.Stats(); s.DeadLettered != 1 || s.Failed != 1 || s.Destinations["orders"].Breaker.String() != "closed" {
		t.Fatalf("stats = %+v", s)
	}
}

func TestMessageFaultsDeadLetterAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // MaxAttempts 3
	m := msg("orders", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		return errorhandling.WithBlame(errorhandling.Transient(errors.New("cannot parse row 7")), errorhandling.BlameMessage)
	}}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	rn.settle()
	for want := 2; want <= 3; want++ {
		rn.advance(time.Minute)
		if n := len(rec.got()); n != want {
			t.Fatalf("calls = %d, want %d", n, want)
		}
	}
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].Reason != errorhandling.ReasonPoisonMessage || dl[0].Attempts != 3 {
		t.Fatalf("dead letters = %+v", dl)
	}
	rn.advance(time.Hour)
	if n := len(rec.got()); n != 3 {
		t.Fatalf("a dead letter was delivered again: %d calls", n)
	}
	logs := e.logs.find("message dead-lettered")
	if len(logs) != 1 || logs[0].attrs["detail"] != "exceeded max retries (3), moving to DLQ" ||
		logs[0].attrs["attempts"] != "3" || logs[0].attrs["reason"] != "PoisonMessage" || logs[0].level.String() != "ERROR" {
		t.Fatalf("operations log = %+v", logs)
	}
	if s := rn.r.Stats(); s.Failed != 3 || s.DeadLettered != 1 || s.Destinations["orders"].BreakerTrips != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestUnknownErrorIsPermanentByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error { return errors.New("mystery") }}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	rn.settle()
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].Reason != errorhandling.ReasonUnknown || dl[0].ErrorMessage != "mystery" {
		t.Fatalf("dead letters = %+v", dl)
	}
	logs := e.logs.find("unclassified error; treated as permanent")
	if len(logs) != 1 || logs[0].attrs["error_type"] != "*errors.errorString" || logs[0].level.String() != "WARN" {
		t.Fatalf("operations log = %+v", logs)
	}
}

func TestUnknownErrorIsTransientWhenConfigured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error { return errors.New("mystery") }}
	cfg := e.config(map[string]Destination{"orders": {
		Transport: rec.transport(),
		InProcess: retry.NewConfig(2, retry.NewFixedDelay(0, false)),
	}})
	cfg.Classifier = errorhandling.NewErrorClassifier(errorhandling.UnknownIsTransient())
	rn := e.start(cfg)
	rn.settle()
	if n := len(rec.got()); n != 2 {
		t.Fatalf("calls = %d, want 2 (retried in-process)", n)
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Fatalf("dead-lettered: %+v", dl)
	}
	got := e.get(m.ID)
	if got == nil || got.Attempts != 1 || got.FailureReason != errorhandling.ReasonUnknown {
		t.Fatalf("message = %+v", got)
	}
	if len(e.logs.find("unclassified error")) != 0 {
		t.Fatal("a transient unknown error was reported as permanent")
	}
}

func TestUnconfiguredDestinationIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lost := msg("nowhere", "s", 1)
	fine := msg("orders", "s", 1)
	e.enqueue(lost, fine)
	rec := &recorder{}
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport()}})
	cfg.UnknownDestination = DeadLetterUnknown
	rn := e.start(cfg)
	rn.settle()
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].MessageID != lost.ID.String() || dl[0].Reason != errorhandling.ReasonValidationFailure ||
		dl[0].ErrorMessage != `destination "nowhere" is not configured` {
		t.Fatalf("dead letters = %+v", dl)
	}
	if e.get(fine.ID) != nil {
		t.Fatal("the configured destination's message was not delivered")
	}
}

func TestUnknownDestinationIsLeftForAnotherRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	other := msg("elsewhere", "s", 1)
	mine := msg("orders", "s", 1)
	e.enqueue(other, mine)
	// LeaveUnknown, the default.
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: (&recorder{}).transport()}}))
	rn.settle()
	if got := e.get(other.ID); got == nil || got.InstanceID != "" || got.Attempts != 0 {
		t.Fatalf("the other destination's message was touched: %+v", got)
	}
	if len(e.deadLetters()) != 0 || e.get(mine.ID) != nil {
		t.Fatal("wrong outcome for the configured destination")
	}
}

func TestUnknownDestinationIsCountedAndWarnedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.enqueue(msg("elsewhere", "s", 1), msg("elsewhere", "s", 2), msg("orders", "s", 1))
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: (&recorder{}).transport()}}))
	rn.settle()
	for range 2 { // turn: the clock moves once the maintainer waits for its timer
		turn(e, rn.r.Config().HeartbeatInterval, rn)
	}
	rn.waitFor("the count", func() bool { return rn.r.Stats().UnknownPending["elsewhere"] == 2 })
	for range 4 {
		turn(e, rn.r.Config().HeartbeatInterval, rn)
	}
	if got := e.logs.find("messages for a destination this relay does not know"); len(got) != 1 || got[0].attrs["destination"] != "elsewhere" {
		t.Fatalf("warnings = %+v", got)
	}
	if s := rn.r.Stats().UnknownPending; len(s) != 1 {
		t.Fatalf("UnknownPending = %v", s)
	}
}
