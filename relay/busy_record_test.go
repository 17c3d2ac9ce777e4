package relay

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// lockFreedAfterBusy is the SQLite store, with a hook run when a call
// recording outcomes fails because another connection held the write
// lock past the store's lock wait.
type lockFreedAfterBusy struct {
	*sqlite.Store
	onBusy func()
}

func (s *lockFreedAfterBusy) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	res, err := s.Store.ProcessBatch(ctx, b)
	if err != nil && len(b.Completions) > 0 && errors.Is(err, sqlite.ErrBusy) {
		s.onBusy()
	}
	return res, err
}

// TestOutcomeOutlastedByAnotherWriterIsKept: another process holds the
// SQLite database's write lock (a second connection in BEGIN IMMEDIATE:
// an application's long transaction, a CLI writing with --db, an
// operator's sqlite3 shell) a little longer than the store's lock wait,
// while a delivery succeeds. The call recording the outcome fails with
// ErrBusy, and the lock is free by the time the relay asks whether the
// store is reachable. Nothing refused the outcome: it must be kept and
// recorded, the message delivered once. Before, the relay took the busy
// error for a refusal of the one outcome, dropped it ("the store refused
// to record an outcome"), and delivered the message again when its lease
// lapsed.
func TestOutcomeOutlastedByAnotherWriterIsKept(t *testing.T) {
	ctx := safetyNet(t)
	clk := clock.NewFake(epoch)
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := sqlite.Open(ctx, path, store.Config{
		DefaultPolicy: store.Policy{Strategy: retry.NewFixedDelay(time.Minute, false), MaxAttempts: 3, Ordering: outbox.OrderingStrict},
		Clock:         clk,
	}, sqlite.WithLockWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := &env{t: t, ctx: ctx, clk: clk, s: s, path: path, logs: &logSink{}}
	m := msg("hooks", "s", 1)
	e.enqueue(m)

	// The other process: a connection of its own to the same file.
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	var (
		mu             sync.Mutex
		holding, freed bool
		lockErr        error
	)
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		if holding && !freed {
			freed = true
			_, lockErr = conn.ExecContext(context.Background(), "ROLLBACK")
		}
	}
	rec := &recorder{fn: func(ctx context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			// Delivered; the other process takes the write lock before
			// the relay records it.
			mu.Lock()
			_, lockErr = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
			holding = lockErr == nil
			mu.Unlock()
		}
		return nil
	}}
	st := &lockFreedAfterBusy{Store: s, onBusy: release}
	r, err := New(st, e.config(map[string]Destination{"hooks": {Transport: rec.transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	rn.waitFor("the outcome to be recorded or dropped", func() bool {
		if rn.r.Stats().Unrecorded > 0 || e.get(m.ID) == nil {
			return true
		}
		e.clk.Advance(time.Second) // through the recorder's back-off
		return false
	})
	mu.Lock()
	if lockErr != nil || !freed {
		mu.Unlock()
		t.Fatalf("the other connection's lock: held %v, freed %v, error %v", holding, freed, lockErr)
	}
	mu.Unlock()
	if n := rn.r.Stats().Unrecorded; n != 0 {
		t.Errorf("%d outcome dropped as refused after another connection held the write lock past the lock wait", n)
	}
	rn.advance(time.Minute) // past the lease
	rn.advance(time.Minute)
	if got := rec.count(string(m.Payload)); got != 1 {
		t.Fatalf("message delivered %d times, want 1 (stats %+v)", got, rn.r.Stats())
	}
}
