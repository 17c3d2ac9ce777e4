package workflow_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfsqlite"
	"github.com/backstophq/backstop/workflow/wfstore"
)

var (
	t0      = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	errBoom = errors.New("boom")
)

// harness is an engine on an in-memory SQLite store with a fake clock, and
// a record of what the tasks did and the events the engine emitted.
type harness struct {
	t      *testing.T
	ctx    context.Context
	clock  *clock.Fake
	sqlite *sqlite.Store
	store  wfstore.Store
	engine *workflow.Engine
	logs   *bytes.Buffer

	mu     sync.Mutex
	calls  map[string]int
	events []workflow.Event
	subs   []chan workflow.Event
}

func newHarness(t *testing.T, cfg workflow.Config) *harness {
	t.Helper()
	st, ws := openSQLite(t, ":memory:")
	return newHarnessOn(t, st, ws, cfg)
}

// openSQLite opens a SQLite store at path and the workflow store on it,
// closed when the test ends.
func openSQLite(t testing.TB, path string) (*sqlite.Store, *wfsqlite.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ws, err := wfsqlite.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	return st, ws
}

func newHarnessOn(t *testing.T, st *sqlite.Store, ws wfstore.Store, cfg workflow.Config) *harness {
	h := &harness{t: t, ctx: context.Background(), sqlite: st, store: ws, calls: map[string]int{}, logs: &bytes.Buffer{}}
	if cfg.Clock == nil {
		h.clock = clock.NewFake(t0)
		cfg.Clock = h.clock
	} else if f, ok := cfg.Clock.(*clock.Fake); ok {
		h.clock = f
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: h.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	user := cfg.OnEvent
	cfg.OnEvent = func(ev workflow.Event) {
		h.mu.Lock()
		h.events = append(h.events, ev)
		subs := append([]chan workflow.Event(nil), h.subs...)
		h.mu.Unlock()
		for _, c := range subs {
			c <- ev
		}
		if user != nil {
			user(ev)
		}
	}
	e, err := workflow.NewEngine(ws, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.engine = e
	return h
}

// lockedWriter serialises writes from concurrent loggers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// subscribe returns a channel receiving every later event.
func (h *harness) subscribe() chan workflow.Event {
	c := make(chan workflow.Event, 1024)
	h.mu.Lock()
	h.subs = append(h.subs, c)
	h.mu.Unlock()
	return c
}

// waitFor reads events from c until one matches, or fails the test when
// done (the run) ends first.
func (h *harness) waitFor(c chan workflow.Event, done <-chan struct{}, match func(workflow.Event) bool) workflow.Event {
	h.t.Helper()
	for {
		select {
		case ev := <-c:
			if match(ev) {
				return ev
			}
		case <-done:
			for {
				select {
				case ev := <-c:
					if match(ev) {
						return ev
					}
				default:
					h.t.Fatal("the run ended before the awaited event")
				}
			}
		}
	}
}

// task returns a task that counts its calls and runs fn (nil: succeed).
func (h *harness) task(id string, fn func(ctx context.Context, tc *workflow.TaskContext) error, up ...string) workflow.Task {
	return workflow.Task{ID: id, Upstream: up, Run: func(ctx context.Context, tc *workflow.TaskContext) error {
		h.mu.Lock()
		h.calls[id]++
		h.mu.Unlock()
		if fn == nil {
			return nil
		}
		return fn(ctx, tc)
	}}
}

func (h *harness) callsOf(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[id]
}

// register builds and registers a DAG.
func (h *harness) register(id string, prop *errorhandling.PropagationConfig, tasks ...workflow.Task) *workflow.DAG {
	h.t.Helper()
	d, err := workflow.NewDAG(id, prop, tasks...)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.engine.Register(d); err != nil {
		h.t.Fatal(err)
	}
	return d
}

// run runs the DAG to its end.
func (h *harness) run(dagID string, opts workflow.RunOptions) (*workflow.Run, error) {
	h.t.Helper()
	r, err := h.engine.Run(h.ctx, dagID, opts)
	if r == nil {
		h.t.Fatalf("Run(%s) returned no run: %v\nlogs:\n%s", dagID, err, h.logs.String())
	}
	return r, err
}

// wantStates checks each task's state.
func wantStates(t *testing.T, r *workflow.Run, want map[string]models.TaskState) {
	t.Helper()
	for id, st := range want {
		ts := r.Task(id)
		if ts == nil {
			t.Errorf("run has no task %s", id)
			continue
		}
		if ts.State != st {
			t.Errorf("task %s is %s, want %s (reason %q)", id, ts.State, st, ts.Reason)
		}
	}
}

// wantReason checks that a task's reason is exactly want.
func wantReason(t *testing.T, r *workflow.Run, id, want string) {
	t.Helper()
	if got := r.Task(id).Reason; got != want {
		t.Errorf("task %s reason = %q\nwant %q", id, got, want)
	}
}

func fail(err error) func(context.Context, *workflow.TaskContext) error {
	return func(context.Context, *workflow.TaskContext) error { return err }
}
