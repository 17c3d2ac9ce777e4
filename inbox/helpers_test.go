package inbox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// epoch is where the tests' fake clock starts (millisecond-aligned, as
// SQLite stores times).
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// quiet discards the logs of the code under test.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// kind is a store the tests run against.
type kind struct {
	name string
	// open opens a fresh store in the place spec names (a file or a
	// schema); spec "" makes a new place.
	open func(t *testing.T, spec string, cfg store.Config) (store.Store, string)
	// table qualifies a table name of the application's.
	table func(spec, name string) string
	// outbox is the qualified outbox table.
	outbox func(spec string) string
	// serial is the column type of an increasing row number.
	serial string
}

var kinds = []kind{
	{
		name: "sqlite",
		open: func(t *testing.T, spec string, cfg store.Config) (store.Store, string) {
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
		table:  func(_, name string) string { return name },
		outbox: func(string) string { return "backstop_outbox" },
		serial: "INTEGER PRIMARY KEY",
	},
	{
		name: "postgres",
		open: func(t *testing.T, spec string, cfg store.Config) (store.Store, string) {
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
		table:  func(spec, name string) string { return spec + "." + name },
		outbox: func(spec string) string { return spec + ".backstop_outbox" },
		serial: "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
	},
}

// forEachStore runs fn once per store kind, in parallel.
func forEachStore(t *testing.T, fn func(t *testing.T, k kind)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			fn(t, k)
		})
	}
}

// env is one test's store, clock and application table.
type env struct {
	t     *testing.T
	ctx   context.Context
	k     kind
	spec  string
	s     store.Store
	clk   *clock.Fake
	reg   *prometheus.Registry
	table string // the application's table of handled messages
}

// testPolicy retries after a minute, at most three attempts, strict order.
var testPolicy = store.Policy{Strategy: retry.NewFixedDelay(time.Minute, false), MaxAttempts: 3, Ordering: outbox.OrderingStrict}

func storeConfig(clk clock.Clock) store.Config {
	return store.Config{
		Clock: clk, LeaseDuration: time.Hour, InstanceTimeout: 2 * time.Hour,
		Policies: map[string]store.Policy{Destination("orders"): testPolicy},
	}
}

func newEnv(t *testing.T, k kind) *env {
	t.Helper()
	return openEnv(t, k, "", clock.NewFake(epoch))
}

// openEnv opens the store of kind k at spec, or a new one with the
// application's table when spec is "".
func openEnv(t *testing.T, k kind, spec string, clk *clock.Fake) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	fresh := spec == ""
	s, spec := k.open(t, spec, storeConfig(clk))
	e := &env{t: t, ctx: ctx, k: k, spec: spec, s: s, clk: clk, reg: prometheus.NewRegistry(), table: k.table(spec, "handled")}
	if fresh {
		e.exec(`CREATE TABLE ` + e.table + ` (n ` + k.serial + `, source_id text NOT NULL, stream text NOT NULL, attempt integer NOT NULL)`)
	}
	return e
}

// config is the tests' inbox Config: the fake clock, one in-process try,
// quiet logs.
func (e *env) config() Config {
	return Config{
		Name: "orders",
		Relay: relay.Config{
			Clock: e.clk, Logger: quiet, Workers: 4,
			PollInterval: time.Second, MaxPollInterval: time.Second,
		},
		Handling: relay.Destination{InProcess: retry.NewConfig(1, nil), Timeout: 10 * time.Hour},
		Metrics:  e.reg,
	}
}

func (e *env) newInbox(cfg Config) *Inbox {
	e.t.Helper()
	in, err := New(e.s, cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return in
}

// exec runs a statement in a transaction of its own.
func (e *env) exec(q string) {
	e.t.Helper()
	tx, err := e.s.(store.Inbox).BeginTx(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	if _, err := tx.Exec(e.ctx, q); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// count runs a count query in a transaction of its own.
func (e *env) count(q string) int {
	e.t.Helper()
	tx, err := e.s.(store.Inbox).BeginTx(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	var n int
	if err := tx.QueryRow(e.ctx, q).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// handled lists the application's rows as "source_id@attempt" in the
// order written (n), per stream.
func (e *env) handled() map[string][]string {
	e.t.Helper()
	n := e.count(`SELECT count(*) FROM ` + e.table)
	tx, err := e.s.(store.Inbox).BeginTx(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	out := map[string][]string{}
	// Rows are read one by one through QueryRow, the store-agnostic
	// interface, by their position.
	for i := range n {
		var id, stream string
		var attempt int
		q := fmt.Sprintf(`SELECT source_id, stream, attempt FROM %s ORDER BY n LIMIT 1 OFFSET %d`, e.table, i)
		if err := tx.QueryRow(e.ctx, q).Scan(&id, &stream, &attempt); err != nil {
			e.t.Fatal(err)
		}
		out[stream] = append(out[stream], fmt.Sprintf("%s@%d", id, attempt))
	}
	return out
}

// record writes msg into the application's table inside tx.
func (e *env) record(ctx context.Context, tx store.Tx, msg *Message) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (source_id, stream, attempt) VALUES ('%s', '%s', %d)`,
		e.table, msg.ID, msg.Stream, msg.Attempt))
	return err
}

// running is an inbox running in the background.
type running struct {
	e    *env
	in   *Inbox
	stop context.CancelFunc
	done chan error
}

func (e *env) run(in *Inbox) *running {
	ctx, cancel := context.WithCancel(e.ctx)
	rn := &running{e: e, in: in, stop: cancel, done: make(chan error, 1)}
	go func() { rn.done <- in.Run(ctx) }()
	e.t.Cleanup(func() { rn.shutdown() })
	return rn
}

// shutdown stops Run and returns its error.
func (rn *running) shutdown() error {
	rn.stop()
	select {
	case err := <-rn.done:
		rn.done <- err
		return err
	case <-time.After(30 * time.Second):
		rn.e.t.Fatal("Run did not return")
		return nil
	}
}

// waitFor drives the fake clock a second at a time until cond holds: the
// relay's polls and retries are timers on it. Fake time runs a few hundred
// times faster than real time, so the tests' leases and delivery timeouts
// are hours long. It fails the test at the context's deadline.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("waiting for %s: %v", what, e.ctx.Err())
		case <-tick.C:
		}
		e.clk.Advance(time.Second)
	}
}

// received is a message as a receiver would hand it over.
func received(id, typ, stream string) Received {
	return Received{ID: id, Type: typ, Stream: stream, Payload: []byte(`{"id":"` + id + `"}`), Source: "test"}
}

func (e *env) receive(in *Inbox, r Received) bool {
	e.t.Helper()
	dup, err := in.Receive(e.ctx, r)
	if err != nil {
		e.t.Fatalf("Receive %s: %v", r.ID, err)
	}
	return dup
}

// counter reads the value of a counter of reg with the given labels
// (name=value pairs); 0 when absent.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
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

// callLog records handler calls, safe for concurrent use.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(msg *Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("%s@%d", msg.ID, msg.Attempt))
}

func (l *callLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, " ")
}

func (l *callLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}
