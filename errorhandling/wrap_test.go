package errorhandling_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
)

func TestClassifyMarkers(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	tests := []struct {
		name string
		err  error
		want want
	}{
		{"permanent", eh.Permanent(base), permanentMsg(eh.ReasonValidationFailure, "", "marker")},
		{"transient", eh.Transient(base), transientDest(eh.ReasonTransportUnavailable, "", "marker")},
		{"recognised", eh.Recognised(base, nil), want{eh.ClassRecognised, true, dest, eh.ReasonTransportUnavailable, "", "marker"}},
		{"permanent beats builtin", eh.Permanent(context.DeadlineExceeded), permanentMsg(eh.ReasonValidationFailure, "timeout", "marker")},
		{"transient beats builtin", eh.Transient(eh.WithHTTPStatus(base, 422)), transientDest(eh.ReasonTransportUnavailable, "http_422", "marker")},
		{"permanent beats builtin refusal", eh.Permanent(eh.WithHTTPStatus(base, 404)), permanentMsg(eh.ReasonValidationFailure, "not_found", "marker")},
		{"permanent beats retryable code", eh.Permanent(eh.WithCode(base, "timeout")), permanentMsg(eh.ReasonValidationFailure, "timeout", "marker")},
		{"explicit reason", eh.WithReason(eh.Transient(base), eh.ReasonDependencyFailure), transientDest(eh.ReasonDependencyFailure, "", "marker")},
		{"explicit code", eh.WithCode(eh.WithHTTPStatus(base, 422), "bad_order"), permanentMsg(eh.ReasonValidationFailure, "bad_order", "http_status")},
		{"explicit blame", eh.WithBlame(eh.Permanent(base), dest), want{perm, false, dest, eh.ReasonTransportUnavailable, "", "marker"}},
		{"explicit blame on 5xx", eh.WithBlame(eh.WithHTTPStatus(base, 500), msg), want{trans, true, msg, eh.ReasonTransportUnavailable, "http_500", "http_status"}},
		{"outer code wins", eh.WithCode(eh.WithCode(base, "timeout"), "odd"), want{eh.ClassUnknown, false, msg, eh.ReasonUnknown, "odd", ""}},
		{"outer status wins", eh.WithHTTPStatus(eh.WithHTTPStatus(base, 503), 400), permanentMsg(eh.ReasonValidationFailure, "http_400", "http_status")},
	}
	c := eh.NewErrorClassifier()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.want.check(t, c, tt.err)
		})
	}
}

func TestClassifyNesting(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	wrap := func(err error) error {
		return fmt.Errorf("outer: %w", fmt.Errorf("middle: %w", fmt.Errorf("inner: %w", err)))
	}
	tests := []struct {
		name string
		err  error
		want eh.Class
	}{
		{"permanent(transient)", eh.Permanent(eh.Transient(base)), perm},
		{"transient(permanent)", eh.Transient(eh.Permanent(base)), trans},
		{"through %w layers", wrap(eh.Permanent(wrap(eh.Transient(base)))), perm},
		{"through %w layers, reversed", wrap(eh.Transient(wrap(eh.Permanent(base)))), trans},
		{"recognised(permanent)", eh.Recognised(wrap(eh.Permanent(base)), nil), eh.ClassRecognised},
		{"join: first marker", errors.Join(eh.Transient(base), eh.Permanent(base)), trans},
		{"join: plain then marker", errors.Join(base, wrap(eh.Permanent(base))), perm},
		{"multi %w", fmt.Errorf("%w; %w", base, eh.Transient(base)), trans},
		{"marker around join", eh.Permanent(errors.Join(eh.Transient(base), base)), perm},
	}
	c := eh.NewErrorClassifier()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := c.Classify(tt.err).Class; got != tt.want {
				t.Errorf("Classify(%v).Class = %v, want %v", tt.err, got, tt.want)
			}
			if got, _ := eh.MarkedClass(tt.err); got != tt.want {
				t.Errorf("MarkedClass = %v, want %v", got, tt.want)
			}
			if got := eh.IsPermanent(tt.err); got != (tt.want == perm) {
				t.Errorf("IsPermanent = %v", got)
			}
		})
	}
}

