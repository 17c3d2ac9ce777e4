package retry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
)

func TestNewExecutorCopiesConfig(t *testing.T) {
	t.Parallel()
	codes := []string{"timeout"}
	cfg := retry.NewConfig(2, retry.NewFixedDelay(0, false)).WithRetryOnErrorCodes(codes...)
	ex := retry.NewExecutor(cfg)
	codes[0] = "other"
	cfg.MaxAttempts = 10
	cfg.RetryOnErrorCodes[0] = "other"
	fn, calls := failing(-1, errorhandling.WithCode(errFlaky, "timeout"))
	asError(t, ex.Execute(context.Background(), fn), retry.Exhausted, 2)
	if calls.Load() != 2 {
		t.Errorf("calls = %d, want 2", calls.Load())
	}
}

func TestConfigMethodsMutateAndChain(t *testing.T) {
	t.Parallel()
	fake := newFake()
	classifier := errorhandling.NewErrorClassifier()
	cfg := retry.NewConfig(5, nil)
	if cfg.MaxAttempts != 5 || cfg.Strategy != nil {
		t.Fatalf("NewConfig = %+v", cfg)
	}
	for _, got := range []*retry.Config{
		cfg.WithRetryOnErrorCodes("a", "b"),
		cfg.WithRetryCallback(func(int, error) {}),
		cfg.WithGiveUpCallback(func(error) {}),
		cfg.WithClock(fake),
		cfg.WithClassifier(classifier),
		cfg.WithMaxRemedies(7),
	} {
		if got != cfg {
			t.Fatal("a With method returned another Config")
		}
	}
	if fmt.Sprint(cfg.RetryOnErrorCodes) != "[a b]" || cfg.OnRetry == nil || cfg.OnGiveUp == nil ||
		cfg.Clock != fake || cfg.Classifier != classifier || cfg.MaxRemedies != 7 {
		t.Errorf("config = %+v", cfg)
	}
	cfg.WithRetryOnErrorCodes()
	if len(cfg.RetryOnErrorCodes) != 0 {
		t.Errorf("WithRetryOnErrorCodes() left %v", cfg.RetryOnErrorCodes)
	}
	if d := retry.DefaultConfig(); d.MaxAttempts != 3 || d.Strategy == nil {
		t.Errorf("DefaultConfig() = %+v", d)
	}
	if c := retry.NewConfig(0, nil); c.MaxAttempts != 1 {
		t.Errorf("NewConfig(0).MaxAttempts = %d, want 1", c.MaxAttempts)
	}
}

func TestExecuteWithValue(t *testing.T) {
	t.Parallel()
	fake := newFake()
	var calls int
	cfg := retry.NewConfig(3, retry.NewFixedDelay(time.Second, false)).WithClock(fake)
	var got string
	waits, err := drive(t, fake, func() error {
		var err error
		got, err = retry.ExecuteWithValue(context.Background(), cfg, func() (string, error) {
			calls++
			if calls < 2 {
				return "partial", errFlaky
			}
			return "data", nil
		})
		return err
	})
	if err != nil || got != "data" || calls != 2 {
		t.Fatalf("got %q, %v after %d calls", got, err, calls)
	}
	equalWaits(t, waits, time.Second)

	n, err := retry.ExecuteWithValue(context.Background(), retry.NewConfig(2, retry.NewFixedDelay(0, false)), func() (int, error) {
		return 42, errFlaky
	})
	asError(t, err, retry.Exhausted, 2)
	if n != 0 {
		t.Errorf("value on failure = %d, want the zero value", n)
	}
}

type ctxKey struct{}

func TestDo(t *testing.T) {
	t.Parallel()
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	var calls int
	err := retry.Do(ctx, retry.NewConfig(3, retry.NewFixedDelay(0, false)), func(ctx context.Context) error {
		calls++
		if ctx.Value(ctxKey{}) != "v" {
			t.Error("Do did not pass ctx")
		}
		if calls < 3 {
			return errFlaky
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("err = %v, calls = %d", err, calls)
	}
}
