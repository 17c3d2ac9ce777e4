package e2e

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/internal/testenv"
)

func postgresURL() string { return testenv.PostgresURL() }
func natsURL() string     { return testenv.NATSURL() }
func amqpURL() string     { return testenv.AMQPURL() }

// unreachable skips the test, or fails it under CI=true.
func unreachable(t testing.TB, server, env string, err error) {
	t.Helper()
	testenv.Unreachable(t, server, env, err)
}

// unique returns a name no other test uses: prefix, sep and 32 hex digits.
func unique(prefix, sep string) string {
	return prefix + sep + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// testLogger returns a logger writing the records at level and above to
// the test's log. Every relay a test starts is stopped before the test
// ends, so nothing logs after it.
func testLogger(t *testing.T, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testContext returns the test's context with a deadline: a safety net,
// never a wait.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}
