package dlq_test

import (
	"bytes"
	"context"
	"errors"
	stdlog "log"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/workflow/models"
)

// TestSeedSection4 runs the Dead Letter Queue snippets of the retry and
// error-handling design (seed 002, section 4) as written. The only changes:
// each List snippet is in its own block (the design redeclares entries with
// :=), the package log is a local logger writing to a buffer, sendAlert and
// sendCriticalAlert are fakes, and checks follow each snippet.
func TestSeedSection4(t *testing.T) {
	ctx := context.Background()
	var logBuf bytes.Buffer
	log := stdlog.New(&logBuf, "", 0)
	var alerted []*dlq.Entry
	var critical []int
	sendAlert := func(e *dlq.Entry) { alerted = append(alerted, e) }
	sendCriticalAlert := func(n int) { critical = append(critical, n) }
	taskInstance := &models.TaskInstance{ID: "ti-1", TaskID: "extract", DAGRunID: "run-1",
		DAGID: "etl_pipeline", Attempt: 5, State: models.TaskStateFailed, EndedAt: time.Now()}
	dag := &models.DAG{ID: "etl_pipeline", Name: "ETL"}
	taskError := errors.New("upstream API returned 503")

	// Add failed task to DLQ.
	queue := dlq.NewMemoryQueue()
	manager := dlq.NewManager(queue, 100) // Alert when 100 entries

	// Set up alerts (registered before adding so they observe it).
	manager.OnEntryAdded(func(entry *dlq.Entry) {
		log.Printf("Task added to DLQ: %s", entry.TaskID)
		sendAlert(entry)
	})

	manager.OnThresholdReached(func(count int) {
		log.Printf("DLQ threshold reached: %d entries", count)
		sendCriticalAlert(count)
	})

	err := manager.AddFailedTask(ctx, taskInstance, dag, taskError)
	if err != nil || len(alerted) != 1 || alerted[0].TaskID != "extract" || len(critical) != 0 {
		t.Fatalf("AddFailedTask: %v; alerts %d, critical %v", err, len(alerted), critical)
	}
	if !strings.Contains(logBuf.String(), "Task added to DLQ: extract") {
		t.Fatalf("log = %q", logBuf.String())
	}

	// List DLQ entries.
	{
		// List all entries
		entries, _ := queue.List(ctx, nil)
		if len(entries) != 1 {
			t.Fatalf("List(nil) = %d entries", len(entries))
		}
	}
	{
		// Filter by DAG
		entries, _ := queue.List(ctx, &dlq.Filters{
			DAGID: "etl_pipeline",
		})
		if len(entries) != 1 || entries[0].DAGID != "etl_pipeline" {
			t.Fatalf("DAG filter = %+v", entries)
		}
	}
	{
		// Filter by time range
		after := time.Now().Add(-24 * time.Hour)
		entries, _ := queue.List(ctx, &dlq.Filters{
			After: &after,
			Limit: 10,
		})
		if len(entries) != 1 {
			t.Fatalf("time filter = %d entries", len(entries))
		}
	}
	{
		// Filter non-replayed entries
		replayed := false
		entries, _ := queue.List(ctx, &dlq.Filters{
			Replayed: &replayed,
		})
		if len(entries) != 1 {
			t.Fatalf("non-replayed = %d entries", len(entries))
		}
	}

	// Replay failed task.
	entryID := alerted[0].ID
	{
		// Mark as replayed and trigger retry
		err := queue.Replay(ctx, entryID)
		if got, _ := queue.Get(ctx, entryID); err != nil || !got.Replayed {
			t.Fatalf("Replay: %v, replayed %v", err, got.Replayed)
		}
	}

	// Purge old entries.
	// Delete specific entry
	queue.Delete(ctx, entryID)

	// Purge all entries
	queue.Purge(ctx)

	if n, _ := queue.Count(ctx); n != 0 {
		t.Fatalf("Count after purge = %d", n)
	}
}

// TestSeedPipelineDLQ runs the DLQ steps (4 and the final AddFailedTask) of
// the design's complete error-handling pipeline, with a fake sendAlert.
func TestSeedPipelineDLQ(t *testing.T) {
	ctx := context.Background()
	var alerts []string
	sendAlert := func(msg string, count int) { alerts = append(alerts, msg) }
	taskInstance := &models.TaskInstance{ID: "ti", TaskID: "call_api", DAGID: "d", Attempt: 5}
	dag := &models.DAG{ID: "d"}

	// 4. Set up DLQ
	dlqQueue := dlq.NewMemoryQueue()
	dlqManager := dlq.NewManager(dlqQueue, 50)
	dlqManager.OnThresholdReached(func(count int) {
		sendAlert("DLQ threshold reached", count)
	})

	for range 50 {
		err := errors.New("api down")
		if err != nil {
			// Add to DLQ if all retries failed
			dlqManager.AddFailedTask(ctx, taskInstance, dag, err)
		}
	}
	if n, _ := dlqQueue.Count(ctx); n != 50 || len(alerts) != 1 {
		t.Fatalf("count %d, alerts %v; want 50 and one alert", n, alerts)
	}
}
