package webhook_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/webhook"
)

func TestStatusOverrides(t *testing.T) {
	t.Parallel()
	cfg := webhook.Config{StatusOverrides: []webhook.StatusOverride{
		{Status: "404", Class: permanent, Blame: msg},      // an order the destination does not know
		{Status: "409", Class: transient, Blame: msg},      // busy with the same order: retry, charging attempts
		{Status: "400-403", Class: transient, Blame: dest}, // a destination known to answer 400 during deploys
		{Status: "4xx", Class: permanent, Blame: dest},     // the rest of 4xx
		{Status: "503", Class: permanent, Blame: msg},      // after the 4xx rule: order matters
		{Status: "5xx", Class: transient, Blame: dest},     // unchanged, but decided here
		{Status: "300-399", Class: permanent, Blame: msg},  // a redirect is final
		{Status: "101", Class: permanent, Blame: dest},     // 1xx too
	}}
	for _, c := range []struct {
		status int
		class  errorhandling.Class
		blame  errorhandling.Blame
	}{
		{404, permanent, msg},
		{409, transient, msg},
		{400, transient, dest},
		{401, transient, dest},
		{403, transient, dest},
		{405, permanent, dest},
		{422, permanent, dest},
		{503, permanent, msg},
		{500, transient, dest},
		{301, permanent, msg},
	} {
		t.Run(strconv.Itoa(c.status), func(t *testing.T) {
			t.Parallel()
			tr, _ := serve(t, answer(c.status, "x", "Retry-After", "9"), cfg)
			v, err := deliver(t, tr)
			if v.Class != c.class || v.Blame != c.blame || v.Retryable != (c.class == transient) || v.Rule != "marker" {
				t.Fatalf("verdict %s/%s retryable=%v rule %q, want %s/%s by the override", v.Class, v.Blame, v.Retryable, v.Rule, c.class, c.blame)
			}
			if s, ok := errorhandling.HTTPStatusOf(err); !ok || s != c.status {
				t.Errorf("HTTPStatusOf = %d, %v", s, ok)
			}
			if v.RetryAfter == 0 {
				t.Errorf("Retry-After lost under an override")
			}
			var se *webhook.StatusError
			if !errors.As(err, &se) {
				t.Errorf("error %v does not wrap a StatusError", err)
			}
		})
	}

	// Statuses no override covers keep the built-in mapping, and 2xx is
	// delivered whatever the overrides.
	tr, _ := serve(t, answer(204, ""), cfg)
	if _, err := deliver(t, tr); err != nil {
		t.Fatalf("204 under overrides: %v", err)
	}
	narrow := webhook.Config{StatusOverrides: []webhook.StatusOverride{{Status: "409", Class: transient}}}
	tr, _ = serve(t, answer(422, ""), narrow)
	v, _ := deliver(t, tr)
	wantVerdict(t, v, permanent, msg, errorhandling.ReasonValidationFailure)
}
