package circuitbreaker

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestStateString(t *testing.T) {
	t.Parallel()
	for s, want := range map[State]string{StateClosed: "closed", StateOpen: "open", StateHalfOpen: "half-open", State(7): "state(7)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	// The seed's snippets.
	_ = New(&Config{MaxFailures: 3, Timeout: 30 * time.Second, HalfOpenMaxRequests: 1})
	_ = New(DefaultConfig())
	cb := New(nil)
	if cb.maxFailures != DefaultMaxFailures || cb.timeout != int64(DefaultTimeout) || cb.halfOpenMax != DefaultHalfOpenMaxRequests {
		t.Fatalf("New(nil) = %d/%d/%d, want the defaults", cb.maxFailures, cb.timeout, cb.halfOpenMax)
	}
	if cb.rateOn || cb.minRequests != DefaultMinimumRequests || cb.win.width != int64(DefaultWindow)/WindowBuckets {
		t.Fatal("New(nil): failure-rate defaults not applied")
	}
	if got := cb.State(); got != StateClosed {
		t.Fatalf("new breaker is %s", got)
	}
	d := DefaultConfig()
	if d.MaxFailures != 5 || d.Timeout != 60*time.Second || d.HalfOpenMaxRequests != 1 {
		t.Fatalf("DefaultConfig() = %+v", d)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := (*Config)(nil).Validate(); err != nil {
		t.Fatalf("nil Config: %v", err)
	}
	if err := (&Config{FailureRateThreshold: 1}).Validate(); err != nil {
		t.Fatalf("threshold 1: %v", err)
	}
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"MaxFailures", Config{MaxFailures: -1}},
		{"Timeout", Config{Timeout: -time.Second}},
		{"HalfOpenMaxRequests", Config{HalfOpenMaxRequests: -1}},
		{"FailureRateThreshold", Config{FailureRateThreshold: -0.1}},
		{"FailureRateThreshold", Config{FailureRateThreshold: 1.5}},
		{"FailureRateThreshold", Config{FailureRateThreshold: math.NaN()}},
		{"MinimumRequests", Config{MinimumRequests: -1}},
		{"Window", Config{Window: -time.Second}},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field+" ") {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", tc.cfg)
				}
			}()
			New(&tc.cfg)
		}()
	}
}
