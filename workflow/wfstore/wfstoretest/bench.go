package wfstoretest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// BenchRenewalRead compares, on s, what a driver's read at a lease
// renewal costs for a run of 200 tasks with results of 256 KB (50 MB):
// reading the run whole (Load, as every renewal did) and reading it again
// from what the driver holds (Reload). Compare B/op.
func BenchRenewalRead(b *testing.B, s wfstore.Store) {
	ctx := context.Background()
	l := wfstore.Lease{Owner: "one", Now: t0, TTL: time.Hour}
	var ids []string
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("t%03d", i))
	}
	if err := s.CreateRun(ctx, &wfstore.Run{ID: "r", DAGID: "d", DAGHash: "h"}, ids, l); err != nil {
		b.Fatal(err)
	}
	result := bytes.Repeat([]byte("x"), 256<<10)
	for _, id := range ids {
		if err := s.StartAttempt(ctx, "r", id, 1, l); err != nil {
			b.Fatal(err)
		}
		if err := s.FinishAttempt(ctx, &wfstore.Finish{RunID: "r", TaskID: id, Attempt: 1, Owner: "one", Now: t0,
			Outcome: wfstore.OutcomeSuccess, State: models.TaskStateSuccess, Result: result}); err != nil {
			b.Fatal(err)
		}
	}
	prev, err := s.Load(ctx, "r")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Load(ctx, "r"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Reload", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Reload(ctx, prev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
