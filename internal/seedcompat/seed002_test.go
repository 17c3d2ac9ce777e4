package seedcompat

import (
	"bytes"
	"context"
	"errors"
	stdlog "log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/workflow/models"
)

// The snippets call these; they stand for the reader's own code.
var (
	errBoom      = errors.New("boom")
	doSomething  = func() error { return nil }
	fetchData    = func() (string, error) { return "data", nil }
	callExternal = func() error { return nil }
)

// Section 1: the strategies. Each snippet declares strategy; they are in
// their own blocks because the design redeclares the name.
func TestSeedRetryStrategies(t *testing.T) {
	var strategies []retry.Strategy
	{
		strategy := retry.NewExponentialBackoff(
			1*time.Second, // base delay
			5*time.Minute, // max delay
			true,          // enable jitter
		)
		strategies = append(strategies, strategy)
	}
	{
		strategy := retry.NewLinearBackoff(
			1*time.Second, // base delay
			1*time.Minute, // max delay
			5*time.Second, // increment
			true,          // enable jitter
		)
		strategies = append(strategies, strategy)
	}
	{
		strategy := retry.NewFixedDelay(
			10*time.Second, // delay
			true,           // enable jitter
		)
		strategies = append(strategies, strategy)
	}
	{
		strategy := retry.NewNoRetry()
		if d := strategy.Delay(1); d != retry.Stop {
			t.Errorf("NoRetry.Delay(1) = %v, want Stop", d)
		}
	}
	// "Delay calculation: delay = baseDelay * multiplier^(attempt-1)",
	// jitter ±25 %.
	exp := strategies[0]
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 20: 5 * time.Minute} {
		got := exp.Delay(n)
		if got < want*3/4 || got > want*5/4 || got > 5*time.Minute {
			t.Errorf("exponential Delay(%d) = %v, want %v ±25%% capped at 5m", n, got, want)
		}
	}
	// "delay = baseDelay + (increment * attempt)"
	lin := retry.NewLinearBackoff(1*time.Second, 1*time.Minute, 5*time.Second, false)
	if got := lin.Delay(2); got != 11*time.Second {
		t.Errorf("linear Delay(2) = %v, want 11s", got)
	}
	if got := strategies[2].Delay(7); got < 7500*time.Millisecond || got > 12500*time.Millisecond {
		t.Errorf("fixed Delay = %v, want 10s ±25%%", got)
	}
}

// Section 1: configuration and usage.
func TestSeedRetryConfigAndUsage(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	log := stdlog.New(&buf, "", 0)

	config := retry.NewConfig(5, retry.DefaultExponentialBackoff())
	config.WithRetryOnErrorCodes("timeout", "connection_refused", "rate_limit")
	config.WithRetryCallback(func(attempt int, err error) {
		log.Printf("Retry attempt %d: %v", attempt, err)
	})
	config.WithGiveUpCallback(func(err error) {
		log.Printf("All retries exhausted: %v", err)
	})

	// Simple retry:
	executor := retry.NewExecutor(retry.DefaultConfig())
	err := executor.Execute(ctx, func() error {
		return doSomething()
	})
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}

	// Retry with value (a second config, as in the design):
	{
		config := retry.NewConfig(3, retry.DefaultExponentialBackoff())
		result, err := retry.ExecuteWithValue(ctx, config, func() (string, error) {
			return fetchData()
		})
		if result != "data" || err != nil {
			t.Fatalf("ExecuteWithValue = %q, %v", result, err)
		}
	}

	// Custom retry strategy:
	{
		config := retry.NewConfig(5, retry.NewExponentialBackoff(
			2*time.Second,
			10*time.Minute,
			true,
		))
		executor := retry.NewExecutor(config)
		_ = executor
	}

	// The configured callbacks and code filter behave as the design says:
	// a rate-limited call is retried with back-off, then succeeds; a code
	// outside the list is not retried.
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	config.WithClock(fake)
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- retry.NewExecutor(config).Execute(ctx, func() error {
			calls++
			if calls < 3 {
				return errorhandling.WithHTTPStatus(errBoom, 429) // code "rate_limit"
			}
			return nil
		})
	}()
	for i := 0; i < 2; i++ {
		if _, ok := fake.AdvanceToNext(nil); !ok {
			t.Fatal("no wait")
		}
	}
	if err := <-done; err != nil || calls != 3 {
		t.Fatalf("rate-limited run: err %v after %d calls", err, calls)
	}
	if got := strings.Count(buf.String(), "Retry attempt"); got != 2 {
		t.Errorf("retry callback logged %d times, want 2:\n%s", got, buf.String())
	}
	err = retry.NewExecutor(config).Execute(ctx, func() error { return errorhandling.WithCode(errBoom, "disk_full") })
	if !errors.Is(err, retry.ErrNotRetryable) || !strings.Contains(buf.String(), "All retries exhausted") {
		t.Errorf("unlisted code: err %v, log:\n%s", err, buf.String())
	}
}

