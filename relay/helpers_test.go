package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

// epoch is the fake clock's start, millisecond-aligned for SQLite.
var epoch = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// env is one test's store, clock and log.
type env struct {
	t    *testing.T
	ctx  context.Context
	clk  *clock.Fake
	s    *sqlite.Store
	path string
	logs *logSink
}

// newEnv opens a SQLite store in a temporary file on a fake clock. The
// base policy: strict ordering, 3 attempts, a fixed 1 min between them.
func newEnv(t *testing.T, opts ...func(*store.Config)) *env {
	t.Helper()
	ctx := safetyNet(t)
	clk := clock.NewFake(epoch)
	cfg := store.Config{
		DefaultPolicy: store.Policy{Strategy: retry.NewFixedDelay(time.Minute, false), MaxAttempts: 3, Ordering: outbox.OrderingStrict},
		Clock:         clk,
	}
	for _, o := range opts {
		o(&cfg)
	}
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlite.Open(ctx, path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &env{t: t, ctx: ctx, clk: clk, s: s, path: path, logs: &logSink{}}
}

// safetyNet returns the context of a test's store calls and relays: it
// ends a little before the test binary's -timeout, so that a test that
// hangs fails with its own message. Each wait of a test has its own,
// shorter net (waitNet). A fixed 30 s for the whole test failed healthy
// tests on a loaded machine: a test of a hundred rounds, or of a few
// hundred deliveries on real time, takes a few seconds of CPU under
// -race, and several times as long when it gets a fraction of a core.
func safetyNet(t *testing.T) context.Context {
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-min(time.Until(d)/10, 30*time.Second)))
		t.Cleanup(cancel)
	}
	return ctx
}

// waitNet bounds one wait of a test for the relay (a round, Run's
// return, a delivery): a safety net only, since one round takes well
// under a second even on a loaded machine.
const waitNet = 30 * time.Second

// waitDone returns a channel closed after waitNet: the net of one wait
// that selects on it.
func (e *env) waitDone() <-chan struct{} {
	ctx, cancel := context.WithTimeout(e.ctx, waitNet)
	e.t.Cleanup(cancel)
	return ctx.Done()
}

func withOrdering(o outbox.Ordering) func(*store.Config) {
	return func(c *store.Config) { c.DefaultPolicy.Ordering = o }
}

// msg is a message for dest on stream; n goes into its payload.
func msg(dest, stream string, n int) *outbox.Message {
	return &outbox.Message{Destination: dest, Stream: stream, Type: "test.event", Payload: []byte(fmt.Sprintf("payload-%s-%d", stream, n))}
}

func (e *env) enqueue(msgs ...*outbox.Message) {
	e.t.Helper()
	if err := e.s.Enqueue(e.ctx, msgs...); err != nil {
		e.t.Fatal(err)
	}
}

