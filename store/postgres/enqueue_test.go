package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	for _, c := range []struct {
		via string
		n   int
	}{{"Enqueue", 1}, {"Enqueue", enqueueChunk*2 + 7}, {"EnqueueSQLTx", 1}, {"EnqueueSQLTx", enqueueChunk*2 + 7}} {
		via := c.via
		ms := make([]*outbox.Message, c.n)
		for i := range ms {
			ms[i] = &outbox.Message{Destination: "d", Type: "t"}
			if i%3 == 1 { // an ordered row takes its seq in the ordering trigger
				ms[i].Stream = fmt.Sprintf("s%d", i%7)
			}
		}
		if err := enqueueVia(ctx, s, db, via, ms); err != nil {
			t.Fatalf("%s: %v", via, err)
		}
		for i := 1; i < len(ms); i++ {
			if ms[i].Seq <= ms[i-1].Seq {
				t.Fatalf("%s: message %d has Seq %d after %d", via, i, ms[i].Seq, ms[i-1].Seq)
			}
		}
		// What Enqueue reported is what was stored: each message's row has
		// the Seq, status and creation time it was given.
		for i, m := range ms {
			var (
				seq     int64
				status  int32
				created time.Time
			)
			if err := s.pool.QueryRow(ctx, `SELECT seq, status, created_at FROM backstop_outbox WHERE id = $1`,
				m.ID.String()).Scan(&seq, &status, &created); err != nil {
				t.Fatalf("%s: message %d: %v", via, i, err)
			}
			if seq != m.Seq || outbox.Status(status) != m.Status || !created.Equal(m.CreatedAt) {
				t.Fatalf("%s: message %d reported (%d, %d, %v), stored (%d, %d, %v)",
					via, i, m.Seq, m.Status, m.CreatedAt, seq, status, created)
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
	// A relay registers before it waits; inserts notify only then.
	if err := s.SetWaiting(ctx, "relay-1", true); err != nil {
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

// TestInsertsNotifyOnlyWhileSomeoneWaits: with no one registered as
// waiting (store.WakeGate) an insert sends no NOTIFY, so that committing
// writers do not queue on NOTIFY's lock; with someone registered it does.
// Notifications arrive in commit order, so once the last one is in, any
// that the unwatched inserts had sent would have arrived before it.
func TestInsertsNotifyOnlyWhileSomeoneWaits(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.Channel()}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// Other tests' schemas share the channel: our destinations carry our
	// table's name.
	dest := func(step string) string { return step + "-" + s.n.outbox }
	enqueue := func(step string) {
		t.Helper()
		if err := s.Enqueue(ctx, &outbox.Message{Destination: dest(step), Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func(on bool) {
		t.Helper()
		if err := s.SetWaiting(ctx, "relay-1", on); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("nobody-waits")
	waiting(true)
	waiting(true) // idempotent
	enqueue("waited-1")
	waiting(false)
	enqueue("no-longer-waited")
	waiting(true)
	enqueue("waited-2")
	mine := map[string]bool{dest("nobody-waits"): true, dest("waited-1"): true,
		dest("no-longer-waited"): true, dest("waited-2"): true}
	var got []string
	for len(got) == 0 || got[len(got)-1] != dest("waited-2") {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for notifications (got %v): %v", got, err)
		}
		if mine[n.Payload] {
			got = append(got, n.Payload)
		}
	}
	if want := []string{dest("waited-1"), dest("waited-2")}; !slices.Equal(got, want) {
		t.Fatalf("notified for %v, want %v", got, want)
	}
}
