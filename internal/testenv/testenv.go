// Package testenv is what Backstop's tests share about the servers they
// run against: where the servers are (environment variables with loopback
// defaults), what to do when one is unreachable (skip on a developer's
// laptop, fail under CI=true, so that a CI run never passes by skipping),
// and isolated PostgreSQL schemas so that database tests run in parallel.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The servers used unless the environment names others.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultNATSURL     = "nats://127.0.0.1:4222"
	DefaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
)

// The environment variables that override the defaults.
const (
	PostgresEnv = "BACKSTOP_TEST_POSTGRES_URL"
	NATSEnv     = "BACKSTOP_TEST_NATS_URL"
	AMQPEnv     = "BACKSTOP_TEST_AMQP_URL"
)

// PostgresURL is the PostgreSQL server tests use.
func PostgresURL() string { return urlFrom(PostgresEnv, DefaultPostgresURL) }

// NATSURL is the NATS (JetStream) server tests use.
func NATSURL() string { return urlFrom(NATSEnv, DefaultNATSURL) }

// AMQPURL is the RabbitMQ server tests use.
func AMQPURL() string { return urlFrom(AMQPEnv, DefaultAMQPURL) }

func urlFrom(env, def string) string {
	if u := os.Getenv(env); u != "" {
		return u
	}
	return def
}

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unreachable skips the test because the server it needs cannot be
// reached, or fails it under CI=true.
func Unreachable(t testing.TB, server, env string, err error) {
	t.Helper()
	msg := server + " is not reachable (set " + env + "): " + err.Error()
	if InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

var (
	adminOnce sync.Once
	adminPool *pgxpool.Pool
	adminErr  error
)

// PostgresAdmin returns a small pool on the test server, shared by the
// whole test binary, or skips (fails under CI) when it is unreachable.
func PostgresAdmin(t testing.TB) *pgxpool.Pool {
	t.Helper()
	adminOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(PostgresURL())
		if err != nil {
			adminErr = err
			return
		}
		cfg.MaxConns = 4
		if adminPool, adminErr = pgxpool.NewWithConfig(ctx, cfg); adminErr == nil {
			adminErr = adminPool.Ping(ctx)
		}
	})
	if adminErr != nil {
		Unreachable(t, "PostgreSQL at "+PostgresURL(), PostgresEnv, adminErr)
	}
	return adminPool
}

// NewSchema creates an empty PostgreSQL schema named prefix plus a random
// suffix, dropped with everything in it when the test ends.
func NewSchema(t testing.TB, prefix string) string {
	t.Helper()
	a := PostgresAdmin(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	if _, err := a.Exec(context.Background(), "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := a.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}