// get reads a message; nil once it is gone (delivered).
func (e *env) get(id uuid.UUID) *outbox.Message {
	e.t.Helper()
	m, err := e.s.Get(e.ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) deadLetters() []*dlq.Entry {
	e.t.Helper()
	es, err := e.s.DLQ().List(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

// config is a test Config: the fake clock, the captured log, and a
// one-try in-process retry so that tests count transport calls exactly.
func (e *env) config(dests map[string]Destination) Config {
	for name, d := range dests {
		if d.InProcess == nil {
			d.InProcess = retry.NewConfig(1, nil)
		}
		dests[name] = d
	}
	return Config{
		Destinations: dests, Clock: e.clk, Logger: slog.New(e.logs),
		PollInterval: time.Second, MaxPollInterval: 5 * time.Second,
	}
}

// running is a Relay running in the background.
type running struct {
	e      *env
	r      *Relay
	cancel context.CancelFunc
	done   chan error
}

func (e *env) newRelay(cfg Config) *Relay {
	e.t.Helper()
	r, err := New(e.s, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// run starts r; the test's cleanup stops it.
func (e *env) run(r *Relay) *running {
	ctx, cancel := context.WithCancel(e.ctx)
	rn := &running{e: e, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { rn.stop() })
	return rn
}

func (e *env) start(cfg Config) *running { return e.run(e.newRelay(cfg)) }

// stop ends Run and returns its error.
func (rn *running) stop() error {
	rn.cancel()
	net := time.NewTimer(waitNet)
	defer net.Stop()
	select {
	case err := <-rn.done:
		rn.done <- err
		return err
	case <-net.C:
		rn.e.t.Fatal("Run did not return")
		return nil
	}
}

// settle makes the relay run a round that starts now and waits until,
// after it, the relay is idle: everything claimable has been delivered
// and recorded.
func (rn *running) settle() {
	rn.e.t.Helper()
	ctx, cancel := context.WithTimeout(rn.e.ctx, waitNet)
	defer cancel()
	before := rn.r.rounds.Load()
	rn.r.wake()
	if err := rn.r.idle.wait(ctx, before); err != nil {
		rn.e.t.Fatalf("relay did not settle: %v (stats %+v)", err, rn.r.Stats())
	}
}

// advance moves the fake clock and settles.
func (rn *running) advance(d time.Duration) {
	rn.e.t.Helper()
	rn.e.clk.Advance(d)
	rn.settle()
}

// waitFor makes the relay run rounds until cond holds.
func (rn *running) waitFor(what string, cond func() bool) {
	rn.e.t.Helper()
	for !cond() {
		ctx, cancel := context.WithTimeout(rn.e.ctx, waitNet)
		before := rn.r.rounds.Load()
		rn.r.wake()
		err := rn.r.turned.wait(ctx, before)
		cancel()
		if err != nil {
			rn.e.t.Fatalf("waiting for %s: %v (stats %+v)", what, err, rn.r.Stats())
		}
	}
}

// waitStill is waitFor for what must happen while the fake clock stands
// still: it fails the test, with why, when cond is not true within waitNet
// of real time. (waitFor alone goes on as long as the relay's rounds do.)
func (rn *running) waitStill(what, why string, cond func() bool) {
	rn.e.t.Helper()
	deadline := time.Now().Add(waitNet)
	rn.waitFor(what, func() bool {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			rn.e.t.Fatalf("no %s within %v of real time without the clock moving: %s (stats %+v)", what, waitNet, why, rn.r.Stats())
		}
		return false
	})
}

// firstHangs returns a recorder whose first delivery closes started and
// then waits, ignoring its context, until proceed is closed; the others
// succeed at once.
func firstHangs() (rec *recorder, started, proceed chan struct{}) {
	started, proceed = make(chan struct{}), make(chan struct{})
	rec = &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			close(started)
			<-proceed
		}
		return nil
	}}
	return rec, started, proceed
}

// recorder is a Func transport that records the payloads it is given and
// answers with fn (nil fn: success).
type recorder struct {
	mu    sync.Mutex
	calls []string
	fn    func(ctx context.Context, m *outbox.Message, call int) error
}

func (rec *recorder) transport() transport.Transport {
	return transport.Func(func(ctx context.Context, m *outbox.Message) error {
		rec.mu.Lock()
		rec.calls = append(rec.calls, string(m.Payload))
		n := len(rec.calls)
		fn := rec.fn
		rec.mu.Unlock()
		if fn == nil {
			return nil
		}
		return fn(ctx, m, n)
	})
}

func (rec *recorder) got() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.calls...)
}

// count returns how many calls carried payload p.
func (rec *recorder) count(p string) int {
	n := 0
	for _, c := range rec.got() {
		if c == p {
			n++
		}
	}
	return n
}

// logSink is a slog.Handler that keeps every record.
type logSink struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }

func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	rec := logRec{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	s.mu.Lock()
	s.recs = append(s.recs, rec)
	s.mu.Unlock()
	return nil
}

func (s *logSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *logSink) WithGroup(string) slog.Handler      { return s }

// find returns the records whose message starts with msg.
func (s *logSink) find(msg string) []logRec {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logRec
	for _, r := range s.recs {
		if strings.HasPrefix(r.msg, msg) {
			out = append(out, r)
		}
	}
	return out
}

// contains reports whether any record's message or attribute holds s.
func (s *logSink) contains(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs {
		if strings.Contains(r.msg, sub) {
			return true
		}
		for _, v := range r.attrs {
			if strings.Contains(v, sub) {
				return true
			}
		}
	}
	return false
}
