package workflow_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// clockJumpedMsg is what Work logs when its clock jumped forward.
const clockJumpedMsg = "the clock jumped forward: runs whose leases look lapsed are not taken over for a lease, so that the instances driving them can renew"

// gatedRenewals holds every RenewRun until open is closed, as an instance
// whose renewal timer has not fired yet after the clock jumped.
type gatedRenewals struct {
	wfstore.Store
	open chan struct{}
}

func (g *gatedRenewals) RenewRun(ctx context.Context, runID string, l wfstore.Lease) error {
	<-g.open
	return g.Store.RenewRun(ctx, runID, l)
}

// acquisitions reports each run AcquireRun gave the lease of.
type acquisitions struct {
	wfstore.Store
	took chan string
}

func (a *acquisitions) AcquireRun(ctx context.Context, runID string, l wfstore.Lease) error {
	err := a.Store.AcquireRun(ctx, runID, l)
	if err == nil {
		a.took <- runID
	}
	return err
}

// When the clock steps an hour forward, instance B's Work does not take a
// run that instance A still drives before A has had a lease to renew it
// on the new clock: every lease looked lapsed at once, and B took the run
// over and ran its running task a second time at once, before A's next
// renewal (due a third of a lease later) found the lease lost.
func TestForwardClockStepDoesNotHandALiveRunToAnother(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"sqlite::memory:", "postgres:" + testenv.NewSchema(t, "wf_jump_")} {
		t.Run(strings.SplitN(spec, ":", 2)[0], func(t *testing.T) {
			if strings.HasPrefix(spec, "postgres") && testing.Short() {
				t.Skip("short")
			}
			ws, _ := openCrashStore(t, spec)
			clk := clock.NewFake(t0)
			gate := &gatedRenewals{Store: ws, open: make(chan struct{})}
			watch := &acquisitions{Store: ws, took: make(chan string, 16)}
			jumped := make(chan struct{})
			a, err := workflow.NewEngine(gate, workflow.Config{InstanceID: "A", LeaseDuration: 30 * time.Second,
				Clock: clk, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			b, err := workflow.NewEngine(watch, workflow.Config{InstanceID: "B", LeaseDuration: 30 * time.Second,
				Clock: clk, Logger: slog.New(&signalHandler{msg: clockJumpedMsg, c: jumped})})
			if err != nil {
				t.Fatal(err)
			}
			long := newSharedTask()
			for _, e := range []*workflow.Engine{a, b} {
				d, err := workflow.NewDAG("jump", nil, workflow.Task{ID: "long", Run: long.run})
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
				r, runErr = a.Run(context.Background(), "jump", workflow.RunOptions{ID: "r-jump"})
			}()
			ctx, stopB := context.WithCancel(context.Background())
			workDone := make(chan struct{})
			go func() {
				defer close(workDone)
				_ = b.Work(ctx)
			}()
			t.Cleanup(func() { // before the store closes, also when the test fails
				closeOnce(gate.open)
				closeOnce(long.release)
				stopB()
				<-workDone
				<-done
			})
			<-long.started
			// A's keeper and B's Work wait on the clock; it steps an hour on.
			clk.WaitForTimers(2, done)
			clk.Advance(time.Hour)
			select {
			case id := <-watch.took:
				t.Fatalf("B took run %s over right after the clock stepped forward, before A could renew its lease", id)
			case <-jumped:
			case <-time.After(30 * time.Second): // only a hang gets here
				t.Fatal("B neither took the run nor said the clock jumped")
			}
			closeOnce(gate.open)
			// A renews every 10 s; B looks every 15 s, a lease and more.
			for range 6 {
				clk.WaitForTimers(2, done)
				clk.Advance(10 * time.Second)
			}
			select {
			case id := <-watch.took:
				t.Fatalf("B took run %s over while A renewed its lease", id)
			default:
			}
			closeOnce(long.release)
			<-done
			if runErr != nil || r.State != models.RunStateSuccess {
				t.Fatalf("A: %v, %v", r, runErr)
			}
			if n := long.most.Load(); n != 1 {
				t.Fatalf("task long ran %d times at once", n)
			}
		})
	}
}
