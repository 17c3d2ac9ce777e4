package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow/models"
)

// A manager alerting when the queue holds two entries or more. The
// threshold fires once per crossing, not on every later Add.
func ExampleNewManager() {
	ctx := context.Background()
	queue := dlq.NewMemoryQueue()
	// Production code keeps the default logger (slog.Default()), which
	// records each dead letter at ERROR.
	manager := dlq.NewManager(queue, 2, dlq.WithLogger(slog.New(slog.DiscardHandler)))
	manager.OnEntryAdded(func(e *dlq.Entry) {
		fmt.Printf("dead-lettered %s/%s after %d attempts: %s\n", e.DAGID, e.TaskID, e.Attempts, e.FailureReason)
	})
	manager.OnThresholdReached(func(count int) {
		fmt.Printf("ALERT: %d entries in the dead-letter queue\n", count)
	})

	dag := &models.DAG{ID: "etl", Name: "Nightly ETL"}
	failures := []struct {
		task string
		err  error
	}{
		{"extract", fmt.Errorf("fetch: %w", context.DeadlineExceeded)},
		{"transform", errors.New("column total missing")},
		{"load", errorhandling.WithReason(errors.New("warehouse offline"), errorhandling.ReasonDependencyFailure)},
	}
	for i, f := range failures {
		ti := &models.TaskInstance{ID: fmt.Sprint("ti-", i), TaskID: f.task, DAGRunID: "run-1", DAGID: "etl", Attempt: 3}
		if err := manager.AddFailedTask(ctx, ti, dag, f.err); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// dead-lettered etl/extract after 3 attempts: TimeoutExceeded
	// dead-lettered etl/transform after 3 attempts: HandlerException
	// ALERT: 2 entries in the dead-letter queue
	// dead-lettered etl/load after 3 attempts: DependencyFailure
}

// Listing with filters: set fields are AND-ed, entries come in failure-time
// order, and Limit with Cursor pages through them.
func ExampleMemoryQueue_List() {
	ctx := context.Background()
	queue := dlq.NewMemoryQueue()
	start := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	for i, task := range []string{"extract", "transform", "load", "extract"} {
		dag := "etl"
		if i == 3 {
			dag = "billing"
		}
		_ = queue.Add(ctx, &dlq.Entry{
			ID: fmt.Sprint("e", i), DAGID: dag, TaskID: task,
			FailureTime: start.Add(time.Duration(i) * time.Hour),
		})
	}
	_ = queue.Replay(ctx, "e1")

	notReplayed := false
	entries, _ := queue.List(ctx, &dlq.Filters{DAGID: "etl", Replayed: &notReplayed})
	for _, e := range entries {
		fmt.Println("etl, not replayed:", e.ID, e.TaskID)
	}

	after := start.Add(time.Hour)
	filters := &dlq.Filters{After: &after, Limit: 2}
	for page := 1; ; page++ {
		entries, _ := queue.List(ctx, filters)
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			fmt.Printf("page %d: %s %s at %s\n", page, e.ID, e.DAGID, e.FailureTime.Format("15:04"))
		}
		filters.Cursor = entries[len(entries)-1].ID
	}
	// Output:
	// etl, not replayed: e0 extract
	// etl, not replayed: e2 load
	// page 1: e1 etl at 10:00
	// page 1: e2 etl at 11:00
	// page 2: e3 billing at 12:00
}

// A dry run shows what a bulk replay would send back without sending or
// marking anything; the real run then replays through the ReplayFunc.
func ExampleMemoryQueue_ReplayMatching() {
	ctx := context.Background()
	queue := dlq.NewMemoryQueue(dlq.WithReplayFunc(func(_ context.Context, e *dlq.Entry) error {
		fmt.Println("re-enqueued", e.ID)
		return nil
	}))
	for _, id := range []string{"a", "b", "c"} {
		_ = queue.Add(ctx, &dlq.Entry{ID: id, Destination: "billing"})
	}
	_ = queue.Resolve(ctx, "b", "Fixed by hand")

	filters := &dlq.Filters{Destination: "billing"}
	wouldReplay, _ := queue.ReplayMatching(ctx, filters, true)
	for _, e := range wouldReplay {
		fmt.Println("would replay", e.ID, "replayed:", e.Replayed)
	}

	replayed, _ := queue.ReplayMatching(ctx, filters, false)
	fmt.Println("replayed", len(replayed), "entries")
	// Output:
	// would replay a replayed: false
	// would replay c replayed: false
	// re-enqueued a
	// re-enqueued c
	// replayed 2 entries
}
