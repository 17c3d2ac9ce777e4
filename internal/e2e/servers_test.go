package e2e

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// The servers the tests use unless the environment names others.
const (
	defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultNATSURL     = "nats://127.0.0.1:4222"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// serverURL returns the value of env, or def when it is unset.
func serverURL(env, def string) string {
	if u := os.Getenv(env); u != "" {
		return u
	}
	return def
}

func postgresURL() string { return serverURL("BACKSTOP_TEST_POSTGRES_URL", defaultPostgresURL) }
func natsURL() string     { return serverURL("BACKSTOP_TEST_NATS_URL", defaultNATSURL) }
func amqpURL() string     { return serverURL("BACKSTOP_TEST_AMQP_URL", defaultAMQPURL) }

// unreachable skips the test because a server it needs cannot be reached,
// or fails it when CI=true: a CI run must not pass by skipping.
func unreachable(t testing.TB, server, env string, err error) {
	t.Helper()
	msg := server + " is not reachable (set " + env + "): " + err.Error()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
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
