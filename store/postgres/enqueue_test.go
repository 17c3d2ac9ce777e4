package postgres

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

func TestEnqueueSQLTx(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(s.Pool())
	defer db.Close()

	rolled := &outbox.Message{Destination: "d", Type: "t"}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnqueueSQLTx(ctx, tx, rolled); err != nil {
		t.Fatalf("EnqueueSQLTx: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, rolled.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rolled-back message: Get err = %v, want ErrNotFound", err)
	}

	a := &outbox.Message{Destination: "d", Stream: "s", Type: "t", Headers: map[string]string{"k": "v"},
		Ordering: outbox.OrderingRelease, ScheduledFor: time.Now().Add(-time.Minute)}
	b := &outbox.Message{Destination: "d", Stream: "s", Type: "t", Payload: []byte("x")}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnqueueSQLTx(ctx, tx, a, b); err != nil {
		t.Fatalf("EnqueueSQLTx: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if a.Seq == 0 || b.Seq <= a.Seq || a.Status != outbox.StatusStored {
		t.Fatalf("Seq %d, %d; Status %v: want increasing seqs and Stored", a.Seq, b.Seq, a.Status)
	}
	got, err := s.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Headers["k"] != "v" || got.Ordering != outbox.OrderingRelease || got.ScheduledFor.IsZero() {
		t.Fatalf("round trip: %+v", got)
	}

	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := s.EnqueueSQLTx(ctx, tx, &outbox.Message{Destination: "d"}); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("invalid message: err = %v", err)
	}
}

func TestEnqueueManyKeepsOrder(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(s.Pool())
	defer db.Close()
	for _, via := range []string{"Enqueue", "EnqueueSQLTx"} {
		ms := make([]*outbox.Message, enqueueChunk*2+7)
		for i := range ms {
			ms[i] = &outbox.Message{Destination: "d", Type: "t"}
		}
		if err := enqueueVia(ctx, s, db, via, ms); err != nil {
			t.Fatalf("%s: %v", via, err)
		}
		for i := 1; i < len(ms); i++ {
			if ms[i].Seq <= ms[i-1].Seq {
				t.Fatalf("%s: message %d has Seq %d after %d", via, i, ms[i].Seq, ms[i-1].Seq)
			}
		}
	}
}

func enqueueVia(ctx context.Context, s *Store, db *sql.DB, via string, ms []*outbox.Message) error {
	if via == "Enqueue" {
		return s.Enqueue(ctx, ms...)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := s.EnqueueSQLTx(ctx, tx, ms...); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func TestListenIsNotifiedOnInsert(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' schemas share the channel name: use a destination of
	// our own and wait for it.
	dest := "notify-" + s.n.outbox
	if err := s.Enqueue(ctx, &outbox.Message{Destination: dest, Type: "t"}, &outbox.Message{Destination: dest, Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO backstop_outbox (destination, type) VALUES ($1, 't')", dest+"-sql"); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{dest: true, dest + "-sql": true}
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for len(want) > 0 {
		select {
		case d, ok := <-ch:
			if !ok {
				t.Fatal("notification channel closed")
			}
			delete(want, d)
		case <-timeout.C:
			t.Fatalf("no notification for %v", want)
		}
	}
	cancel()
	for range ch { // closed once the listener stops
	}
}

func TestSubscribeWakesOnCommitAndOnRetryNow(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wake, err := s.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Destination: "subscribe", Type: "t"}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("no wake-up after a committed enqueue")
	}
	for drained := false; !drained; { // other tests' schemas share the channel
		select {
		case <-wake:
		default:
			drained = true
		}
	}
	if err := s.RetryNow(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-ctx.Done():
		t.Fatal("no wake-up after RetryNow")
	}
}
