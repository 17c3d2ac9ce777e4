package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestOpenTransactionDoesNotDeadlockTheStore: while an application
// transaction begun on DB() is open (in this very goroutine), reading
// through the store goes on, and writing through it fails with ErrBusy
// after the lock wait instead of waiting for ever; inside the transaction
// EnqueueTx works, and once it commits the store writes again.
func TestOpenTransactionDoesNotDeadlockTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const wait = 300 * time.Millisecond
	s, err := Open(ctx, filepath.Join(t.TempDir(), "app.db"), store.Config{}, WithLockWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := &outbox.Message{Destination: "d", Type: "t"}
	if err := s.Enqueue(ctx, before); err != nil {
		t.Fatal(err)
	}

	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	inside := &outbox.Message{Destination: "d", Type: "t"}
	if err := s.EnqueueTx(ctx, tx, inside); err != nil {
		t.Fatal(err)
	}

	// reads do not wait for the open transaction
	if got, err := s.Get(ctx, before.ID); err != nil || got.ID != before.ID {
		t.Fatalf("Get while a transaction is open: %v, %v", got, err)
	}
	if _, err := s.DLQ().List(ctx, nil); err != nil {
		t.Fatalf("DLQ List while a transaction is open: %v", err)
	}
	if _, err := s.ScheduledBacklog(ctx); err != nil {
		t.Fatalf("ScheduledBacklog while a transaction is open: %v", err)
	}

	// writes fail after the lock wait, saying why
	start := time.Now()
	err = s.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"})
	took := time.Since(start)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "DB()") {
		t.Fatalf("Enqueue while a transaction is open: %v, want ErrBusy naming DB()", err)
	}
	if took < wait || took > wait+5*time.Second {
		t.Fatalf("Enqueue gave up after %s, want about %s", took, wait)
	}
	_, err = s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 1}})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("ProcessBatch while a transaction is open: %v, want ErrBusy", err)
	}

	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"}); err != nil {
		t.Fatalf("Enqueue after the commit: %v", err)
	}
	if got, err := s.Get(ctx, inside.ID); err != nil || got.ID != inside.ID {
		t.Fatalf("the message written in the transaction: %v, %v", got, err)
	}
}

// TestAnotherProcessHoldingTheLock: a second store on the same file (another
// process) holding the write lock makes writes fail with ErrBusy after the
// lock wait, and reads go on.
func TestAnotherProcessHoldingTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const wait = 300 * time.Millisecond
	path := filepath.Join(t.TempDir(), "shared.db")
	a, err := Open(ctx, path, store.Config{}, WithLockWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, path, store.Config{}, WithLockWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := &outbox.Message{Destination: "d", Type: "t"}
	if err := a.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	tx, err := b.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: b's process holds the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if got, err := a.Get(ctx, m.ID); err != nil || got.ID != m.ID {
		t.Fatalf("Get while another process writes: %v, %v", got, err)
	}
	start := time.Now()
	err = a.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"})
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Enqueue while another process holds the lock: %v, want ErrBusy", err)
	}
	if took := time.Since(start); took > wait+5*time.Second {
		t.Fatalf("Enqueue gave up after %s, want about %s", took, wait)
	}
}

// TestWritesTakeTheWriterInTurn: writes waiting for the store's one writer
// connection get it in the order they asked. database/sql hands a freed
// connection to a waiter at random, so under many concurrent writers some
// waited many times as long as the rest and could fail with ErrBusy while
// later ones went through.
func TestWritesTakeTheWriterInTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "app.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	held, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.withWriter(ctx, func(*sql.Tx) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held

	const writers = 12
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.withWriter(ctx, func(*sql.Tx) error {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		waitForWaiters(t, i+1) // the next asks only once this one waits
	}
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("writes took the writer in the order %v, want the order they asked", order)
		}
	}
}

// waitForWaiters waits until n goroutines the calling test started are
// parked waiting for the writer: for their turn, or (without turns) for
// database/sql's connection. Those of other tests, running in parallel,
// do not count.
func waitForWaiters(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	pc, _, _, _ := runtime.Caller(1)
	callerName := runtime.FuncForPC(pc).Name() // the goroutines' creator
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		waiting := 0
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "created by "+callerName) && strings.Contains(g, "(*Store).withWriter") && strings.Contains(g, "[select") &&
				(strings.Contains(g, "semaphore.(*Weighted).Acquire") || strings.Contains(g, "database/sql.(*DB).conn")) {
				waiting++
			}
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes waiting for the writer after 10 s, want %d", waiting, n)
		}
		runtime.Gosched()
	}
}

// TestInboxTransactionEndedByItsContextGivesTheWriterBack: a transaction
// from BeginTx whose context ends without Commit or Rollback (database/sql
// rolls it back) gives the store's writes their turn back.
func TestInboxTransactionEndedByItsContextGivesTheWriterBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "app.db"), store.Config{}, WithLockWait(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	txCtx, cancel := context.WithCancel(ctx)
	tx, err := s.BeginTx(txCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Enqueue(txCtx, &outbox.Message{Destination: "d", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"}); err != nil {
		t.Fatalf("Enqueue after the transaction's context ended: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback of a transaction its context ended: %v", err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"}); err != nil {
		t.Fatalf("Enqueue after a late Rollback: %v", err)
	}
}
