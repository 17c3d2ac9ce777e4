package admin_test

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// payloadCounting is a store whose dead-letter queue counts the payload
// bytes its listings return.
type payloadCounting struct {
	adminStore
	n *atomic.Int64
}

type adminStore interface {
	store.Store
	store.Admin
}

func (s payloadCounting) DLQ() dlq.Operator { return countingQueue{s.adminStore.DLQ(), s.n} }

type countingQueue struct {
	dlq.Operator
	n *atomic.Int64
}

func (q countingQueue) count(es []*dlq.Entry, err error) ([]*dlq.Entry, error) {
	for _, e := range es {
		q.n.Add(int64(len(e.Payload)))
	}
	return es, err
}

func (q countingQueue) List(ctx context.Context, f *dlq.Filters) ([]*dlq.Entry, error) {
	return q.count(q.Operator.List(ctx, f))
}

func (q countingQueue) ReplayMatchingAs(ctx context.Context, f *dlq.Filters, dryRun bool, a dlq.Action) ([]*dlq.Entry, error) {
	return q.count(q.Operator.ReplayMatchingAs(ctx, f, dryRun, a))
}

// TestBulkActionsLeaveThePayloadsInTheStore: a dry run, a bulk resolve and
// a bulk delete read every matching entry's payload from the store, a
// page of 500 at a time (up to 500 MB held at once with payloads of
// 1 MiB), and a dry run sent its sample of 10 with their payloads: for 12
// entries of 1 MiB, a delete dry run read 12 MiB and answered 14 MB, a
// resolve read 12 MiB more. None of them uses a payload (the sample is
// shown as a table by the dashboard and the CLI); they now read the
// entries without payloads and the sample says payload_omitted. A replay
// still reads them: it writes a message whose outbox row is gone back
// from its entry.
func TestBulkActionsLeaveThePayloadsInTheStore(t *testing.T) {
	stores(t, func(t *testing.T, st store.Store) {
		var n atomic.Int64
		a := newAPI(t, payloadCounting{st.(adminStore), &n})
		big := bytes.Repeat([]byte{0xfe}, outbox.DefaultMaxPayloadBytes)
		for i := range 12 {
			e := &dlq.Entry{MessageID: uuid.NewString(), Destination: "billing", Stream: "s", Type: "t", Payload: big,
				Reason: errorhandling.ReasonValidationFailure, ErrorMessage: "too big", FailureTime: time.Now().Add(-time.Minute + time.Duration(i)*time.Millisecond)}
			if err := st.DLQ().Add(a.ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct{ path, body string }{
			{"/v1/dlq/delete", `{"destination":"billing","dry_run":true}`},
			{"/v1/dlq/replay", `{"destination":"billing","dry_run":true}`},
			{"/v1/dlq/resolve", `{"destination":"billing","dry_run":true}`},
			{"/v1/dlq/resolve", `{"destination":"billing"}`},
			{"/v1/dlq/delete", `{"destination":"billing"}`},
		} {
			n.Store(0)
			resp, body, _ := a.send(http.MethodPost, c.path, c.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("POST %s %s: %d %.300s", c.path, c.body, resp.StatusCode, body)
			}
			if read := n.Load(); read > 0 || len(body) > 64<<10 {
				t.Errorf("POST %s %s: read %d payload bytes from the store, answered %d bytes", c.path, c.body, read, len(body))
			}
		}
	})
}
