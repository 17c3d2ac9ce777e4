package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
)

// epoch is the fake clock's start, millisecond-aligned so that every store
// keeps it exactly.
var epoch = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// env is one test's store and clock.
type env struct {
	t   *testing.T
	h   Harness
	s   store.Store
	clk *clock.Fake
	cfg store.Config
	ctx context.Context
}

// option changes the suite's base Config.
type option func(*store.Config)

func withOrdering(o outbox.Ordering) option {
	return func(c *store.Config) { c.DefaultPolicy.Ordering = o }
}

func withMaxAttempts(n int) option {
	return func(c *store.Config) { c.DefaultPolicy.MaxAttempts = n }
}

func withStrategy(s retry.Strategy) option {
	return func(c *store.Config) { c.DefaultPolicy.Strategy = s }
}

// baseConfig is seed 000's schedule without jitter (1m, 2m, 4m...), strict
// ordering, 5 attempts, 30 s leases, 60 s instance timeout.
func baseConfig(clk clock.Clock) store.Config {
	return store.Config{
		DefaultPolicy: store.Policy{
			Strategy:    retry.DurableBackoff(),
			MaxAttempts: 5,
			Ordering:    outbox.OrderingStrict,
		},
		LeaseDuration:   30 * time.Second,
		InstanceTimeout: 60 * time.Second,
		Clock:           clk,
	}
}

func newEnv(t *testing.T, h Harness, opts ...option) *env {
	t.Helper()
	clk := clock.NewFake(epoch)
	cfg := baseConfig(clk)
	for _, o := range opts {
		o(&cfg)
	}
	s, err := h.Open(t, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return &env{t: t, h: h, s: s, clk: clk, cfg: cfg, ctx: context.Background()}
}

// constant is a strategy waiting d after every failure.
type constant time.Duration

func (c constant) Delay(int) time.Duration { return time.Duration(c) }

// msg builds a message for destination and stream.
func msg(destination, stream string) *outbox.Message {
	return &outbox.Message{
		Destination: destination,
		Stream:      stream,
		Type:        "test.event",
		Payload:     []byte(`{"n":1}`),
	}
}

// msgs builds n messages of one stream.
func msgs(n int, destination, stream string) []*outbox.Message {
	out := make([]*outbox.Message, n)
	for i := range out {
		out[i] = msg(destination, stream)
		out[i].Payload = fmt.Appendf(nil, `{"n":%d}`, i)
	}
	return out
}

func (e *env) enqueue(ms ...*outbox.Message) []*outbox.Message {
	e.t.Helper()
	if err := e.s.Enqueue(e.ctx, ms...); err != nil {
		e.t.Fatalf("Enqueue: %v", err)
	}
	return ms
}

// batch runs ProcessBatch as instance and fails the test on error.
func (e *env) batch(instance string, b store.Batch) *store.Result {
	e.t.Helper()
	b.Instance.ID = instance
	r, err := e.s.ProcessBatch(e.ctx, &b)
	if err != nil {
		e.t.Fatalf("ProcessBatch(%s): %v", instance, err)
	}
	return r
}

// claim claims up to limit messages as instance.
func (e *env) claim(instance string, limit int) []*outbox.Message {
	e.t.Helper()
	return e.batch(instance, store.Batch{Claim: store.ClaimRequest{Limit: limit}}).Claimed
}

// fail records a plain transient failure of id by instance.
func (e *env) fail(instance string, f store.Failure) *store.Result {
	e.t.Helper()
	if f.Error == "" {
		f.Error = "boom"
	}
	return e.batch(instance, store.Batch{Failures: []store.Failure{f}})
}

// complete records completions with status st by instance.
func (e *env) complete(instance string, st outbox.Status, ids ...uuid.UUID) {
	e.t.Helper()
	cs := make([]store.Completion, len(ids))
	for i, id := range ids {
		cs[i] = store.Completion{ID: id, Status: st}
	}
	e.batch(instance, store.Batch{Completions: cs})
}

func (e *env) get(id uuid.UUID) *outbox.Message {
	e.t.Helper()
	m, err := e.s.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Get(%s): %v", id, err)
	}
	return m
}

func (e *env) mustBeGone(id uuid.UUID) {
	e.t.Helper()
	if _, err := e.s.Get(e.ctx, id); !errors.Is(err, store.ErrNotFound) {
		e.t.Fatalf("Get(%s): err = %v, want ErrNotFound", id, err)
	}
}

// deadLetter fails m permanently (claiming it first) and returns the
// result.
func (e *env) deadLetter(instance string, m *outbox.Message) *store.Result {
	e.t.Helper()
	e.claimExactly(instance, 1, m)
	r := e.fail(instance, store.Failure{ID: m.ID, Permanent: true, Error: "bad payload"})
	if len(r.DeadLettered) != 1 || r.DeadLettered[0] != m.ID {
		e.t.Fatalf("DeadLettered = %v, want [%s]", r.DeadLettered, m.ID)
	}
	return r
}

// claimExactly claims with limit and requires exactly want, in order.
func (e *env) claimExactly(instance string, limit int, want ...*outbox.Message) []*outbox.Message {
	e.t.Helper()
	got := e.claim(instance, limit)
	sameIDs(e.t, "claimed", got, want...)
	return got
}

// sameIDs requires got to hold the ids of want, in order.
func sameIDs(t *testing.T, what string, got []*outbox.Message, want ...*outbox.Message) {
	t.Helper()
	g := make([]string, len(got))
	for i, m := range got {
		g[i] = m.ID.String()
	}
	w := make([]string, len(want))
	for i, m := range want {
		w[i] = m.ID.String()
	}
	if strings.Join(g, ",") != strings.Join(w, ",") {
		t.Fatalf("%s = %s\nwant %s", what, label(got), label(want))
	}
}

// label names messages by payload for readable failures.
func label(ms []*outbox.Message) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s/%s#%d%s", m.Destination, m.Stream, m.Seq, m.Payload)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func ids(ms ...*outbox.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func timeEq(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func isErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

func containsID(list []uuid.UUID, id uuid.UUID) bool {
	for _, x := range list {
		if x == id {
			return true
		}
	}
	return false
}
