package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// flakyStore makes calls of a workflow store and of its dead-letter queue
// fail for want of the database (store.ErrUnavailable), as a killed
// connection does. The calls are named by method, FinishAttempt also by
// outcome ("FinishAttempt:failed"), and dead-letter ones prefixed "dlq.".
// A call named in before fails that many times without being made; one
// named in after is made and then fails that many times, as when the
// connection goes after the commit, before its answer. failed receives
// each failure.
type flakyStore struct {
	wfstore.Store
	clk           *clock.Fake
	failed        chan failure
	mu            sync.Mutex
	before, after map[string]int
	failures      map[string]int // by call
}

// failure is a call's failure: when, and how many times the call had
// failed then, this one included.
type failure struct {
	at     time.Time
	streak int
}

func newFlakyStore(ws wfstore.Store, clk *clock.Fake) *flakyStore {
	return &flakyStore{Store: ws, clk: clk, failed: make(chan failure, 64),
		before: map[string]int{}, after: map[string]int{}, failures: map[string]int{}}
}

// trip returns the failure of call made now (made says whether it is
// made first), or nil when it does not fail.
func (f *flakyStore) trip(call string) (made bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range []struct {
		left map[string]int
		made bool
	}{{f.before, false}, {f.after, true}} {
		if m.left[call] > 0 {
			m.left[call]--
			f.failures[call]++
			select {
			case f.failed <- failure{at: f.clk.Now(), streak: f.failures[call]}:
			default: // nobody follows them (TestOutageLongerThanTheLeaseStopsTheRun)
			}
			return m.made, fmt.Errorf("%s: %w: connection reset by peer", call, store.ErrUnavailable)
		}
	}
	return false, nil
}

// left returns the failures not yet made.
func (f *flakyStore) left() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, m := range []map[string]int{f.before, f.after} {
		for k, n := range m {
			if n > 0 {
				out[k] += n
			}
		}
	}
	return out
}

// call makes fn unless call fails before it, and returns its failure.
func (f *flakyStore) call(call string, fn func() error) error {
	made, ferr := f.trip(call)
	if ferr != nil && !made {
		return ferr
	}
	if err := fn(); err != nil || ferr == nil {
		return err
	}
	return ferr
}

func (f *flakyStore) Load(ctx context.Context, runID string) (snap *wfstore.Snapshot, err error) {
	err = f.call("Load", func() (err error) { snap, err = f.Store.Load(ctx, runID); return err })
	return snap, err
}

// Reload fails as Load does, under the same name: the driver reads its
// run with either.
func (f *flakyStore) Reload(ctx context.Context, prev *wfstore.Snapshot) (snap *wfstore.Snapshot, err error) {
	err = f.call("Load", func() (err error) { snap, err = f.Store.Reload(ctx, prev); return err })
	return snap, err
}

func (f *flakyStore) AcquireRun(ctx context.Context, runID string, l wfstore.Lease) error {
	return f.call("AcquireRun", func() error { return f.Store.AcquireRun(ctx, runID, l) })
}

func (f *flakyStore) StartAttempt(ctx context.Context, runID, taskID string, attempt int, l wfstore.Lease) error {
	return f.call("StartAttempt", func() error { return f.Store.StartAttempt(ctx, runID, taskID, attempt, l) })
}

func (f *flakyStore) FinishAttempt(ctx context.Context, fin *wfstore.Finish) error {
	return f.call("FinishAttempt:"+string(fin.Outcome), func() error { return f.Store.FinishAttempt(ctx, fin) })
}

func (f *flakyStore) Mark(ctx context.Context, runID string, l wfstore.Lease, marks []wfstore.Mark) (n int, err error) {
	err = f.call("Mark", func() (err error) { n, err = f.Store.Mark(ctx, runID, l, marks); return err })
	return n, err
}

func (f *flakyStore) SetDeadLetter(ctx context.Context, runID, taskID, entryID string, l wfstore.Lease) error {
	return f.call("SetDeadLetter", func() error { return f.Store.SetDeadLetter(ctx, runID, taskID, entryID, l) })
}

func (f *flakyStore) EndRun(ctx context.Context, runID string, l wfstore.Lease, state models.RunState, reason string) (ended bool, err error) {
	err = f.call("EndRun", func() (err error) { ended, err = f.Store.EndRun(ctx, runID, l, state, reason); return err })
	return ended, err
}

