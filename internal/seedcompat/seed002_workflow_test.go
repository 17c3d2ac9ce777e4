package seedcompat

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfsqlite"
)

// The workflow snippets of the retry and error-handling design (seed 002,
// "Integration Examples"). executeTask and callExternalAPI stand for the
// reader's code; sendAlert for their alerting.
var (
	executeTask     = func(ctx context.Context, task *models.Task, ti *models.TaskInstance) error { return nil }
	callExternalAPI = func() error { return nil }
	sendAlert       = func(msg string, count int) { fmt.Printf("ALERT %s: %d\n", msg, count) }
)

// "Task Execution with Retry", as printed.

// In executor implementation
func executeTaskWithRetry(ctx context.Context, task *models.Task, ti *models.TaskInstance) error {
	retryConfig := retry.NewConfig(
		task.Retries,
		retry.DefaultExponentialBackoff(),
	)

	retryExecutor := retry.NewExecutor(retryConfig)
	return retryExecutor.Execute(ctx, func() error {
		return executeTask(ctx, task, ti)
	})
}

// newWorkflowEngine returns an engine on an in-memory SQLite store, its
// log discarded.
func newWorkflowEngine(cfg workflow.Config) (*workflow.Engine, error) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:", store.Config{})
	if err != nil {
		return nil, err
	}
	ws, err := wfsqlite.New(ctx, st)
	if err != nil {
		return nil, err
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	return workflow.NewEngine(ws, cfg)
}

