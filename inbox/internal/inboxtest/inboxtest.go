// Package inboxtest is what the tests of the inbox's receivers share: the
// stores they run on (SQLite, PostgreSQL), an application table that
// handlers write to, a fake clock driven until an outcome holds, a proxy
// that cuts a broker's or the store's connections, and the hostile
// messages every source can carry.
package inboxtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// Kind is a store the tests run against.
type Kind struct {
	Name string
	// Open opens a fresh store in the place spec names (a file or a
	// schema); spec "" makes a new place.
	Open func(t *testing.T, spec string, cfg store.Config) (store.Store, string)
	// Table qualifies a table name of the application's.
	Table func(spec, name string) string
	// Outbox is the qualified outbox table.
	Outbox func(spec string) string
	// Serial is the column type of an increasing row number.
	Serial string
}

// Kinds are the stores the tests run on.
var Kinds = []Kind{
	{
		Name: "sqlite",
		Open: func(t *testing.T, spec string, cfg store.Config) (store.Store, string) {
			if spec == "" {
				spec = filepath.Join(t.TempDir(), "inbox.db")
			}
			s, err := sqlite.Open(context.Background(), spec, cfg)
			if err != nil {
				t.Fatalf("open SQLite: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s, spec
		},
		Table:  func(_, name string) string { return name },
		Outbox: func(string) string { return "backstop_outbox" },
		Serial: "INTEGER PRIMARY KEY",
	},
	{
		Name: "postgres",
		Open: func(t *testing.T, spec string, cfg store.Config) (store.Store, string) {
			if spec == "" {
				spec = testenv.NewSchema(t, "inbox_")
			}
			s, err := postgres.Open(context.Background(), testenv.PostgresURL(), cfg, postgres.WithSchema(spec))
			if err != nil {
				t.Fatalf("open PostgreSQL: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			if err := s.Migrate(context.Background()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			return s, spec
		},
		Table:  func(spec, name string) string { return spec + "." + name },
		Outbox: func(spec string) string { return spec + ".backstop_outbox" },
		Serial: "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
	},
}

// ForEachStore runs fn once per store kind, in parallel.
func ForEachStore(t *testing.T, fn func(t *testing.T, k Kind)) {
	for _, k := range Kinds {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, k)
		})
	}
}

// Env is one test's store, clock and application table.
type Env struct {
	T     *testing.T
	Ctx   context.Context
	K     Kind
	Spec  string
	S     store.Store
	Clk   *clock.Fake
	Reg   *prometheus.Registry
	Table string // the application's table of handled messages
}

// Policy is the tests' policy of the inbox "orders": a retry after a
// minute, at most three attempts, strict order.
var Policy = store.Policy{Strategy: retry.NewFixedDelay(time.Minute, false), MaxAttempts: 3, Ordering: outbox.OrderingStrict}

// StoreConfig is the tests' store configuration: hour-long leases,
// because fake time runs fast (Env.WaitFor).
func StoreConfig(clk clock.Clock) store.Config {
	return store.Config{
		Clock: clk, LeaseDuration: time.Hour, InstanceTimeout: 2 * time.Hour,
		Policies: map[string]store.Policy{inbox.Destination("orders"): Policy},
	}
}

// NewEnv opens a fresh store of kind k with the application's table.
func NewEnv(t *testing.T, k Kind) *Env {
	t.Helper()
	return OpenEnv(t, k, "", clock.NewFake(Epoch))
}

// Epoch is where the fake clock starts (millisecond-aligned, as SQLite
// stores times).
var Epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Quiet discards the logs of the code under test.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// OpenEnv opens the store of kind k at spec, or a new one with the
// application's table when spec is "".
func OpenEnv(t *testing.T, k Kind, spec string, clk *clock.Fake) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	fresh := spec == ""
	s, spec := k.Open(t, spec, StoreConfig(clk))
	e := &Env{T: t, Ctx: ctx, K: k, Spec: spec, S: s, Clk: clk, Reg: prometheus.NewRegistry(), Table: k.Table(spec, "handled")}
	if fresh {
		e.Exec(`CREATE TABLE ` + e.Table + ` (n ` + k.Serial + `, source_id text NOT NULL, stream text NOT NULL, attempt integer NOT NULL)`)
	}
	return e
}

// Config is the tests' inbox Config: the inbox "orders" on the fake
// clock, one in-process try, quiet logs.
func (e *Env) Config() inbox.Config {
	return inbox.Config{
		Name: "orders",
		Relay: relay.Config{
			Clock: e.Clk, Logger: Quiet, Workers: 4,
			PollInterval: time.Second, MaxPollInterval: time.Second,
		},
		Handling: relay.Destination{InProcess: retry.NewConfig(1, nil), Timeout: 10 * time.Hour},
		Metrics:  e.Reg,
	}
}

// NewInbox makes an inbox or fails the test.
func (e *Env) NewInbox(cfg inbox.Config) *inbox.Inbox {
	e.T.Helper()
	in, err := inbox.New(e.S, cfg)
	if err != nil {
		e.T.Fatalf("inbox.New: %v", err)
	}
	return in
}

