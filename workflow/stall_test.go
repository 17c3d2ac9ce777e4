package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// An instance that stalls in OnTaskFailure past its lease (A's clock
// stands still: it renews nothing) while another takes the run over,
// dead-letters the failure and ends the run: once A goes on, it neither
// adds a second entry for the same failure nor replaces the task's dead
// letter, which B reported and which stays replayable. A added the entry
// and overwrote the task's dead letter (SetDeadLetter was not fenced).
func TestStalledInstanceDoesNotDeadLetterAgain(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			spec := "sqlite:" + filepath.Join(t.TempDir(), "wf.db")
			if kind == "postgres" {
				spec = "postgres:" + testenv.NewSchema(t, "wf_stall_")
			}
			wsA, _ := openCrashStore(t, spec)
			wsB, _ := openCrashStore(t, spec)
			a, err := workflow.NewEngine(wsA, workflow.Config{InstanceID: "A", Clock: clock.NewFake(t0), Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			clkB := clock.NewFake(t0)
			b, err := workflow.NewEngine(wsB, workflow.Config{InstanceID: "B", Clock: clkB, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			task := workflow.Task{ID: "t", Run: fail(eh.Permanent(errors.New("t broke")))}
			dA, err := workflow.NewDAG("d", &eh.PropagationConfig{
				OnTaskFailure: func(context.Context, *models.Task, *models.TaskInstance, error) error {
					close(entered)
					<-release
					return nil
				}}, task)
			if err != nil {
				t.Fatal(err)
			}
			dB, err := workflow.NewDAG("d", &eh.PropagationConfig{}, task)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Register(dA); err != nil {
				t.Fatal(err)
			}
			if err := b.Register(dB); err != nil {
				t.Fatal(err)
			}
			aDone := make(chan error, 1)
			go func() {
				_, err := a.Run(context.Background(), "d", workflow.RunOptions{ID: "r"})
				aDone <- err
			}()
			<-entered
			clkB.Advance(time.Hour) // past A's lease, as B sees it
			rB, errB := b.Resume(context.Background(), "r")
			close(release)
			errA := <-aDone
			if rB == nil {
				t.Fatalf("B could not take the run over: %v", errB)
			}
			if errA == nil {
				t.Error("A's Run returned no error after losing the run")
			}
			reported := rB.Task("t").DeadLetterID
			entries, err := wsB.DLQ().List(context.Background(), &dlq.Filters{DAGID: "d"})
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].ID != reported {
				t.Errorf("one failure has %d entries (%v); want the one B reported, %s", len(entries), entries, reported)
			}
			final, err := b.Get(context.Background(), "r")
			if err != nil {
				t.Fatal(err)
			}
			if got := final.Task("t").DeadLetterID; got != reported {
				t.Errorf("the task's dead letter is %s after the run ended; B reported %s", got, reported)
			}
			// The task fails again when replayed (it always does): the
			// replay runs, and is not refused as not replayable.
			if _, err := b.ReplayTask(context.Background(), reported); !errors.Is(err, workflow.ErrRunFailed) {
				t.Errorf("replaying the entry B reported: %v, want the run to fail again", err)
			}
		})
	}
}

// stallingQueue is a dead-letter queue whose first Add stalls: it closes
// entered and waits for release, before storing the entry (stored false)
// or after (stored true).
type stallingQueue struct {
	dlq.Operator
	stored           bool
	entered, release chan struct{}
	once             sync.Once
}

func (q *stallingQueue) Add(ctx context.Context, e *dlq.Entry) error {
	stall := func() {
		close(q.entered)
		<-q.release
	}
	if !q.stored {
		q.once.Do(stall)
	}
	err := q.Operator.Add(ctx, e)
	if q.stored {
		q.once.Do(stall)
	}
	return err
}

// An instance that stalls inside AddFailedTask past its lease (A's clock
// stands still: it renews nothing), before or after the entry is stored,
// while another takes the run over, dead-letters the failure and ends the
// run: the failure has one entry, the one B reported. Stalled before the
// entry was stored, A stored a second one once it went on (the lease was
// checked before AddFailedTask, not in it).
func TestStallInsideAddFailedTaskDeadLettersOnce(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		for _, stored := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stored=%v", kind, stored), func(t *testing.T) {
				t.Parallel()
				spec := "sqlite:" + filepath.Join(t.TempDir(), "wf.db")
				if kind == "postgres" {
					spec = "postgres:" + testenv.NewSchema(t, "wf_stall_add_")
				}
				wsA, _ := openCrashStore(t, spec)
				wsB, _ := openCrashStore(t, spec)
				q := &stallingQueue{Operator: wsA.DLQ(), stored: stored,
					entered: make(chan struct{}), release: make(chan struct{})}
				a, err := workflow.NewEngine(wsA, workflow.Config{InstanceID: "A", Clock: clock.NewFake(t0), Logger: quiet,
					DLQManager: dlq.NewManager(q, 0, dlq.WithLogger(quiet))})
				if err != nil {
					t.Fatal(err)
				}
				clkB := clock.NewFake(t0)
				b, err := workflow.NewEngine(wsB, workflow.Config{InstanceID: "B", Clock: clkB, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range []*workflow.Engine{a, b} {
					d, err := workflow.NewDAG("d", nil, workflow.Task{ID: "t", Run: fail(eh.Permanent(errors.New("t broke")))})
					if err != nil {
						t.Fatal(err)
					}
					if err := e.Register(d); err != nil {
						t.Fatal(err)
					}
				}
				aDone := make(chan struct{})
				go func() {
					defer close(aDone)
					_, _ = a.Run(context.Background(), "d", workflow.RunOptions{ID: "r"})
				}()
				t.Cleanup(func() { // before the stores close, also when the test fails
					closeOnce(q.release)
					<-aDone
				})
				<-q.entered
				clkB.Advance(time.Hour) // past A's lease, as B sees it
				rB, errB := b.Resume(context.Background(), "r")
				closeOnce(q.release)
				<-aDone
				if rB == nil {
					t.Fatalf("B could not take the run over: %v", errB)
				}
				reported := rB.Task("t").DeadLetterID
				entries, err := wsB.DLQ().List(context.Background(), &dlq.Filters{DAGID: "d"})
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 1 || entries[0].ID != reported {
					ids := make([]string, len(entries))
					for i, e := range entries {
						ids[i] = e.ID
					}
					t.Fatalf("one failure has %d entries %v; want the one B reported, %q", len(entries), ids, reported)
				}
				final, err := b.Get(context.Background(), "r")
				if err != nil {
					t.Fatal(err)
				}
				if got := final.Task("t").DeadLetterID; got != reported {
					t.Errorf("the task's dead letter is %s after the run ended; B reported %s", got, reported)
				}
				if _, err := b.ReplayTask(context.Background(), reported); !errors.Is(err, workflow.ErrRunFailed) {
					t.Errorf("replaying the entry B reported: %v, want the run to fail again", err)
				}
			})
		}
	}
}
