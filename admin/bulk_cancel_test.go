package admin_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// hangUpStore is a SQLite store whose dead-letter queue calls hangUp
// after the first page a bulk replay commits: the client going away
// mid-action.
type hangUpStore struct {
	*sqlite.Store
	hangUp func()
}

func (h *hangUpStore) DLQ() dlq.Operator {
	return &hangUpDLQ{Operator: h.Store.DLQ(), hangUp: h.hangUp}
}

type hangUpDLQ struct {
	dlq.Operator
	hangUp func()
}

func (h *hangUpDLQ) ReplayMatchingAs(ctx context.Context, f *dlq.Filters, dryRun bool, a dlq.Action) ([]*dlq.Entry, error) {
	es, err := h.Operator.ReplayMatchingAs(ctx, f, dryRun, a)
	h.hangUp()
	return es, err
}

// TestBulkActionCutShortIsAudited: a bulk replay whose client goes away
// (an operator's Ctrl-C, a proxy's read timeout) stops after the pages it
// committed, whose messages are delivered again. Those pages are in the
// audit log with their count; the record was written with the request's
// context, already cancelled, so nothing said they were replayed.
func TestBulkActionCutShortIsAudited(t *testing.T) {
	sq := openSQLite(t)
	fill(t, sq, 300, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	st := &hangUpStore{Store: sq, hangUp: func() { once.Do(cancel) }}
	logs := &strings.Builder{}
	srv, err := admin.New(admin.Config{
		Store: st, BulkPage: 100,
		Tokens: []admin.Token{{Name: "ops", Secret: operateToken, Role: admin.RoleOperate}},
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: logs}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"destination": "billing", "notes": "client goes away"}`
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/dlq/replay", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+operateToken)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)

	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "first 100 entries, recorded in the audit log") {
		t.Errorf("answer %d %s; want a 500 saying 100 entries were replayed and recorded", rec.Code, rec.Body)
	}
	log, err := sq.AuditLog(context.Background(), store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].Action != "replay" || log[0].Count != 100 || log[0].Actor != "ops" || log[0].Notes != "client goes away" {
		t.Fatalf("audit log %+v; want one replay of 100 by ops; server log:\n%s", log, logs)
	}
}