// RecordingInbox makes an inbox of the tests' Config whose handler of
// order.created writes each message into the application's table.
func (e *Env) RecordingInbox() *inbox.Inbox {
	e.T.Helper()
	in := e.NewInbox(e.Config())
	in.Handle("order.created", e.Record)
	return in
}

// CheckPoisoned fails the test unless the store holds one dead letter, a
// poison message whose error contains errorHas.
func (e *Env) CheckPoisoned(errorHas string) {
	e.T.Helper()
	entries, refused := e.deadLetters()
	if len(entries) != 1 {
		e.T.Fatalf("dead letters besides the %d refused at receipt: %d; want 1", refused, len(entries))
	}
	if d := entries[0]; d.Reason != errorhandling.ReasonPoisonMessage || !strings.Contains(d.ErrorMessage, errorHas) {
		e.T.Errorf("dead letter reason %v, error %q", d.Reason, d.ErrorMessage)
	}
}

// Refused counts the dead letters of messages the inbox refused at
// receipt (kept with ValidationFailure, never stored as messages).
func (e *Env) Refused() int {
	e.T.Helper()
	_, refused := e.deadLetters()
	return refused
}

// deadLetters lists the dead letters, apart from those of messages the
// inbox refused at receipt, which it counts.
func (e *Env) deadLetters() (others []*dlq.Entry, refused int) {
	e.T.Helper()
	entries, err := e.S.DLQ().List(e.Ctx, nil)
	if err != nil {
		e.T.Fatalf("dead letters: %v", err)
	}
	for _, d := range entries {
		if got, err := e.S.DLQ().Get(e.Ctx, d.ID); err == nil && got.Metadata["refused_by"] == "inbox receive" &&
			got.Reason == errorhandling.ReasonValidationFailure {
			refused++
			continue
		}
		others = append(others, d)
	}
	return others, refused
}

func (e *Env) begin() store.Tx {
	e.T.Helper()
	tx, err := e.S.(store.Inbox).BeginTx(e.Ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	return tx
}

// Exec runs a statement in a transaction of its own.
func (e *Env) Exec(q string) {
	e.T.Helper()
	tx := e.begin()
	defer tx.Rollback(e.Ctx)
	if _, err := tx.Exec(e.Ctx, q); err != nil {
		e.T.Fatalf("%s: %v", q, err)
	}
	if err := tx.Commit(e.Ctx); err != nil {
		e.T.Fatal(err)
	}
}

// Count runs a count query in a transaction of its own.
func (e *Env) Count(q string) int {
	e.T.Helper()
	tx := e.begin()
	defer tx.Rollback(e.Ctx)
	var n int
	if err := tx.QueryRow(e.Ctx, q).Scan(&n); err != nil {
		e.T.Fatalf("%s: %v", q, err)
	}
	return n
}

// Rows counts the application's rows.
func (e *Env) Rows() int { return e.Count(`SELECT count(*) FROM ` + e.Table) }

// OutboxRows counts the outbox rows for destination.
func (e *Env) OutboxRows(destination string) int {
	return e.Count(`SELECT count(*) FROM ` + e.K.Outbox(e.Spec) + ` WHERE destination = '` + destination + `'`)
}

// Handled lists the application's rows as "source_id@attempt" in the
// order written, per stream.
func (e *Env) Handled() map[string][]string {
	e.T.Helper()
	n := e.Rows()
	tx := e.begin()
	defer tx.Rollback(e.Ctx)
	out := map[string][]string{}
	for i := range n {
		var id, stream string
		var attempt int
		q := fmt.Sprintf(`SELECT source_id, stream, attempt FROM %s ORDER BY n LIMIT 1 OFFSET %d`, e.Table, i)
		if err := tx.QueryRow(e.Ctx, q).Scan(&id, &stream, &attempt); err != nil {
			e.T.Fatal(err)
		}
		out[stream] = append(out[stream], fmt.Sprintf("%s@%d", id, attempt))
	}
	return out
}

// Record writes msg into the application's table inside tx: a handler.
func (e *Env) Record(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (source_id, stream, attempt) VALUES ('%s', '%s', %d)`,
		e.Table, strings.ReplaceAll(msg.ID, "'", "''"), strings.ReplaceAll(msg.Stream, "'", "''"), msg.Attempt))
	return err
}

// WaitFor drives the fake clock a second at a time until cond holds: the
// relay's polls and retries are timers on it. Fake time runs a few hundred
// times faster than real time, so leases and delivery timeouts are hours
// long. It fails the test at the context's deadline.
func (e *Env) WaitFor(what string, cond func() bool) {
	e.T.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-e.Ctx.Done():
			e.T.Fatalf("waiting for %s: %v", what, e.Ctx.Err())
		case <-tick.C:
		}
		e.Clk.Advance(time.Second)
	}
}

// Counter reads the value of one of the tests' registry's counters with
// the given labels (name=value pairs); 0 when absent.
func (e *Env) Counter(name string, labels ...string) int {
	e.T.Helper()
	fams, err := e.Reg.Gather()
	if err != nil {
		e.T.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			return int(m.GetCounter().GetValue())
		}
	}
	return 0
}