func (f *flakyStore) DLQ() dlq.Operator { return &flakyQueue{Operator: f.Store.DLQ(), f: f} }

// flakyQueue is the dead-letter queue of a flakyStore.
type flakyQueue struct {
	dlq.Operator
	f *flakyStore
}

func (q *flakyQueue) Add(ctx context.Context, e *dlq.Entry) error {
	return q.f.call("dlq.Add", func() error { return q.Operator.Add(ctx, e) })
}

// pumpRetries moves the harness's clock, after each failure of f, to
// when the driver tries the call again, once it waits for that: a
// thirtieth of lease after the first failure of a call, doubling after
// each further one. It stops when done is closed.
func pumpRetries(h *harness, f *flakyStore, lease time.Duration, done <-chan struct{}) {
	go func() {
		for {
			select {
			case fl := <-f.failed:
				retry := fl.at.Add(lease / 30 << (fl.streak - 1))
				for {
					n := h.clock.Pending() // before looking: a timer made after it wakes the wait below
					if next, ok := h.clock.NextDeadline(); ok && next.Equal(retry) {
						h.clock.Set(retry)
						break
					}
					if !h.clock.WaitForTimers(n+1, done) {
						return
					}
				}
			case <-done:
				return
			}
		}
	}()
}

// The database is away for a moment at one of the driver's store calls
// during a run (reading the run, starting and recording attempts, marking
// tasks, dead-lettering a failure, ending the run): the call is tried
// again, on the engine's clock, while the lease holds, and the run ends as
// it would have, every task run once and the failure dead-lettered once.
// Only the lease renewal was tried again: any other call stopped the run
// (its attempts cancelled and recorded lost, the run released), and Run
// returned the call's error; a failed dead-letter add left the failed task
// without an entry until a later resume of the run.
//
// In "after/..." the call was made before the connection went, so that
// the driver does not know it was: the second try finds it recorded (an
// attempt started, an outcome recorded, tasks marked, the run ended), and
// the driver takes it as its own. "after/FinishAttempt:success" is a
// success committed whose answer was lost: the driver records the attempt
// lost, which the store refuses, and the success stands.
func TestBriefOutageAtEachStoreCallKeepsTheRun(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"before", "after"} {
		for _, call := range outageCalls {
			if call == "FinishAttempt:success" && when == "before" {
				continue // not tried again: recorded lost (TestLostConnectionWhileRecordingSuccessRunsTheTaskAgainPostgres)
			}
			if call == "Load" && when == "after" {
				continue // a read has no outcome to be unsure of
			}
			t.Run(when+"/"+call, func(t *testing.T) {
				t.Parallel()
				st, ws := openSQLite(t, ":memory:")
				f := newFlakyStore(ws, clock.NewFake(t0))
				if when == "before" {
					f.before[call] = 2
				} else {
					f.after[call] = 1
				}
				runThroughOutage(t, st, ws, f)
			})
		}
	}
}

// outageCalls are the store calls TestBriefOutageAtEachStoreCallKeepsTheRun
// makes fail.
var outageCalls = []string{"AcquireRun", "Load", "StartAttempt", "FinishAttempt:failed", "FinishAttempt:success", "Mark",
	"dlq.Add", "SetDeadLetter", "EndRun"}