// The design's executeTaskWithRetry works as the body of a workflow task:
// the engine hands it the task and the instance as the design's models.
func TestSeedTaskExecutionWithRetry(t *testing.T) {
	var got []string
	executeTask = func(ctx context.Context, task *models.Task, ti *models.TaskInstance) error {
		got = append(got, fmt.Sprintf("%s retries=%d instance=%s attempt=%d", task.ID, task.Retries, ti.ID, ti.Attempt))
		if task.ID == "bad" {
			return errorhandling.Permanent(errors.New("schema mismatch"))
		}
		return nil
	}
	defer func() { executeTask = func(context.Context, *models.Task, *models.TaskInstance) error { return nil } }()
	e, err := newWorkflowEngine(workflow.Config{})
	if err != nil {
		t.Fatal(err)
	}
	body := func(ctx context.Context, tc *workflow.TaskContext) error {
		return executeTaskWithRetry(ctx, tc.Task(), tc.TaskInstance())
	}
	d, err := workflow.NewDAG("seed", nil,
		workflow.Task{ID: "good", Retries: 3, Run: body},
		workflow.Task{ID: "bad", Upstream: []string{"good"}, Run: body})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(context.Background(), "seed", workflow.RunOptions{ID: "r"})
	want := []string{"good retries=3 instance=r/good/1 attempt=1", "bad retries=0 instance=r/bad/1 attempt=1"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("executeTask calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !errors.Is(err, workflow.ErrRunFailed) || r.Task("bad").State != models.TaskStateFailed ||
		!strings.Contains(r.Task("bad").Error, "retry: permanent error on attempt 1: schema mismatch") {
		t.Errorf("run: %v; bad = %+v", err, r.Task("bad"))
	}
}

// "Complete Error Handling Pipeline", run end to end. Steps 1 to 4 are as
// printed, except that the retry config's back-off runs on a fake clock
// (the example does not wait) and log writes to standard output. The DAG
// runs under the pipeline's propagation config, and the engine dead-letters
// through the pipeline's DLQ manager. Step 5, as printed, is the body of
// the fetch task; ctx, taskInstance and dag come from the engine.
func Example_completeErrorHandlingPipeline() {
	ctx := context.Background()
	log := stdlog.New(os.Stdout, "", 0)
	fake := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	stop := make(chan struct{})
	defer close(stop)
	go func() { // move the fake clock whenever a back-off waits
		for {
			if _, ok := fake.AdvanceToNext(stop); !ok {
				return
			}
		}
	}()
	calls := 0
	callExternalAPI = func() error {
		calls++
		if calls < 3 {
			return errorhandling.WithCode(errors.New("upstream timed out"), "timeout")
		}
		return nil
	}
	defer func() { callExternalAPI = func() error { return nil } }()

	// 1. Configure retry strategy
	retryConfig := retry.NewConfig(
		5,
		retry.NewExponentialBackoff(1*time.Second, 5*time.Minute, true),
	)
	retryConfig.WithClock(fake)

	// 2. Configure error propagation
	propagationConfig := &errorhandling.PropagationConfig{
		Policy:        errorhandling.PropagationPolicySkipDownstream,
		CriticalTasks: []string{"validate", "commit"},
		OnTaskFailure: func(ctx context.Context, task *models.Task, ti *models.TaskInstance, err error) error {
			log.Printf("Task %s failed: %v", task.ID, err)
			return nil
		},
	}

	// 3. Set up circuit breaker for external API
	apiCircuitBreaker := circuitbreaker.New(&circuitbreaker.Config{
		MaxFailures:         3,
		Timeout:             30 * time.Second,
		HalfOpenMaxRequests: 1,
	})

	// 4. Set up DLQ
	dlqQueue := dlq.NewMemoryQueue()
	dlqManager := dlq.NewManager(dlqQueue, 50)
	dlqManager.OnThresholdReached(func(count int) {
		sendAlert("DLQ threshold reached", count)
	})
	dlqManager.OnEntryAdded(func(entry *dlq.Entry) { log.Printf("Task added to DLQ: %s", entry.TaskID) })

	fetch := func(ctx context.Context, tc *workflow.TaskContext) error {
		taskInstance, dag := tc.TaskInstance(), tc.DAG()

		// 5. Execute task with full error handling
		retryExecutor := retry.NewExecutor(retryConfig)
		err := retryExecutor.Execute(ctx, func() error {
			// Use circuit breaker for external calls
			return apiCircuitBreaker.Execute(ctx, func() error {
				return callExternalAPI()
			})
		})

		if err != nil {
			// Add to DLQ if all retries failed
			dlqManager.AddFailedTask(ctx, taskInstance, dag, err)
		}
		log.Printf("fetch: external API answered after %d calls", calls)
		return err
	}
	validate := func(context.Context, *workflow.TaskContext) error {
		return errorhandling.Permanent(errors.New("ledger totals do not match"))
	}

	engine, err := newWorkflowEngine(workflow.Config{DLQ: dlqQueue, DLQManager: dlqManager})
	if err != nil {
		log.Fatal(err)
	}
	dag, err := workflow.NewDAG("etl_pipeline", propagationConfig,
		workflow.Task{ID: "fetch", Run: fetch},
		workflow.Task{ID: "validate", Upstream: []string{"fetch"}, Run: validate},
		workflow.Task{ID: "commit", Upstream: []string{"validate"}, Run: func(context.Context, *workflow.TaskContext) error { return nil }},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := engine.Register(dag); err != nil {
		log.Fatal(err)
	}
	run, _ := engine.Run(ctx, "etl_pipeline", workflow.RunOptions{ID: "nightly-42"})
	fmt.Print(strings.ReplaceAll(run.Explain(), run.Task("validate").DeadLetterID, "<id>"))
	// Output:
	// fetch: external API answered after 3 calls
	// Task validate failed: ledger totals do not match
	// Task added to DLQ: validate
	// run nightly-42 of DAG etl_pipeline: failed
	// why: task validate failed under skip_downstream; task commit did not run; critical tasks validate and commit did not succeed
	//   fetch     success          succeeded on attempt 1
	//   validate  failed           failed: ledger totals do not match (attempt 1; permanent error, not retried); dead letter <id>
	//   commit    upstream_failed  skipped: upstream task validate failed under skip_downstream
}
