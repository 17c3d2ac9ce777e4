package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
)

// A negative retry-after hint means none. The store refuses a failure
// carrying one, so it used to leave the message uncharged, sent again at
// every lapse of its lease and never dead-lettered.
func TestNegativeRetryAfterIsNoHint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("api", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		err := errorhandling.WithBlame(errorhandling.Transient(errors.New("bad data")), errorhandling.BlameMessage)
		return errorhandling.RetryAfter(err, -time.Second)
	}}
	rn := e.start(e.config(map[string]Destination{"api": {Transport: rec.transport()}}))
	rn.settle()
	got := e.get(m.ID)
	if got == nil || got.Attempts != 1 || !got.ScheduledFor.Equal(epoch.Add(time.Minute)) || got.Error != "bad data" {
		t.Fatalf("after a failure with a negative hint: %+v (want 1 attempt, the retry in 1 min)", got)
	}
	if logs := e.logs.find("the store refused"); len(logs) != 0 {
		t.Fatalf("the store refused the outcome: %v", logs[0].attrs)
	}
	rn.advance(time.Minute)
	rn.advance(time.Minute)
	if got := e.get(m.ID); got == nil || got.Attempts != 3 || got.DeadLetteredAt.IsZero() {
		t.Fatalf("after three failures: %+v (want dead-lettered)", got)
	}
}

// A Go handler's retry-after hint is capped at an hour, as a webhook's
// Retry-After is: a ten-year hint paused the destination, for the fleet,
// for ten years.
func TestRetryAfterHintIsCappedAtAnHour(t *testing.T) {
	t.Parallel()
	for name, hint := range map[string]time.Duration{"ten years": 10 * 365 * 24 * time.Hour, "max duration": time.Duration(1<<63 - 1)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			m := msg("api", "s", 1)
			e.enqueue(m)
			rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
				if call == 1 {
					return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429"), 429), hint)
				}
				return nil
			}}
			rn := e.start(e.config(map[string]Destination{"api": {
				Transport: rec.transport(), InProcess: retry.NewConfig(3, retry.InProcessBackoff()),
			}}))
			rn.settle()
			got := e.get(m.ID)
			if got == nil || got.Attempts != 0 || !got.ScheduledFor.Equal(epoch.Add(time.Hour)) {
				t.Fatalf("after the 429: %+v (want released for an hour, uncharged)", got)
			}
			if p := rn.r.Stats().Destinations["api"].PausedUntil; !p.Equal(epoch.Add(time.Hour)) {
				t.Fatalf("paused until %v, want %v", p, epoch.Add(time.Hour))
			}
			rn.advance(time.Hour)
			rn.advance(time.Second) // past the shared pause's next reading
			if e.get(m.ID) != nil {
				t.Fatalf("not delivered an hour after the hint (calls %d)", len(rec.got()))
			}
		})
	}
}

// panicErr is an error whose Error method panics.
type panicErr struct{}

func (panicErr) Error() string { panic("Error() panics") }

// An error whose Error method panics is the handler's bug, like a panic in
// the handler: the message is dead-lettered as HandlerException, and the
// relay goes on. It used to crash the process (in the log record, the
// fingerprint or the recording), and again on every restart.
func TestHandlerErrorWhoseErrorMethodPanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bad, good := msg("api", "a", 1), msg("api", "b", 2)
	e.enqueue(bad, good)
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		if m.ID == bad.ID {
			return panicErr{}
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {Transport: rec.transport()}}))
	rn.settle()
	got := e.get(bad.ID)
	if got == nil || got.DeadLetteredAt.IsZero() || got.FailureReason != errorhandling.ReasonHandlerException {
		t.Fatalf("the message whose error panicked: %+v (want dead-lettered, HandlerException)", got)
	}
	if e.get(good.ID) != nil {
		t.Fatal("the other message was not delivered")
	}
}

// A classifier rule that panics must not take the relay down, nor charge
// or dead-letter the messages: the fault is blamed on the destination,
// with an ERROR record. It used to crash the process.
func TestPanickingClassifierRule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("api", "s", 1)
	e.enqueue(m)
	c := errorhandling.NewErrorClassifier()
	c.AddRule(errorhandling.Rule{Name: "teapot", Match: func(err error) bool {
		var h *errorhandling.HTTPStatusError
		errors.As(err, &h)
		return h.Status == 418 // nil for any other error
	}})
	rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			return errors.New("plain")
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{"api": {Transport: rec.transport()}})
	cfg.Classifier = c
	rn := e.start(cfg)
	rn.settle()
	got := e.get(m.ID)
	if got == nil || got.Attempts != 0 || !got.DeadLetteredAt.IsZero() {
		t.Fatalf("after a failure the classifier panicked on: %+v (want released, uncharged)", got)
	}
	if len(e.logs.find("the error classifier panicked")) == 0 {
		t.Fatal("the classifier's panic was not logged")
	}
	rn.advance(time.Minute)
	if e.get(m.ID) != nil {
		t.Fatal("not delivered later")
	}
}

// A destination's Breaker.OnStateChange that panics must not take the
// relay down when the circuit opens: it is the operator's hook, logged at
// ERROR, and the breaker and the delivery go on as without it.
func TestPanickingOnStateChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("api", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			return errorhandling.WithBlame(errorhandling.Transient(errors.New("down")), errorhandling.BlameDestination)
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{"api": {
		Transport: rec.transport(),
		InProcess: retry.NewConfig(1, retry.InProcessBackoff()),
		Breaker: &circuitbreaker.Config{MaxFailures: 1, OnStateChange: func(_, to circuitbreaker.State) {
			panic("hook broken on " + to.String())
		}},
	}})
	rn := e.start(cfg)
	rn.settle()
	if st := rn.r.Breaker("api").GetStats(); st.State != circuitbreaker.StateOpen {
		t.Fatalf("breaker = %+v, want open after the failure", st)
	}
	if len(e.logs.find("a breaker's OnStateChange panicked")) == 0 {
		t.Fatal("the hook's panic was not logged")
	}
	rn.advance(time.Minute)
	if e.get(m.ID) != nil {
		t.Fatal("not delivered once the destination came back")
	}
}
