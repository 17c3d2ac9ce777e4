package retry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/backstophq/backstop/retry"
)

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, c := range []struct {
		err  *retry.Error
		want string
	}{
		{&retry.Error{Reason: retry.Exhausted, Attempts: 3, Last: boom}, "retry: gave up after 3 attempts: boom"},
		{&retry.Error{Reason: retry.Exhausted, Attempts: 1, Last: boom}, "retry: gave up after 1 attempt: boom"},
		{&retry.Error{Reason: retry.Permanent, Attempts: 1, Last: boom}, "retry: permanent error on attempt 1: boom"},
		{&retry.Error{Reason: retry.NotRetryable, Attempts: 2, Last: boom}, "retry: error not retryable on attempt 2: boom"},
		{&retry.Error{Reason: retry.Cancelled, Attempts: 2, Last: boom}, "retry: cancelled after 2 attempts; last error: boom"},
		{&retry.Error{Reason: 0, Attempts: 2}, "retry: stopped (StopReason(0)) after 2 attempts"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

func TestErrorIsAndUnwrap(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	sentinels := map[retry.StopReason]error{
		retry.Exhausted: retry.ErrExhausted, retry.Permanent: retry.ErrPermanent,
		retry.NotRetryable: retry.ErrNotRetryable, retry.Cancelled: retry.ErrCancelled,
	}
	for reason, sentinel := range sentinels {
		err := error(&retry.Error{Reason: reason, Attempts: 1, Last: boom})
		for other, s := range sentinels {
			if got := errors.Is(err, s); got != (other == reason) {
				t.Errorf("errors.Is(%v error, %v) = %v", reason, s, got)
			}
		}
		if !errors.Is(err, boom) || errors.Is(err, context.Canceled) {
			t.Errorf("%v error does not unwrap to exactly its last error", reason)
		}
		if !errors.Is(err, sentinel) {
			t.Errorf("%v error is not %v", reason, sentinel)
		}
	}
	if u := (&retry.Error{Reason: retry.Exhausted}).Unwrap(); u != nil {
		t.Errorf("Unwrap() with no errors = %v, want nil", u)
	}
}

func TestStopReasonString(t *testing.T) {
	t.Parallel()
	for r, want := range map[retry.StopReason]string{
		retry.Exhausted: "exhausted", retry.Permanent: "permanent", retry.NotRetryable: "not retryable",
		retry.Cancelled: "cancelled", 0: "StopReason(0)", 9: "StopReason(9)",
	} {
		if got := r.String(); got != want {
			t.Errorf("StopReason(%d).String() = %q, want %q", int(r), got, want)
		}
	}
}
