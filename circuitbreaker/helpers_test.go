package circuitbreaker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
)

var (
	errBoom = errors.New("boom")
	t0      = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
)

// recorder collects OnStateChange calls.
type recorder struct {
	mu  sync.Mutex
	got [][2]State
}

func (r *recorder) record(from, to State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, [2]State{from, to})
}

func (r *recorder) pairs() [][2]State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][2]State(nil), r.got...)
}

// transitions returns the calls as "from->to" strings.
func (r *recorder) transitions() []string {
	var out []string
	for _, p := range r.pairs() {
		out = append(out, p[0].String()+"->"+p[1].String())
	}
	return out
}

// newTest returns a breaker on a fake clock reading t0, with logging off.
func newTest(t *testing.T, cfg Config) (*CircuitBreaker, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(t0)
	cfg.Clock = fc
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return New(&cfg), fc
}

func succeed() error { return nil }
func fail() error    { return errBoom }

// run makes n calls that return err and fails the test if any is rejected.
func run(t *testing.T, cb *CircuitBreaker, n int, err error) {
	t.Helper()
	for i := 0; i < n; i++ {
		got := cb.Execute(context.Background(), func() error { return err })
		if got == ErrCircuitOpen {
			t.Fatalf("call %d rejected in state %s", i, cb.State())
		}
	}
}

func wantState(t *testing.T, cb *CircuitBreaker, want State) {
	t.Helper()
	if got := cb.State(); got != want {
		t.Fatalf("State() = %s, want %s", got, want)
	}
}

func wantRejected(t *testing.T, cb *CircuitBreaker) {
	t.Helper()
	called := false
	err := cb.Execute(context.Background(), func() error { called = true; return nil })
	if err != ErrCircuitOpen {
		t.Fatalf("Execute = %v, want ErrCircuitOpen", err)
	}
	if called {
		t.Fatal("rejected call ran fn")
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
