package errorhandling_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	eh "github.com/backstophq/backstop/errorhandling"
)

func TestClassifyUserRules(t *testing.T) {
	t.Parallel()
	errQuota := errors.New("quota exceeded")
	c := eh.NewErrorClassifier()
	c.AddRule(eh.Rule{
		Name:   "quota",
		Match:  func(err error) bool { return errors.Is(err, errQuota) },
		Class:  eh.ClassTransient,
		Blame:  eh.BlameDestination,
		Reason: eh.ReasonDependencyFailure,
		Code:   "quota",
	})
	c.AddRule(eh.Rule{
		Name:  "no 503 retries",
		Match: func(err error) bool { s, ok := eh.HTTPStatusOf(err); return ok && s == 503 },
		Class: eh.ClassPermanent,
		Blame: eh.BlameMessage,
	})
	c.AddRule(eh.Rule{Name: "shadowed", Match: func(error) bool { return true }, Class: eh.ClassRecognised})
	c.AddRule(eh.Rule{Name: "nil match"}) // never matches

	tests := []struct {
		name string
		err  error
		want want
	}{
		{"rule beats marker", eh.Permanent(errQuota), transientDest(eh.ReasonDependencyFailure, "quota", "quota")},
		{"rule beats builtin", eh.WithHTTPStatus(errors.New("x"), 503), permanentMsg(eh.ReasonValidationFailure, "service_unavailable", "no 503 retries")},
		{"first rule wins", eh.WithHTTPStatus(errQuota, 503), transientDest(eh.ReasonDependencyFailure, "quota", "quota")},
		{"explicit reason beats rule", eh.WithReason(errQuota, eh.ReasonTimeoutExceeded), transientDest(eh.ReasonTimeoutExceeded, "quota", "quota")},
		{"explicit code beats rule", eh.WithCode(errQuota, "mine"), transientDest(eh.ReasonDependencyFailure, "mine", "quota")},
		{"explicit blame beats rule", eh.WithBlame(errQuota, msg), want{trans, true, msg, eh.ReasonDependencyFailure, "quota", "quota"}},
		{"catch-all", errors.New("other"), want{eh.ClassRecognised, true, dest, eh.ReasonTransportUnavailable, "", "shadowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.want.check(t, c, tt.err)
		})
	}

	t.Run("rule remedy, else the error's", func(t *testing.T) {
		t.Parallel()
		called := false
		remedy := func(context.Context) error { called = true; return nil }
		v := c.Classify(eh.Recognised(errors.New("stale offset"), remedy))
		if v.Remedy == nil {
			t.Fatal("Remedy is nil")
		}
		_ = v.Remedy(context.Background())
		if !called {
			t.Error("Remedy is not the error's remedy")
		}
	})
}

func TestClassifyUnknown(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("handler: %w", errors.New("nil map"))
	unknown := want{eh.ClassUnknown, false, msg, eh.ReasonUnknown, "", ""}
	unknown.check(t, eh.NewErrorClassifier(), err)

	retried := unknown
	retried.retry = true
	retried.check(t, eh.NewErrorClassifier(eh.UnknownIsTransient()), err)

	c := eh.NewErrorClassifier()
	c.SetUnknownTransient(true)
	if !c.UnknownTransient() {
		t.Error("UnknownTransient() = false after SetUnknownTransient(true)")
	}
	retried.check(t, c, err)
	// The setting touches unknown errors only.
	permanentMsg(eh.ReasonValidationFailure, "", "marker").check(t, c, eh.Permanent(err))

	c.AddRule(eh.Rule{Name: "leave unknown", Match: func(error) bool { return true }, Class: eh.ClassUnknown, Blame: msg})
	retried.rule = "leave unknown"
	retried.check(t, c, err)

	if v := c.Classify(nil); !reflect.DeepEqual(v, eh.Classification{}) {
		t.Errorf("Classify(nil) = %+v, want zero", v)
	}
}

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	c := eh.NewErrorClassifier()
	for _, code := range []string{"timeout", "connection_refused", "temporary", "rate_limit", "service_unavailable", "network"} {
		if !c.IsRetryable(code) {
			t.Errorf("IsRetryable(%q) = false", code)
		}
	}
	for _, code := range []string{"", "http_404", "Timeout", "custom_temporary_error"} {
		if c.IsRetryable(code) {
			t.Errorf("IsRetryable(%q) = true", code)
		}
	}
	if len(eh.BuiltinRetryableCodes) != 6 {
		t.Errorf("BuiltinRetryableCodes = %v", eh.BuiltinRetryableCodes)
	}

	custom := eh.WithCode(errors.New("try later"), "custom_temporary_error")
	if c.Classify(custom).Retryable {
		t.Error("unregistered code classified retryable")
	}
	c.AddRetryableError("custom_temporary_error")
	if !c.IsRetryable("custom_temporary_error") {
		t.Error("IsRetryable after AddRetryableError = false")
	}
	transientDest(eh.ReasonTransportUnavailable, "custom_temporary_error", "code").check(t, c, custom)
	if eh.NewErrorClassifier().IsRetryable("custom_temporary_error") {
		t.Error("AddRetryableError leaked into another classifier")
	}
}

func TestPromote(t *testing.T) {
	t.Parallel()
	c := eh.NewErrorClassifier()
	rec := c.Classify(eh.Recognised(errors.New("stale"), func(context.Context) error { return nil }))
	tests := []struct {
		tried, max int
		want       eh.Class
	}{
		{0, 0, eh.ClassRecognised},
		{eh.DefaultMaxRemedies - 1, 0, eh.ClassRecognised},
		{eh.DefaultMaxRemedies, 0, eh.ClassTransient},
		{eh.DefaultMaxRemedies, -1, eh.ClassTransient},
		{1, 1, eh.ClassTransient},
		{4, 5, eh.ClassRecognised},
		{50, 5, eh.ClassTransient},
	}
	for _, tt := range tests {
		got := eh.Promote(rec, tt.tried, tt.max)
		if got.Class != tt.want || !got.Retryable || (got.Remedy == nil) != (tt.want == trans) {
			t.Errorf("Promote(recognised, %d, %d) = %v retry=%v remedy=%v, want %v",
				tt.tried, tt.max, got.Class, got.Retryable, got.Remedy != nil, tt.want)
		}
	}
	p := c.Classify(eh.Permanent(errors.New("x")))
	if got := eh.Promote(p, 100, 1); got.Class != perm || got.Retryable {
		t.Errorf("Promote changed a permanent verdict: %+v", got)
	}
}

func TestAddRetryableErrorAppliesToDerivedCodes(t *testing.T) {
	c := eh.NewErrorClassifier()
	teapot := eh.WithHTTPStatus(errors.New("teapot"), 418)
	if v := c.Classify(teapot); v.Class != eh.ClassPermanent || v.Code != "http_418" {
		t.Fatalf("before AddRetryableError: got %v code %q, want permanent http_418", v.Class, v.Code)
	}
	c.AddRetryableError("http_418")
	v := c.Classify(teapot)
	if v.Class != eh.ClassTransient || !v.Retryable || v.Rule != "code" || v.Blame != eh.BlameDestination {
		t.Fatalf("after AddRetryableError: got %+v, want transient by rule code blamed on destination", v)
	}
}
