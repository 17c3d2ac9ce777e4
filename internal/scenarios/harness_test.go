package scenarios

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// epoch is where the fake clock starts: whole seconds, so that SQLite's
// milliseconds and PostgreSQL's microseconds hold it exactly.
var epoch = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// dest is the destination every scenario delivers to: the local webhook.
const dest = "hooks"

// backend names a store implementation.
type backend string

const (
	onSQLite   backend = "sqlite"
	onPostgres backend = "postgres"
)

// backends are the stores a scenario runs on.
var backends = []backend{onSQLite, onPostgres}

// env is one scenario's store, fake clock and relays.
type env struct {
	t   *testing.T
	ctx context.Context // the scenario's deadline, a safety net only
	clk *clock.Fake
	s   store.Store
	// changed fires on every store call a relay makes and on every request
	// the webhook receives: the moments a waited-for condition may change.
	changed *pulse

	mu      sync.Mutex
	running []*runner
}

// newEnv opens a store of kind b on a fake clock. The base policy: strict
// ordering, 3 attempts, a fixed minute between them; opts change it.
func newEnv(t *testing.T, b backend, opts ...func(*store.Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	t.Cleanup(cancel)
	clk := clock.NewFake(epoch)
	cfg := store.Config{
		DefaultPolicy: store.Policy{
			Strategy:    retry.NewFixedDelay(time.Minute, false),
			MaxAttempts: 3,
			Ordering:    outbox.OrderingStrict,
		},
		Clock: clk,
	}
	for _, o := range opts {
		o(&cfg)
	}
	e := &env{t: t, ctx: ctx, clk: clk, changed: &pulse{}}
	switch b {
	case onSQLite:
		s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "outbox.db"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		e.s = s
	case onPostgres:
		e.s = openPostgres(t, ctx, cfg)
	default:
		t.Fatalf("unknown backend %q", b)
	}
	return e
}

// forEachBackend runs fn as a parallel subtest on every backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// stream makes n messages for dest on stream s; their payloads are
// "s-0", "s-1"...
func stream(s string, n int) []*outbox.Message {
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{Destination: dest, Stream: s, Type: "test.event", Payload: []byte(fmt.Sprintf("%s-%d", s, i))}
	}
	return msgs
}

// interleave returns the messages of streams one of each in turn, the
// order an application writing to many streams at once produces.
func interleave(streams ...[]*outbox.Message) []*outbox.Message {
	var out []*outbox.Message
	for i := 0; ; i++ {
		added := false
		for _, s := range streams {
			if i < len(s) {
				out = append(out, s[i])
				added = true
			}
		}
		if !added {
			return out
		}
	}
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

// gone reports whether every message has left the outbox (delivered).
func (e *env) gone(msgs ...*outbox.Message) bool {
	e.t.Helper()
	for _, m := range msgs {
		if e.get(m.ID) != nil {
			return false
		}
	}
	return true
}

func (e *env) deadLetters() []*dlq.Entry {
	e.t.Helper()
	es, err := e.s.DLQ().List(e.ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

// advance moves the fake clock. Call it when the relays are settled, so
// that no delivery in progress sees its timeout pass.
func (e *env) advance(d time.Duration) { e.clk.Advance(d) }

// kick makes every running relay run a round soon.
func (e *env) kick() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, rn := range e.running {
		rn.hs.kick()
	}
}

// waitFor makes the relays run rounds until cond holds, re-checking it
// whenever a store call or a webhook request happens.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	for {
		ch := e.changed.next()
		if cond() {
			return
		}
		e.kick()
		select {
		case <-ch:
		case <-e.ctx.Done():
			e.t.Fatalf("waiting for %s: %v", what, e.ctx.Err())
		}
	}
}

// settle waits until every running relay has made two store calls in a
// row, both begun after now, that left it holding nothing: whatever was
// claimable has been delivered (or given back) and recorded, and the
// relay's Stats count it.
func (e *env) settle() {
	e.t.Helper()
	e.mu.Lock()
	rns := append([]*runner(nil), e.running...)
	e.mu.Unlock()
	for _, rn := range rns {
		rn.settle()
	}
}

// runner is a relay running in the background on a hooked store.
type runner struct {
	e      *env
	id     string
	r      *relay.Relay
	hs     *hookedStore
	cancel context.CancelFunc
	done   chan error
}

// start runs a relay with Instance.ID id on the env's store (through a
// hookedStore of its own) and clock. Zero PollInterval, MaxPollInterval
// and Logger are set to 1 s, 5 s and a discarding logger. The test's
// cleanup stops it.
func (e *env) start(id string, cfg relay.Config) *runner {
	e.t.Helper()
	hs := newHookedStore(e.s, e.clk, e.changed)
	cfg.Instance.ID = id
	cfg.Clock = e.clk
	if cfg.PollInterval == 0 {
		cfg.PollInterval, cfg.MaxPollInterval = time.Second, 5*time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := relay.New(hs, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{e: e, id: id, r: r, hs: hs, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.mu.Lock()
	e.running = append(e.running, rn)
	e.mu.Unlock()
	e.t.Cleanup(func() {
		if err := rn.stop(); err != nil && !hs.killed() {
			e.t.Errorf("relay %s: Run = %v", id, err)
		}
	})
	return rn
}

// stop cancels Run and returns its error; a Run that does not return
// within ten seconds fails the test.
func (rn *runner) stop() error {
	rn.cancel()
	rn.e.mu.Lock()
	for i, other := range rn.e.running {
		if other == rn {
			rn.e.running = append(rn.e.running[:i], rn.e.running[i+1:]...)
			break
		}
	}
	rn.e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case err := <-rn.done:
		rn.done <- err
		return err
	case <-ctx.Done():
		rn.e.t.Errorf("relay %s: Run did not return", rn.id)
		return ctx.Err()
	}
}

// settle waits until the relay has made two store calls in a row, both
// begun after now, that left it holding nothing.
func (rn *runner) settle() {
	rn.e.t.Helper()
	mark := rn.hs.startedCalls()
	rn.e.waitFor(rn.id+" to settle", func() bool { return rn.hs.settledAfter(mark) })
}

// pulse wakes everyone waiting on it each time it fires.
type pulse struct {
	mu sync.Mutex
	ch chan struct{}
}

// next returns a channel closed at the next fire.
func (p *pulse) next() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.ch = make(chan struct{})
	}
	return p.ch
}

func (p *pulse) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		close(p.ch)
		p.ch = nil
	}
}
