package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// sharedTask is a task that records how many of its attempts run at once
// and finishes whatever its context says, once release is closed, as a
// task finishing its side effect does.
type sharedTask struct {
	running, most atomic.Int32
	started       chan struct{} // closed when the first attempt starts
	release       chan struct{}
}

// closeOnce closes c unless it is closed already; only the test's
// goroutine calls it.
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

func newSharedTask() *sharedTask {
	return &sharedTask{started: make(chan struct{}), release: make(chan struct{})}
}

func (s *sharedTask) run(context.Context, *workflow.TaskContext) error {
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	if n == 1 {
		select {
		case <-s.started:
		default:
			close(s.started)
		}
	}
	<-s.release
	return nil
}

// holdWhileSlow moves clk 44 s on, in steps of 11 s, while the driver of
// engine A (whose store is rn) is in slow user code, and checks that A
// renews the lease at each step and that B cannot take the run over.
func holdWhileSlow(t *testing.T, clk *clock.Fake, rn *renewals, b *workflow.Engine, runID string) {
	t.Helper()
	for range 4 {
		clk.Advance(11 * time.Second)
		select {
		case <-rn.done:
		case <-time.After(30 * time.Second): // only a hang gets here
			t.Fatal("no renewal of the lease while the driver is in slow user code")
		}
	}
	if _, err := b.Resume(context.Background(), runID); !errors.Is(err, wfstore.ErrLeased) {
		t.Fatalf("instance B's Resume = %v, want ErrLeased: A, in slow user code, still drives the run", err)
	}
}

// The dead-letter manager's alert callbacks run on the driver's goroutine
// (AddFailedTask calls them); while a slow one waits (an alert posted to a
// slow endpoint) the run's lease is renewed. It lapsed, and another
// instance took the run over and started a still-running task a second
// time at once.
func TestSlowDeadLetterAlertKeepsTheLease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alert func(m *dlq.Manager, slow func())
	}{
		{"OnEntryAdded", func(m *dlq.Manager, slow func()) { m.OnEntryAdded(func(*dlq.Entry) { slow() }) }},
		{"OnThresholdReached", func(m *dlq.Manager, slow func()) { m.OnThresholdReached(func(int) { slow() }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := newHarness(t, workflow.Config{})
			rn := &renewals{Store: base.store, done: make(chan struct{}, 16)}
			manager := dlq.NewManager(base.store.DLQ(), 1)
			a := newHarnessOn(t, base.sqlite, rn, workflow.Config{InstanceID: "A", LeaseDuration: 30 * time.Second,
				Clock: base.clock, DLQManager: manager})
			b := newHarnessOn(t, base.sqlite, base.store, workflow.Config{InstanceID: "B", LeaseDuration: 30 * time.Second,
				Clock: base.clock})
			long := newSharedTask()
			bad := func(context.Context, *workflow.TaskContext) error {
				<-long.started
				return eh.Permanent(errBoom)
			}
			prop := &eh.PropagationConfig{Policy: eh.PropagationPolicyAllowPartial, AllowPartialSuccess: true}
			for _, h := range []*harness{a, b} {
				h.register("dbl", prop, workflow.Task{ID: "long", Run: long.run}, workflow.Task{ID: "bad", Run: bad})
			}
			inAlert, releaseAlert := make(chan struct{}), make(chan struct{})
			tc.alert(a.engine.DeadLetters(), func() {
				close(inAlert)
				<-releaseAlert
			})

			done, out := a.runAsync("dbl", workflow.RunOptions{ID: "r-dbl"})
			t.Cleanup(func() { // before the store closes, also when the test fails
				closeOnce(releaseAlert)
				closeOnce(long.release)
				<-done
			})
			<-inAlert
			holdWhileSlow(t, base.clock, rn, b.engine, "r-dbl")
			closeOnce(releaseAlert)
			closeOnce(long.release)
			<-done
			if r, err := out(); err != nil || r.Task("long").State != "success" {
				t.Fatalf("A: %v, %v", r, err)
			}
			if n := long.most.Load(); n != 1 {
				t.Fatalf("task long ran %d times at once", n)
			}
		})
	}
}

// An OnCommit function runs inside the transaction that records the
// task's success, on the driver's goroutine; while a slow one runs, the
// run's lease is renewed. On PostgreSQL it lapsed, and another instance
// took the run over and started a still-running task a second time at
// once.
func TestSlowOnCommitKeepsTheLeasePostgres(t *testing.T) {
	t.Parallel()
	spec := "postgres:" + testenv.NewSchema(t, "wf_commit_")
	clk := clock.NewFake(t0)
	wsA, _ := openCrashStore(t, spec)
	wsB, _ := openCrashStore(t, spec)
	rn := &renewals{Store: wsA, done: make(chan struct{}, 16)}
	a, err := workflow.NewEngine(rn, workflow.Config{InstanceID: "A", LeaseDuration: 30 * time.Second, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b, err := workflow.NewEngine(wsB, workflow.Config{InstanceID: "B", LeaseDuration: 30 * time.Second, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	long := newSharedTask()
	inCommit, releaseCommit := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context, tc *workflow.TaskContext) error {
		<-long.started
		tc.OnCommit(func(context.Context, any) error {
			close(inCommit)
			<-releaseCommit
			return nil
		})
		return nil
	}
	for _, e := range []*workflow.Engine{a, b} {
		d, err := workflow.NewDAG("dbl", nil, workflow.Task{ID: "long", Run: long.run}, workflow.Task{ID: "slow", Run: slow})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(d); err != nil {
			t.Fatal(err)
		}
	}
	var r *workflow.Run
	var runErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, runErr = a.Run(context.Background(), "dbl", workflow.RunOptions{ID: "r-dbl"})
	}()
	t.Cleanup(func() { // before the stores close, also when the test fails
		closeOnce(releaseCommit)
		closeOnce(long.release)
		<-done
	})
	<-inCommit
	holdWhileSlow(t, clk, rn, b, "r-dbl")
	closeOnce(releaseCommit)
	closeOnce(long.release)
	<-done
	if runErr != nil || r.State != "success" {
		t.Fatalf("A: %v, %v", r, runErr)
	}
	if n := long.most.Load(); n != 1 {
		t.Fatalf("task long ran %d times at once", n)
	}
}
