package circuitbreaker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// The benchmarks run Backstop's breaker and sony/gobreaker side by side on
// the same paths, so that one `go test -bench` run compares them:
//
//	make bench-breaker
//
// gobreaker runs with its defaults (a fixed counting interval) and, as
// gobreaker-rolling, with a rolling window like Backstop's (60s in 6s
// buckets).

func benchBreaker() *CircuitBreaker {
	return New(&Config{Logger: slog.New(slog.DiscardHandler)})
}

func benchGobreaker(rolling bool) *gobreaker.CircuitBreaker[struct{}] {
	st := gobreaker.Settings{Name: "bench"}
	if rolling {
		st.Interval, st.BucketPeriod = 60*time.Second, 6*time.Second
	}
	return gobreaker.NewCircuitBreaker[struct{}](st)
}

func okValue() (struct{}, error) { return struct{}{}, nil }

func BenchmarkClosedSuccess(b *testing.B) {
	ctx := context.Background()
	b.Run("backstop", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		for b.Loop() {
			_ = cb.Execute(ctx, succeed)
		}
	})
	b.Run("backstop-allow", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		for b.Loop() {
			p, err := cb.Allow()
			if err == nil {
				p.Done(nil)
			}
		}
	})
	b.Run("backstop-value", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		for b.Loop() {
			_, _ = ExecuteWithValue(ctx, cb, okValue)
		}
	})
	for _, rolling := range []bool{false, true} {
		b.Run(gobreakerName(rolling), func(b *testing.B) {
			cb := benchGobreaker(rolling)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = cb.Execute(okValue)
			}
		})
	}
}

func BenchmarkClosedSuccessParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("backstop", func(b *testing.B) {
		cb := benchBreaker()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = cb.Execute(ctx, succeed)
			}
		})
	})
	for _, rolling := range []bool{false, true} {
		b.Run(gobreakerName(rolling), func(b *testing.B) {
			cb := benchGobreaker(rolling)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = cb.Execute(okValue)
				}
			})
		})
	}
}

// openBreakers returns both breakers tripped, with a timeout the benchmark
// never reaches.
func openBreakers(b *testing.B) (*CircuitBreaker, *gobreaker.CircuitBreaker[struct{}]) {
	cb := New(&Config{MaxFailures: 1, Timeout: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	_ = cb.Execute(context.Background(), fail)
	gb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Timeout:     time.Hour,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
	})
	_, _ = gb.Execute(func() (struct{}, error) { return struct{}{}, errBoom })
	if cb.State() != StateOpen || gb.State() != gobreaker.StateOpen {
		b.Fatal("breakers did not open")
	}
	return cb, gb
}

func BenchmarkOpenReject(b *testing.B) {
	ctx := context.Background()
	cb, gb := openBreakers(b)
	b.Run("backstop", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if cb.Execute(ctx, succeed) != ErrCircuitOpen {
				b.Fatal("not rejected")
			}
		}
	})
	b.Run("gobreaker", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := gb.Execute(okValue); err != gobreaker.ErrOpenState {
				b.Fatal("not rejected")
			}
		}
	})
}

func BenchmarkOpenRejectParallel(b *testing.B) {
	ctx := context.Background()
	cb, gb := openBreakers(b)
	b.Run("backstop", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = cb.Execute(ctx, succeed)
			}
		})
	})
	b.Run("gobreaker", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = gb.Execute(okValue)
			}
		})
	})
}

func gobreakerName(rolling bool) string {
	if rolling {
		return "gobreaker-rolling"
	}
	return "gobreaker"
}
