package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// slowQueue is a dead-letter queue whose Count takes as long as its
// caller lets it, as a count over a million entries can.
type slowQueue struct{ dlq.Operator }

func (slowQueue) Count(ctx context.Context) (int, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

type slowDLQ struct{ *sqlite.Store }

func (s slowDLQ) DLQ() dlq.Operator { return slowQueue{s.Store.DLQ()} }

// TestReadyWhateverTheDeadLetterQueueHolds: /readyz asks the store a read
// whose cost does not grow with anything. It counted the dead letters
// with a 2 s limit, so a large queue (a count past 2 s) made a healthy
// server not ready, and an orchestrator took it out or restarted it.
func TestReadyWhateverTheDeadLetterQueueHolds(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := httptest.NewRecorder()
	h := &health{checks: []check{storeCheck(slowDLQ{st})}, lastRound: func() time.Time { return time.Time{} }, now: time.Now}
	h.readyz(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/readyz = %d %q, want 200 while the store answers", rec.Code, rec.Body.String())
	}
}
