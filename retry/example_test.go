package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
)

func ExampleNewExponentialBackoff() {
	b := retry.NewExponentialBackoff(time.Second, time.Minute, false)
	for n := 1; n <= 8; n++ {
		fmt.Printf("failure %d: wait %v\n", n, b.Delay(n))
	}
	// Output:
	// failure 1: wait 1s
	// failure 2: wait 2s
	// failure 3: wait 4s
	// failure 4: wait 8s
	// failure 5: wait 16s
	// failure 6: wait 32s
	// failure 7: wait 1m0s
	// failure 8: wait 1m0s
}

func ExampleDurableBackoff() {
	b := retry.DurableBackoff()
	for n := 1; n <= 7; n++ {
		fmt.Print(b.Delay(n), " ")
	}
	fmt.Println()
	// Output: 1m0s 2m0s 4m0s 8m0s 16m0s 32m0s 1h0m0s
}

func ExampleExecutor_Execute() {
	cfg := retry.NewConfig(3, retry.NewFixedDelay(time.Millisecond, false))
	cfg.WithRetryCallback(func(attempt int, err error) {
		fmt.Printf("attempt %d failed: %v\n", attempt, err)
	})
	executor := retry.NewExecutor(cfg)

	calls := 0
	err := executor.Execute(context.Background(), func() error {
		calls++
		if calls < 3 {
			return errors.New("connection reset")
		}
		return nil
	})
	fmt.Println("calls:", calls, "err:", err)
	// Output:
	// attempt 1 failed: connection reset
	// attempt 2 failed: connection reset
	// calls: 3 err: <nil>
}

func ExampleExecuteWithValue() {
	cfg := retry.NewConfig(3, retry.NewFixedDelay(time.Millisecond, false))
	calls := 0
	result, err := retry.ExecuteWithValue(context.Background(), cfg, func() (string, error) {
		calls++
		if calls == 1 {
			return "", errorhandling.WithCode(errors.New("upstream slow"), "timeout")
		}
		return "payload", nil
	})
	fmt.Println(result, err, calls)
	// Output: payload <nil> 2
}

// A permanent error stops the executor at once, whatever MaxAttempts says.
func Example_permanent() {
	cfg := retry.NewConfig(5, retry.NewFixedDelay(time.Millisecond, false))
	cfg.WithGiveUpCallback(func(err error) { fmt.Println("giving up:", err) })

	calls := 0
	err := retry.NewExecutor(cfg).Execute(context.Background(), func() error {
		calls++
		return errorhandling.Permanent(errors.New("invalid payload"))
	})
	fmt.Println("calls:", calls)
	fmt.Println("permanent:", errors.Is(err, retry.ErrPermanent))
	// Output:
	// giving up: retry: permanent error on attempt 1: invalid payload
	// calls: 1
	// permanent: true
}

// When the attempts run out, the *Error says how many were made and keeps
// the last error for errors.Is and errors.As.
func Example_exhausted() {
	errUnavailable := errors.New("503 service unavailable")
	cfg := retry.NewConfig(2, retry.NewFixedDelay(time.Millisecond, false))
	err := retry.NewExecutor(cfg).Execute(context.Background(), func() error {
		return errUnavailable
	})
	var re *retry.Error
	if errors.As(err, &re) {
		fmt.Println(re.Reason, re.Attempts, errors.Is(err, errUnavailable))
	}
	fmt.Println(err)
	// Output:
	// exhausted 2 true
	// retry: gave up after 2 attempts: 503 service unavailable
}
