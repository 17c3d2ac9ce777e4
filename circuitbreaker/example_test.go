package circuitbreaker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
)

var errUnavailable = errors.New("service unavailable")

func ExampleNew() {
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	cb := circuitbreaker.New(&circuitbreaker.Config{
		MaxFailures:         3,
		Timeout:             30 * time.Second,
		HalfOpenMaxRequests: 1,
		OnStateChange: func(from, to circuitbreaker.State) {
			fmt.Printf("circuit breaker: %s -> %s\n", from, to)
		},
		Clock:  fake,
		Logger: slog.New(slog.DiscardHandler),
	})
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		_ = cb.Execute(ctx, func() error { return errUnavailable })
	}
	err := cb.Execute(ctx, func() error { return nil })
	if err == circuitbreaker.ErrCircuitOpen {
		fmt.Println("rejected:", err)
	}

	fake.Advance(30 * time.Second)
	err = cb.Execute(ctx, func() error { return nil }) // the trial call
	fmt.Println("trial:", err, "state:", cb.State())
	// Output:
	// circuit breaker: closed -> open
	// rejected: circuitbreaker: circuit open, call rejected
	// circuit breaker: open -> half-open
	// circuit breaker: half-open -> closed
	// trial: <nil> state: closed
}

func ExampleExecuteWithValue() {
	cb := circuitbreaker.New(circuitbreaker.DefaultConfig())
	n, err := circuitbreaker.ExecuteWithValue(context.Background(), cb, func() (int, error) {
		return 42, nil
	})
	fmt.Println(n, err)
	// Output: 42 <nil>
}

func ExampleCircuitBreaker_GetStats() {
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	cb := circuitbreaker.New(&circuitbreaker.Config{Clock: fake, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	_ = cb.Execute(ctx, func() error { return nil })
	_ = cb.Execute(ctx, func() error { return errUnavailable })
	_ = cb.Execute(ctx, func() error { return errUnavailable })

	stats := cb.GetStats()
	fmt.Printf("State: %s, Failures: %d\n", stats.State, stats.ConsecutiveFailures)
	fmt.Printf("Requests: %d, Successes: %d, Failures: %d\n", stats.TotalRequests, stats.TotalSuccesses, stats.TotalFailures)
	fmt.Printf("Window: %d requests, %d failures\n", stats.WindowRequests, stats.WindowFailures)
	// Output:
	// State: closed, Failures: 2
	// Requests: 3, Successes: 1, Failures: 2
	// Window: 3 requests, 2 failures
}

func ExampleCircuitBreaker_Allow() {
	cb := circuitbreaker.New(nil)

	// The relay learns the outcome of a delivery later than it starts it.
	permit, err := cb.Allow()
	if err != nil {
		fmt.Println("destination is cooling off:", err)
		return
	}
	deliveryErr := error(nil) // ... the outcome, once known
	permit.Done(deliveryErr)
	fmt.Println(cb.State())
	// Output: closed
}
