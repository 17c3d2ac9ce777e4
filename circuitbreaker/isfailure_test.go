package circuitbreaker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
)

func TestDefaultIsFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errBoom, true},
		{"wrapped plain", fmt.Errorf("send: %w", errBoom), true},
		{"transient", errorhandling.Transient(errBoom), true},
		{"deadline", context.DeadlineExceeded, true},
		{"http 503", errorhandling.WithHTTPStatus(errBoom, 503), true},
		{"http 429", errorhandling.WithHTTPStatus(errBoom, 429), true},
		{"blame destination", errorhandling.WithBlame(errBoom, errorhandling.BlameDestination), true},
		{"canceled", context.Canceled, false},
		{"wrapped canceled", fmt.Errorf("send: %w", context.Canceled), false},
		{"permanent", errorhandling.Permanent(errBoom), false},
		{"blame message", errorhandling.WithBlame(errBoom, errorhandling.BlameMessage), false},
		{"http 400", errorhandling.WithHTTPStatus(errBoom, 400), false},
		{"http 401: a credential refused", errorhandling.WithHTTPStatus(errBoom, 401), true},
		{"http 404: a wrong route", errorhandling.WithHTTPStatus(errBoom, 404), true},
		{"permanent blamed on destination", errorhandling.WithBlame(errorhandling.Permanent(errBoom), errorhandling.BlameDestination), true},
	} {
		if got := DefaultIsFailure(nil, tc.err); got != tc.want {
			t.Errorf("%s: DefaultIsFailure = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMessageFaultsDoNotTrip(t *testing.T) {
	t.Parallel()
	cb, _ := newTest(t, Config{MaxFailures: 2})
	run(t, cb, 5, errorhandling.Permanent(errBoom))
	run(t, cb, 5, errorhandling.WithBlame(errBoom, errorhandling.BlameMessage))
	run(t, cb, 5, errorhandling.WithHTTPStatus(errBoom, 422))
	wantState(t, cb, StateClosed)
	s := cb.GetStats()
	if s.TotalFailures != 0 || s.TotalSuccesses != 15 {
		t.Fatalf("message faults: %d failures, %d successes; want 0, 15", s.TotalFailures, s.TotalSuccesses)
	}
	run(t, cb, 2, errorhandling.WithHTTPStatus(errBoom, 502))
	wantState(t, cb, StateOpen)
}

func TestCanceledIsIgnored(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 2})
	run(t, cb, 1, errBoom)
	run(t, cb, 3, context.Canceled) // neither breaks nor extends the run
	wantState(t, cb, StateClosed)
	run(t, cb, 1, errBoom)
	wantState(t, cb, StateOpen)

	fc.Advance(DefaultTimeout)
	run(t, cb, 1, context.Canceled) // a cancelled trial frees its slot without closing
	wantState(t, cb, StateHalfOpen)
	run(t, cb, 1, nil)
	wantState(t, cb, StateClosed)
	if s := cb.GetStats(); s.TotalIgnored != 4 || s.TotalRequests != 7 {
		t.Fatalf("TotalIgnored %d, TotalRequests %d; want 4, 7", s.TotalIgnored, s.TotalRequests)
	}
}

func TestConfigClassifier(t *testing.T) {
	t.Parallel()
	errQuota := errors.New("quota exceeded for this tenant")
	c := errorhandling.NewErrorClassifier()
	c.AddRule(errorhandling.Rule{
		Name:  "quota",
		Match: func(err error) bool { return errors.Is(err, errQuota) },
		Class: errorhandling.ClassPermanent,
		Blame: errorhandling.BlameMessage,
	})
	cb, _ := newTest(t, Config{MaxFailures: 1, Classifier: c})
	run(t, cb, 3, errQuota)
	wantState(t, cb, StateClosed)
	run(t, cb, 1, errBoom)
	wantState(t, cb, StateOpen)
}

func TestCustomIsFailure(t *testing.T) {
	t.Parallel()
	cb, _ := newTest(t, Config{MaxFailures: 1, IsFailure: func(err error) bool { return err == errBoom }})
	run(t, cb, 3, errors.New("other"))
	wantState(t, cb, StateClosed)
	run(t, cb, 1, errBoom)
	wantState(t, cb, StateOpen)
}