// Section 2: propagation policies, critical tasks, callbacks and the
// classifier.
func TestSeedErrorPropagation(t *testing.T) {
	var configs []*errorhandling.PropagationConfig
	{
		config := &errorhandling.PropagationConfig{
			Policy: errorhandling.PropagationPolicyFail,
		}
		configs = append(configs, config)
	}
	{
		config := &errorhandling.PropagationConfig{
			Policy: errorhandling.PropagationPolicySkipDownstream,
		}
		configs = append(configs, config)
	}
	{
		config := &errorhandling.PropagationConfig{
			Policy:              errorhandling.PropagationPolicyAllowPartial,
			AllowPartialSuccess: true,
		}
		configs = append(configs, config)
	}
	{
		config := &errorhandling.PropagationConfig{
			Policy:              errorhandling.PropagationPolicyAllowPartial,
			AllowPartialSuccess: true,
			CriticalTasks:       []string{"validate", "commit"},
		}
		configs = append(configs, config)
		if !config.IsCritical("commit") || config.IsCritical("extract") {
			t.Error("critical tasks not honoured")
		}
	}
	{
		config := &errorhandling.PropagationConfig{
			Policy: errorhandling.PropagationPolicySkipDownstream,
			OnTaskFailure: func(ctx context.Context, task *models.Task, ti *models.TaskInstance, err error) error {
				// Send alert, log to external system, etc.
				return nil
			},
			OnDAGFailure: func(ctx context.Context, dagRun *models.DAGRun, err error) error {
				// Send critical alert
				return nil
			},
		}
		configs = append(configs, config)
	}
	for i, c := range configs {
		if err := c.Validate(); err != nil {
			t.Errorf("config %d: %v", i, err)
		}
	}

	classifier := errorhandling.NewErrorClassifier()

	// Check if error is retryable
	retried := false
	if classifier.IsRetryable("timeout") {
		// Retry the operation
		retried = true
	}

	// Add custom retryable error
	classifier.AddRetryableError("custom_temporary_error")

	if !retried || !classifier.IsRetryable("custom_temporary_error") || classifier.IsRetryable("invalid_input") {
		t.Error("classifier codes do not behave as the design says")
	}
	for _, code := range []string{"timeout", "connection_refused", "temporary", "rate_limit", "service_unavailable", "network"} {
		if !classifier.IsRetryable(code) {
			t.Errorf("built-in code %q not retryable", code)
		}
	}
}

// Section 3: the circuit breaker.
func TestSeedCircuitBreaker(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	log := stdlog.New(&buf, "", 0)

	config := &circuitbreaker.Config{
		MaxFailures:         5,                // Open circuit after 5 failures
		Timeout:             60 * time.Second, // Wait 60s before half-open
		HalfOpenMaxRequests: 1,                // Allow 1 request in half-open
		OnStateChange: func(from, to circuitbreaker.State) {
			log.Printf("Circuit breaker: %s -> %s", from, to)
		},
	}

	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	config.Clock = fake
	cb := circuitbreaker.New(config)

	// Protect HTTP calls (against a local server that is down).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	for i := 0; i < 5; i++ {
		err := cb.Execute(ctx, func() error {
			resp, err := http.Get(srv.URL + "/data")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode >= 500 {
				return errorhandling.WithHTTPStatus(errBoom, resp.StatusCode)
			}
			return nil
		})
		if err == nil {
			t.Fatal("a 503 was reported as success")
		}
	}

	called := false
	err := cb.Execute(ctx, func() error { called = true; return callExternal() })
	if err == circuitbreaker.ErrCircuitOpen {
		log.Println("Circuit is open, service unavailable")
	}
	if called || err != circuitbreaker.ErrCircuitOpen {
		t.Fatalf("open breaker: called=%v err=%v", called, err)
	}

	// Monitor circuit state:
	stats := cb.GetStats()
	log.Printf("State: %s, Failures: %d", stats.State, stats.ConsecutiveFailures)
	if stats.State != circuitbreaker.StateOpen || stats.ConsecutiveFailures != 5 {
		t.Errorf("stats = %+v", stats)
	}

	// Half-open after the timeout; a success closes it.
	fake.Advance(60 * time.Second)
	if err := cb.Execute(ctx, func() error { return nil }); err != nil {
		t.Fatalf("trial call: %v", err)
	}

	// Protect database calls:
	type Data struct{ Rows int }
	db := struct{ Query func(string) (*Data, error) }{Query: func(string) (*Data, error) { return &Data{Rows: 3}, nil }}
	result, err := circuitbreaker.ExecuteWithValue(ctx, cb, func() (*Data, error) {
		return db.Query("SELECT * FROM table")
	})
	if err != nil || result.Rows != 3 {
		t.Fatalf("ExecuteWithValue = %v, %v", result, err)
	}

	// Manual reset:
	cb.Reset() // Force circuit back to closed state

	want := []string{"Circuit breaker: closed -> open", "Circuit is open, service unavailable",
		"State: open, Failures: 5", "Circuit breaker: open -> half-open", "Circuit breaker: half-open -> closed"}
	for _, w := range want {
		if !strings.Contains(buf.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, buf.String())
		}
	}
	if cb.GetStats().State != circuitbreaker.StateClosed {
		t.Error("Reset did not close the breaker")
	}
}
