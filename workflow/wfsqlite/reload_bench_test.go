package wfsqlite_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// BenchmarkRenewalRead compares what a driver's read at a lease renewal
// costs, for a run of 200 tasks with results of 256 KB (50 MB): reading
// the run whole (Load, as every renewal did) and reading it again from
// what the driver holds (Reload). Compare B/op.
func BenchmarkRenewalRead(b *testing.B) {
	ctx := context.Background()
	_, ws := open(b, ":memory:", "")
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	l := wfstore.Lease{Owner: "one", Now: now, TTL: time.Hour}
	var ids []string
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("t%03d", i))
	}
	if err := ws.CreateRun(ctx, &wfstore.Run{ID: "r", DAGID: "d", DAGHash: "h"}, ids, l); err != nil {
		b.Fatal(err)
	}
	result := bytes.Repeat([]byte("x"), 256<<10)
	for _, id := range ids {
		if err := ws.StartAttempt(ctx, "r", id, 1, l); err != nil {
			b.Fatal(err)
		}
		if err := ws.FinishAttempt(ctx, &wfstore.Finish{RunID: "r", TaskID: id, Attempt: 1, Owner: "one", Now: now,
			Outcome: wfstore.OutcomeSuccess, State: models.TaskStateSuccess, Result: result}); err != nil {
			b.Fatal(err)
		}
	}
	prev, err := ws.Load(ctx, "r")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ws.Load(ctx, "r"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Reload", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ws.Reload(ctx, prev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
