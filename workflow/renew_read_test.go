package workflow_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// readCounter counts the bytes of task results and run input that the
// reads of a workflow store (Load, Reload) hand back freshly read: a
// result Reload hands back as the very slice the reader held is not
// counted. Each read sends on reads.
type readCounter struct {
	wfstore.Store
	mu    sync.Mutex
	bytes int
	reads chan struct{}
}

func (c *readCounter) Load(ctx context.Context, runID string) (*wfstore.Snapshot, error) {
	snap, err := c.Store.Load(ctx, runID)
	c.count(nil, snap)
	return snap, err
}

func (c *readCounter) Reload(ctx context.Context, prev *wfstore.Snapshot) (*wfstore.Snapshot, error) {
	snap, err := c.Store.Reload(ctx, prev)
	c.count(prev, snap)
	return snap, err
}

func (c *readCounter) count(prev, snap *wfstore.Snapshot) {
	if snap == nil {
		return
	}
	held := map[*byte]bool{}
	if prev != nil {
		for _, t := range prev.Tasks {
			if len(t.Result) > 0 {
				held[&t.Result[0]] = true
			}
		}
		if len(prev.Run.Input) > 0 {
			held[&prev.Run.Input[0]] = true
		}
	}
	n := 0
	for _, b := range append([][]byte{snap.Run.Input}, func() (rs [][]byte) {
		for _, t := range snap.Tasks {
			rs = append(rs, t.Result)
		}
		return rs
	}()...) {
		if len(b) > 0 && !held[&b[0]] {
			n += len(b)
		}
	}
	c.mu.Lock()
	c.bytes += n
	c.mu.Unlock()
	select {
	case c.reads <- struct{}{}:
	default:
	}
}

func (c *readCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.bytes
	c.bytes = 0
	return n
}

// While a run waits on a long task, the driver reads the run again at
// each renewal of its lease (every third of a lease), to see changes made
// behind it; it does not read again the results it holds, nor the run's
// input. It read them all: 20 results of 256 KB were 5 MB read every
// 10 s, and 1,000 results of 1 MB a gigabyte.
func TestRenewalDoesNotReadTheResultsAgain(t *testing.T) {
	t.Parallel()
	base := newHarness(t, workflow.Config{})
	rc := &readCounter{Store: base.store, reads: make(chan struct{}, 1)}
	h := newHarnessOn(t, base.sqlite, rc, workflow.Config{LeaseDuration: 30 * time.Second, Clock: base.clock})
	result := bytes.Repeat([]byte("r"), 256<<10)
	var tasks []workflow.Task
	var ups []string
	for i := range 20 {
		id := "part-" + string(rune('a'+i))
		ups = append(ups, id)
		tasks = append(tasks, h.task(id, func(_ context.Context, tc *workflow.TaskContext) error {
			return tc.SetResult(string(result))
		}))
	}
	started, release := make(chan struct{}), make(chan struct{})
	tasks = append(tasks, h.task("long", func(ctx context.Context, tc *workflow.TaskContext) error {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, ups...))
	h.register("fan", nil, tasks...)
	done, out := h.runAsync("fan", workflow.RunOptions{ID: "r-fan", Input: string(result)})
	t.Cleanup(func() {
		closeOnce(release)
		<-done
	})
	<-started
	select {
	case <-rc.reads: // a read before the renewals
	default:
	}
	rc.take()
	for range 3 {
		// The keeper's renewal timer and the driver's: advance when both
		// wait, then wait for the read that follows the renewal.
		base.clock.WaitForTimers(1, done)
		base.clock.Advance(10 * time.Second)
		select {
		case <-rc.reads:
		case <-done:
			t.Fatal("the run ended while its long task waited")
		case <-time.After(30 * time.Second): // only a hang gets here
			t.Fatal("the driver did not read the run after a renewal")
		}
	}
	if n := rc.take(); n > 0 {
		t.Errorf("three renewals read %d bytes of results and input again, want none: nothing changed", n)
	}
	closeOnce(release)
	if r, err := out(); err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("run: %v, %v", r, err)
	}
}
