package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"strings"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfsqlite"
)

// newEngine returns an engine on a fresh in-memory SQLite store, quiet.
func newEngine() *workflow.Engine {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:", store.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ws, err := wfsqlite.New(ctx, st)
	if err != nil {
		log.Fatal(err)
	}
	e, err := workflow.NewEngine(ws, workflow.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	return e
}

// ok is a task function that succeeds.
func ok(context.Context, *workflow.TaskContext) error { return nil }

// A diamond whose validation fails under skip_downstream: what depends on
// it does not run, the independent branch does, and the run says why.
func Example() {
	e := newEngine()
	dag, err := workflow.NewDAG("etl", &errorhandling.PropagationConfig{
		Policy: errorhandling.PropagationPolicySkipDownstream,
	},
		workflow.Task{ID: "extract", Run: ok},
		workflow.Task{ID: "clean", Upstream: []string{"extract"}, Run: ok},
		workflow.Task{ID: "validate", Upstream: []string{"extract"}, Run: func(context.Context, *workflow.TaskContext) error {
			return errorhandling.Permanent(errors.New("row 7: amount is negative"))
		}},
		workflow.Task{ID: "load", Upstream: []string{"clean", "validate"}, Run: ok},
		workflow.Task{ID: "report", Upstream: []string{"load"}, Run: ok},
		workflow.Task{ID: "audit", Run: ok},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Register(dag); err != nil {
		log.Fatal(err)
	}
	run, err := e.Run(context.Background(), "etl", workflow.RunOptions{ID: "run-1"})
	fmt.Println(errors.Is(err, workflow.ErrRunFailed))
	// The dead letter's ID is random; hide it.
	fmt.Print(strings.ReplaceAll(run.Explain(), run.Task("validate").DeadLetterID, "<id>"))
	// Output:
	// true
	// run run-1 of DAG etl: failed
	// why: task validate failed under skip_downstream; tasks load and report did not run; partial success is not allowed
	//   extract   success          succeeded on attempt 1
	//   clean     success          succeeded on attempt 1
	//   validate  failed           failed: row 7: amount is negative (attempt 1; permanent error, not retried); dead letter <id>
	//   load      upstream_failed  skipped: upstream task validate failed under skip_downstream
	//   report    upstream_failed  skipped: upstream task load did not run because validate failed, under skip_downstream
	//   audit     success          succeeded on attempt 1
}

// Replaying a failed task's dead letter, once the cause is fixed, runs it
// again and then the tasks it held back: the repaired run succeeds.
func ExampleEngine_ReplayTask() {
	e := newEngine()
	fixed := false
	dag, err := workflow.NewDAG("billing", nil,
		workflow.Task{ID: "charge", Run: func(context.Context, *workflow.TaskContext) error {
			if !fixed {
				return errors.New("card processor: unknown merchant")
			}
			return nil
		}},
		workflow.Task{ID: "receipt", Upstream: []string{"charge"}, Run: ok},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Register(dag); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	run, _ := e.Run(ctx, "billing", workflow.RunOptions{ID: "run-7"})
	fmt.Println(run.State, run.Task("receipt").State)

	fixed = true // the operator registers the merchant
	run, err = e.ReplayTask(ctx, run.Task("charge").DeadLetterID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(run.Explain())
	// Output:
	// failed upstream_failed
	// run run-7 of DAG billing: success
	// why: all 2 tasks succeeded
	//   charge   success  succeeded on attempt 2, replayed from the dead-letter queue
	//                     attempts: 1 failed (card processor: unknown merchant); 2 success
	//   receipt  success  succeeded on attempt 1
}

// With allow_partial and partial success allowed, a run whose critical
// tasks succeed ends partial_success even when another task fails; Run
// then returns no error.
func ExampleEngine_Run_partialSuccess() {
	e := newEngine()
	dag, err := workflow.NewDAG("nightly", &errorhandling.PropagationConfig{
		Policy:              errorhandling.PropagationPolicyAllowPartial,
		AllowPartialSuccess: true,
		CriticalTasks:       []string{"commit"},
	},
		workflow.Task{ID: "commit", Run: ok},
		workflow.Task{ID: "thumbnails", Run: func(context.Context, *workflow.TaskContext) error {
			return errorhandling.Permanent(errors.New("image service: 410 Gone"))
		}},
		workflow.Task{ID: "notify", Upstream: []string{"thumbnails"}, Run: ok},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Register(dag); err != nil {
		log.Fatal(err)
	}
	run, err := e.Run(context.Background(), "nightly", workflow.RunOptions{})
	fmt.Println(run.State, err)
	fmt.Println(run.Reason)
	// Output:
	// partial_success <nil>
	// partial success: task thumbnails failed under allow_partial; task notify did not run; every critical task (commit) succeeded and partial success is allowed
}

// Tasks hand results downstream, and write outbox messages that are
// committed with their success.
func ExampleTaskContext() {
	e := newEngine()
	dag, err := workflow.NewDAG("orders", nil,
		workflow.Task{ID: "price", Run: func(ctx context.Context, tc *workflow.TaskContext) error {
			var order struct{ Items int }
			if err := tc.Input(&order); err != nil {
				return err
			}
			return tc.SetResult(order.Items * 250)
		}},
		workflow.Task{ID: "invoice", Upstream: []string{"price"}, Run: func(ctx context.Context, tc *workflow.TaskContext) error {
			var cents int
			if err := tc.Result("price", &cents); err != nil {
				return err
			}
			return tc.Enqueue(&outbox.Message{Destination: "billing", Type: "invoice.created",
				Payload: fmt.Appendf(nil, `{"cents":%d}`, cents)})
		}},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Register(dag); err != nil {
		log.Fatal(err)
	}
	run, err := e.Run(context.Background(), "orders", workflow.RunOptions{Input: map[string]int{"Items": 3}})
	fmt.Println(run.State, err, string(run.Task("price").Result))
	// Output:
	// success <nil> 750
}

// A definition with a cycle is rejected, naming the cycle.
func ExampleNewDAG_cycle() {
	_, err := workflow.NewDAG("loop", nil,
		workflow.Task{ID: "a", Upstream: []string{"c"}, Run: ok},
		workflow.Task{ID: "b", Upstream: []string{"a"}, Run: ok},
		workflow.Task{ID: "c", Upstream: []string{"b"}, Run: ok},
	)
	fmt.Println(err)
	fmt.Println(errors.Is(err, workflow.ErrCycle))
	// Output:
	// workflow: DAG "loop": dependency cycle: a -> c -> b -> a
	// true
}
