package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// writer is one way an application writes a message of stream s inside
// its own transaction: Backstop's EnqueueTx, or plain SQL.
type writer struct {
	name  string
	write func(ctx context.Context, s *Store, tx pgx.Tx, stream string) (uuid.UUID, error)
}

var writers = []writer{
	{"EnqueueTx", func(ctx context.Context, s *Store, tx pgx.Tx, stream string) (uuid.UUID, error) {
		m := &outbox.Message{Destination: "d", Stream: stream, Type: "t", Payload: []byte("{}")}
		err := s.EnqueueTx(ctx, tx, m)
		return m.ID, err
	}},
	{"plain SQL", func(ctx context.Context, s *Store, tx pgx.Tx, stream string) (uuid.UUID, error) {
		var id uuid.UUID
		err := tx.QueryRow(ctx, `INSERT INTO `+s.n.outbox+` (destination, stream, type, payload)
			VALUES ('d', $1, 't', '{}') RETURNING id`, stream).Scan(&id)
		return id, err
	}},
}

// drainOrder claims and delivers everything, one instance, and returns the
// ids of stream in the order they were claimed.
func drainOrder(t *testing.T, s *Store) []uuid.UUID {
	t.Helper()
	var order []uuid.UUID
	b := &store.Batch{Instance: store.Instance{ID: "drain"}, Claim: store.ClaimRequest{Limit: 50}}
	for {
		r, err := s.ProcessBatch(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Claimed) == 0 {
			return order
		}
		b.Completions = b.Completions[:0]
		for _, m := range r.Claimed {
			order = append(order, m.ID)
			b.Completions = append(b.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
		}
	}
}

// waitingOnLock polls, with a deadline, until the backend pid waits for a
// lock (no signal tells it otherwise).
func waitingOnLock(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		err := pool.QueryRow(context.Background(),
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
	}
	t.Fatalf("backend %d never waited for the stream's lock", pid)
}

// TestInterleavedWritersKeepCommitOrder: T1 writes to a stream, T2 writes
// to it after and commits at once, T1 commits later. Without the stream
// lock T2's message would take the later seq but commit first, and a claim
// in between would deliver it before T1's. With it, T2 waits for T1: the
// claim order is the commit order. Every pairing of EnqueueTx and plain SQL.
func TestInterleavedWritersKeepCommitOrder(t *testing.T) {
	for _, w1 := range writers {
		for _, w2 := range writers {
			for _, earlier := range []bool{false, true} {
				name := w1.name + " then " + w2.name
				if earlier {
					// the stream's turn row is there already (0030)
					name += ", after a message delivered"
				}
				t.Run(name, func(t *testing.T) {
					ctx := context.Background()
					schema := newSchema(t)
					pool := schemaPool(t, schema, 4)
					s := migratedOn(t, pool)
					if earlier {
						enqueueStream(t, s, "s")
						if got := drainOrder(t, s); len(got) != 1 {
							t.Fatalf("delivered %v, want the earlier message", got)
						}
					}
					c1, err := pool.Acquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer c1.Release()
					c2, err := pool.Acquire(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer c2.Release()

					t1, err := c1.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					id1, err := w1.write(ctx, s, t1, "s")
					if err != nil {
						t.Fatal(err)
					}
					t2, err := c2.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					var committed []uuid.UUID // commit order
					var mu sync.Mutex
					done := make(chan error, 1)
					go func() {
						id2, err := w2.write(ctx, s, t2, "s")
						if err == nil {
							err = t2.Commit(ctx)
						}
						mu.Lock()
						committed = append(committed, id2)
						mu.Unlock()
						done <- err
					}()
					waitingOnLock(t, pool, c2.Conn().PgConn().PID())
					// While T1 is open its stream is not claimable.
					if got := drainOrder(t, s); len(got) != 0 {
						t.Fatalf("claimed %v while the stream's writer was open", got)
					}
					if err := t1.Commit(ctx); err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					committed = append([]uuid.UUID{id1}, committed...)
					mu.Unlock()
					if err := <-done; err != nil {
						t.Fatal(err)
					}
					got := drainOrder(t, s)
					if fmt.Sprint(got) != fmt.Sprint(committed) {
						t.Fatalf("claim order %v, commit order %v", got, committed)
					}
				})
			}
		}
	}
}

// TestRolledBackWriterReleasesTheStream: T2 waits for T1, T1 rolls back;
// T2's message is claimed alone.
func TestRolledBackWriterReleasesTheStream(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	pool := schemaPool(t, schema, 4)
	s := migratedOn(t, pool)
	t1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writers[0].write(ctx, s, t1, "s"); err != nil {
		t.Fatal(err)
	}
	c2, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Release()
	t2, err := c2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		id  uuid.UUID
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := writers[1].write(ctx, s, t2, "s")
		if err == nil {
			err = t2.Commit(ctx)
		}
		done <- result{id, err}
	}()
	waitingOnLock(t, pool, c2.Conn().PgConn().PID())
	if err := t1.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := drainOrder(t, s); len(got) != 1 || got[0] != r.id {
		t.Fatalf("claimed %v, want only %s", got, r.id)
	}
}

// TestManyWritersOneStreamCommitOrder: eight connections write to one
// stream at once, half with EnqueueTx and half with plain SQL, each taking
// a ticket from a sequence just before COMMIT. Tickets are taken under the
// stream's lock, so their order is the commit order; the claim order must
// follow it exactly.
func TestManyWritersOneStreamCommitOrder(t *testing.T) {
	ctx := context.Background()
	schema := newSchema(t)
	pool := schemaPool(t, schema, 10)
	s := migratedOn(t, pool)
	if _, err := pool.Exec(ctx, `CREATE SEQUENCE commit_ticket`); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 40
	var (
		mu     sync.Mutex
		ticket = map[uuid.UUID]int64{}
		wg     sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					// Other work first, then the message, so writers overlap.
					if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
						return err
					}
					id, err := writers[(w+i)%2].write(ctx, s, tx, "s")
					if err != nil {
						return err
					}
					var n int64
					if err := tx.QueryRow(ctx, `SELECT nextval('commit_ticket')`).Scan(&n); err != nil {
						return err
					}
					mu.Lock()
					ticket[id] = n
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := drainOrder(t, s)
	if len(got) != workers*each {
		t.Fatalf("claimed %d of %d", len(got), workers*each)
	}
	for i := 1; i < len(got); i++ {
		if ticket[got[i]] <= ticket[got[i-1]] {
			t.Fatalf("message %d was claimed after %d but committed before it (tickets %d, %d)",
				i, i-1, ticket[got[i]], ticket[got[i-1]])
		}
	}
}
