package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/retry"
)

func BenchmarkExecuteSuccess(b *testing.B) {
	ex := retry.NewExecutor(retry.DefaultConfig())
	ctx := context.Background()
	fn := func() error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := ex.Execute(ctx, fn); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecuteWithValueSuccess(b *testing.B) {
	cfg := retry.DefaultConfig()
	ctx := context.Background()
	fn := func() (int, error) { return 1, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := retry.ExecuteWithValue(ctx, cfg, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecuteRetry measures two failed tries and a success, with no
// waits: the cost of classification and bookkeeping.
func BenchmarkExecuteRetry(b *testing.B) {
	ex := retry.NewExecutor(retry.NewConfig(3, retry.NewFixedDelay(0, false)))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		calls := 0
		err := ex.Execute(ctx, func() error {
			calls++
			if calls < 3 {
				return errFlaky
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExponentialDelay(b *testing.B) {
	for _, bc := range []struct {
		name string
		s    retry.Strategy
	}{
		{"plain", retry.NewExponentialBackoff(time.Second, time.Hour, false)},
		{"jitter", retry.NewExponentialBackoff(time.Second, time.Hour, true)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n++
				if bc.s.Delay(n%20+1) < 0 {
					b.Fatal("negative delay")
				}
			}
		})
	}
}