func TestWrappers(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("sentinel")
	err := eh.RetryAfter(eh.WithBlame(eh.WithCode(eh.WithReason(eh.WithHTTPStatus(
		eh.Permanent(fmt.Errorf("send: %w", sentinel)), 409), eh.ReasonValidationFailure), "conflict"), dest), 3*time.Second)
	wrapped := fmt.Errorf("relay: %w", err)

	if got := err.Error(); got != "send: sentinel" {
		t.Errorf("Error() = %q, wrappers changed the message", got)
	}
	if !errors.Is(wrapped, sentinel) {
		t.Error("errors.Is does not see through the wrappers")
	}
	var pe *eh.PermanentError
	var he *eh.HTTPStatusError
	if !errors.As(wrapped, &pe) || !errors.As(wrapped, &he) || he.Status != 409 {
		t.Error("errors.As does not find the wrapper types")
	}
	if r, ok := eh.ReasonOf(wrapped); !ok || r != eh.ReasonValidationFailure {
		t.Errorf("ReasonOf = %v, %v", r, ok)
	}
	if c, ok := eh.CodeOf(wrapped); !ok || c != "conflict" {
		t.Errorf("CodeOf = %q, %v", c, ok)
	}
	if b, ok := eh.BlameOf(wrapped); !ok || b != dest {
		t.Errorf("BlameOf = %v, %v", b, ok)
	}
	if d, ok := eh.RetryAfterOf(wrapped); !ok || d != 3*time.Second {
		t.Errorf("RetryAfterOf = %v, %v", d, ok)
	}
	if s, ok := eh.HTTPStatusOf(wrapped); !ok || s != 409 {
		t.Errorf("HTTPStatusOf = %v, %v", s, ok)
	}
	if v := eh.NewErrorClassifier().Classify(wrapped); v.RetryAfter != 3*time.Second || v.Blame != dest || v.Class != perm {
		t.Errorf("Classify = %+v", v)
	}

	plain := errors.New("plain")
	if _, ok := eh.MarkedClass(plain); ok {
		t.Error("MarkedClass(plain) ok")
	}
	if _, ok := eh.ReasonOf(plain); ok {
		t.Error("ReasonOf(plain) ok")
	}
	if _, ok := eh.CodeOf(plain); ok {
		t.Error("CodeOf(plain) ok")
	}
	if _, ok := eh.BlameOf(plain); ok {
		t.Error("BlameOf(plain) ok")
	}
	if _, ok := eh.RetryAfterOf(plain); ok {
		t.Error("RetryAfterOf(plain) ok")
	}
	if _, ok := eh.SQLStateOf(&pgError{}); ok {
		t.Error("SQLStateOf(empty state) ok")
	}
}

func TestWrappersNil(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"Permanent":      eh.Permanent(nil),
		"Transient":      eh.Transient(nil),
		"Recognised":     eh.Recognised(nil, nil),
		"WithReason":     eh.WithReason(nil, eh.ReasonPoisonMessage),
		"WithCode":       eh.WithCode(nil, "timeout"),
		"WithBlame":      eh.WithBlame(nil, msg),
		"WithHTTPStatus": eh.WithHTTPStatus(nil, 500),
		"RetryAfter":     eh.RetryAfter(nil, time.Second),
	} {
		if err != nil {
			t.Errorf("%s(nil) = %#v, want nil", name, err)
		}
	}
}

// TestClassifyConcurrent runs Classify while rules and codes are added; run
// it with -race.
func TestClassifyConcurrent(t *testing.T) {
	t.Parallel()
	c := eh.NewErrorClassifier()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			c.AddRule(eh.Rule{Name: fmt.Sprint(i), Match: func(error) bool { return false }})
			c.AddRetryableError(fmt.Sprint("code_", i))
			c.SetUnknownTransient(i%2 == 0)
		}
	}()
	for range 100 {
		_ = c.Classify(eh.WithCode(errors.New("x"), "code_5"))
	}
	<-done
}