// runThroughOutage runs a DAG whose task a fails for good (b, downstream,
// is then upstream_failed) beside c, which succeeds, on f, and checks that
// it ended so, each task run once, a dead-lettered once and every failure
// of f made.
func runThroughOutage(t *testing.T, st *sqlite.Store, ws wfstore.Store, f *flakyStore) {
	t.Helper()
	var dagFailures int
	h := newHarnessOn(t, st, f, workflow.Config{LeaseDuration: 30 * time.Second, Clock: f.clk})
	h.register("flaky-db", &eh.PropagationConfig{Policy: eh.PropagationPolicySkipDownstream,
		OnDAGFailure: func(context.Context, *models.DAGRun, error) error { dagFailures++; return nil }},
		h.task("a", fail(eh.Permanent(errBoom))),
		h.task("b", nil, "a"),
		h.task("c", nil))
	done, out := h.runAsync("flaky-db", workflow.RunOptions{ID: "r-flaky-db"})
	pumpRetries(h, f, 30*time.Second, done)
	r, err := out()
	if !errors.Is(err, workflow.ErrRunFailed) || r == nil {
		t.Fatalf("Run = %v, want the run failed as a's failure makes it\nlogs:\n%s", err, h.logs.String())
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed,
		"b": models.TaskStateUpstreamFailed, "c": models.TaskStateSuccess})
	for _, id := range []string{"a", "c"} {
		if n, hist := h.callsOf(id), r.Task(id).History; n != 1 || len(hist) != 1 {
			t.Errorf("task %s ran %d times, attempts %+v; want once", id, n, hist)
		}
	}
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
	if n, err := ws.DLQ().Count(h.ctx); err != nil || n != 1 {
		t.Errorf("dead letters: %d, %v; want 1", n, err)
	}
	if dagFailures != 1 {
		t.Errorf("OnDAGFailure called %d times, want once", dagFailures)
	}
	if left := f.left(); len(left) > 0 {
		t.Errorf("calls the run never made: %v", left)
	}
	if logs := h.logs.String(); strings.Contains(logs, "dead-lettering a failed task failed") {
		t.Errorf("dead-lettering failed:\n%s", logs)
	}
}

// A database away for longer than the lease stops the run once two thirds
// of the lease have gone, as a renewal that fails for as long does: the
// driver does not hold a run whose lease another instance may take.
func TestOutageLongerThanTheLeaseStopsTheRun(t *testing.T) {
	t.Parallel()
	st, ws := openSQLite(t, ":memory:")
	f := newFlakyStore(ws, clock.NewFake(t0))
	f.before["StartAttempt"] = 1 << 20
	const lease = 30 * time.Second
	h := newHarnessOn(t, st, f, workflow.Config{LeaseDuration: lease, Clock: f.clk})
	h.register("down", nil, h.task("a", nil))
	done, out := h.runAsync("down", workflow.RunOptions{ID: "r-down"})
	tries := pumpOutage(h, f, lease, t0.Add(2*lease/3), done)
	_, err := out()
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Run = %v, want the store's unavailability", err)
	}
	// Tries 1, 2, 4 and 8 s apart, and the last when two thirds of the
	// lease taken at t0 have gone.
	var got []time.Duration
	for _, at := range tries() {
		got = append(got, at.Sub(t0))
	}
	want := []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 20 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("StartAttempt tried at %v, want %v: 1 s apart doubling, until two thirds of the 30 s lease", got, want)
	}
	if n := h.callsOf("a"); n != 0 {
		t.Errorf("a ran %d times", n)
	}
}

// pumpOutage moves the harness's clock through an outage longer than the
// lease, from timer to timer (the driver's waits to try again, the lease's
// renewals), and returns when f's calls failed, once Run has returned (done). After each failure it
// waits until the driver waits to try again (two timers pending: that
// wait and the next renewal), and only then moves the clock, from
// deadline to deadline, to the try (a thirtieth of lease after the first
// failure, doubling, and at giveUp at the latest, as pumpRetries). Moved
// to the next pending timer at once, the clock went to the renewal at
// 10 s when the driver had not yet started its wait, then to 20 s: past
// the tries, and the driver gave up after fewer of them. It stops when
// done is closed.
func pumpOutage(h *harness, f *flakyStore, lease time.Duration, giveUp time.Time, done <-chan struct{}) (tries func() []time.Time) {
	var at []time.Time
	finished := make(chan struct{})
	go func() {
		defer func() { // the failures sent before Run returned, not yet seen
			for {
				select {
				case fl := <-f.failed:
					at = append(at, fl.at)
				default:
					close(finished)
					return
				}
			}
		}()
		for {
			var fl failure
			select {
			case fl = <-f.failed:
			case <-done:
				return
			}
			at = append(at, fl.at)
			retry := fl.at.Add(lease / 30 << (fl.streak - 1))
			if retry.After(giveUp) {
				retry = giveUp
			}
			if !fl.at.Before(retry) {
				continue // the driver gives up
			}
			if !h.clock.WaitForTimers(2, done) {
				return
			}
			for {
				next, ok := h.clock.NextDeadline()
				if !ok {
					break
				}
				h.clock.Set(next) // a renewal before the try, or the try
				if !next.Before(retry) {
					break
				}
			}
		}
	}()
	return func() []time.Time {
		<-finished
		return at
	}
}
