package retry

import (
	"testing"
	"time"
)

func TestRelayBackoffNominal(t *testing.T) {
	t.Parallel()
	b, ok := RelayBackoff().(*ExponentialBackoff)
	if !ok {
		t.Fatalf("RelayBackoff() is %T, want *ExponentialBackoff", RelayBackoff())
	}
	if !b.jitter.on || b.jitter.full || b.jitter.fraction != DefaultJitterFraction {
		t.Errorf("RelayBackoff jitter = %+v, want ±%v", b.jitter, DefaultJitterFraction)
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute,
		8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, d := range want {
		if got := b.nominal(i + 1); got != d {
			t.Errorf("nominal(%d) = %v, want %v", i+1, got, d)
		}
	}
	if got := b.nominal(1000); got != time.Hour {
		t.Errorf("nominal(1000) = %v, want 1h", got)
	}
}

func TestDefaultExponentialBackoffSettings(t *testing.T) {
	t.Parallel()
	b := DefaultExponentialBackoff()
	if b.base != time.Second || b.limit != time.Minute || b.multiplier != 2 || !b.jitter.on || b.jitter.full || b.jitter.fraction != 0.25 {
		t.Errorf("DefaultExponentialBackoff() = %+v", b)
	}
}

func TestNilConfigIsDefault(t *testing.T) {
	t.Parallel()
	s := (*Config)(nil).settings()
	if s.maxAttempts != 3 || s.strategy == nil || s.clock == nil || s.classifier == nil || s.maxRemedies != 3 {
		t.Errorf("nil Config settings = %+v", s)
	}
	z := (&Config{}).settings()
	if z.maxAttempts != 1 || z.strategy != defaultStrategy || z.classifier != defaultClassifier {
		t.Errorf("zero Config settings = %+v", z)
	}
}
