package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
)

// lockBoundedStore opens a migrated store in a fresh schema whose
// connections give up on any lock after 20 s: a statement that would wait
// for the test's own open transaction fails instead of hanging the test.
func lockBoundedStore(t *testing.T) *Store {
	t.Helper()
	return migratedOn(t, schemaPoolWith(t, newSchema(t), 4, map[string]string{"lock_timeout": "20s"}))
}

// TestWriterDoesNotWaitForAClaimHoldingItsStream: a claim holds the rows
// of the streams it reads while it runs. An application's insert into such
// a stream goes through at once (before 0030 it waited for the claim to
// commit), and its message is claimed however the claim, which could not
// see it, then left the row: not ready, deleted (the stream looked empty),
// or with its head moved past the message (over a message of ordering
// none written after it). Both kinds of writer.
func TestWriterDoesNotWaitForAClaimHoldingItsStream(t *testing.T) {
	for _, w := range writers {
		for _, claimDid := range []struct{ name, sql string }{
			{"left it not ready", `UPDATE %[1]sstreams SET ready = false, wait_until = NULL WHERE stream = 'a'`},
			{"deleted it", `DELETE FROM %[1]sstreams WHERE stream = 'a'`},
			{"moved its head past", `UPDATE %[1]sstreams SET ready = false, wait_until = NULL,
				head_seq = (SELECT last_value + 1 FROM %[1]soutbox_seq_seq) WHERE stream = 'a'`},
		} {
			t.Run(w.name+", the claim "+claimDid.name, func(t *testing.T) {
				ctx := context.Background()
				s := lockBoundedStore(t)
				// A row with no message in its stream, as a claim finds
				// one it is about to delete or leave not ready.
				if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.qual+`streams (destination, stream) VALUES ('d', 'a')`); err != nil {
					t.Fatal(err)
				}

				// The "claim": holds a's row, as a claim reading the stream does.
				claim, err := s.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = claim.Rollback(ctx) }()
				if _, err := claim.Exec(ctx, `SELECT 1 FROM `+s.n.qual+`streams WHERE stream = 'a' FOR UPDATE`); err != nil {
					t.Fatal(err)
				}

				app, err := s.pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = app.Rollback(ctx) }()
				a3, err := w.write(ctx, s, app, "a")
				if err != nil {
					t.Fatalf("the application's insert while a claim holds its stream: %v", err)
				}
				if _, err := claim.Exec(ctx, fmt.Sprintf(claimDid.sql, s.n.qual)); err != nil {
					t.Fatal(err)
				}
				if err := claim.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if err := app.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if got := claimIDs(t, s); len(got["a"]) != 1 || got["a"][0] != a3 {
					t.Fatalf("claimed %v, want the application's message %v", got, a3)
				}
			})
		}
	}
}

// TestStreamWithoutRowGetsItBackFromItsWake: a wake-up for a stream that
// has no row while messages wait in it gives the stream its row back
// (the row a writer found held was deleted before it committed). While a
// writer of the stream is between its insert and its commit, the claim
// neither waits for it nor drops the wake-up; once it commits, the
// stream's messages are claimed in order.
func TestStreamWithoutRowGetsItBackFromItsWake(t *testing.T) {
	ctx := context.Background()
	s := lockBoundedStore(t)
	orphan := func(stream string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, `WITH d AS (DELETE FROM `+s.n.qual+`streams WHERE stream = $1)
			INSERT INTO `+s.n.qual+`stream_wakes (destination, stream, head_seq)
			SELECT 'd', $1, min(seq) FROM `+s.n.outbox+` WHERE stream = $1`, stream); err != nil {
			t.Fatal(err)
		}
	}
	wakes := func() int {
		t.Helper()
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.n.qual+`stream_wakes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	b1 := enqueueStream(t, s, "b")
	orphan("b")
	if got := claimIDs(t, s); len(got["b"]) != 1 || got["b"][0] != b1 {
		t.Fatalf("claimed %v, want b's message through its wake-up", got)
	}
	if n := wakes(); n != 0 {
		t.Fatalf("%d wake-ups left, want none", n)
	}

	a1 := enqueueStream(t, s, "a")
	orphan("a")
	app, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Rollback(ctx) }()
	a2, err := writers[0].write(ctx, s, app, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s); len(got["a"]) != 0 {
		t.Fatalf("claimed %v while a's writer is in its transaction, want nothing of a", got)
	}
	if n := wakes(); n != 1 {
		t.Fatalf("%d wake-ups left while a's writer is in its transaction, want a's", n)
	}
	if err := app.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s); len(got["a"]) != 2 || got["a"][0] != a1 || got["a"][1] != a2 {
		t.Fatalf("claimed %v, want a's two messages in order", got)
	}
	if n := wakes(); n != 0 {
		t.Fatalf("%d wake-ups left, want none", n)
	}
}

// TestWriterLowersAHeadMovedPastItsMessage: a claim may read the stream
// after a writer's message is numbered and before the writer's statement
// makes the stream ready, and move the head past it (over a message of
// ordering none written meanwhile). The writer, finding the row free, then
// lowers the head to its message, which is claimed. A trigger the test adds
// holds the writer's statement in that window.
func TestWriterLowersAHeadMovedPastItsMessage(t *testing.T) {
	ctx := context.Background()
	s := lockBoundedStore(t)
	for _, q := range []string{
		`INSERT INTO ` + s.n.qual + `streams (destination, stream) VALUES ('d', 'a')`,
		`CREATE FUNCTION ` + s.n.qual + `hold() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$`,
		`CREATE TRIGGER hold AFTER INSERT ON ` + s.n.outbox + ` FOR EACH ROW EXECUTE FUNCTION ` + s.n.qual + `hold()`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	gate, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Rollback(ctx) }()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_xact_lock(4242)`); err != nil {
		t.Fatal(err)
	}

	app, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Release()
	pid := app.Conn().PgConn().PID()
	done := make(chan error, 1)
	var a3 uuid.UUID
	go func() {
		done <- app.QueryRow(ctx, `INSERT INTO `+s.n.outbox+` (destination, stream, type, payload)
			VALUES ('d', 'a', 't', '{}') RETURNING id`).Scan(&a3)
	}()
	waitingOnLock(t, s.pool, pid) // numbered, its statement trigger not yet run

	// The "claim": moves a's head past the message, which it cannot see.
	if _, err := s.pool.Exec(ctx, `UPDATE `+s.n.qual+`streams SET ready = false, wait_until = NULL,
		head_seq = (SELECT last_value + 1 FROM `+s.n.qual+`outbox_seq_seq) WHERE stream = 'a'`); err != nil {
		t.Fatal(err)
	}
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s); len(got["a"]) != 1 || got["a"][0] != a3 {
		t.Fatalf("claimed %v, want the message %v", got, a3)
	}
}

// TestOneTransactionWritesToManyStreams: a transaction may write to any
// number of ordered streams. Writers take their turns on rows, which cost
// the server's lock table nothing; an advisory lock a stream (the first
// version of 0030) failed an insert into 20,000 streams with "out of
// shared memory" at the default max_locks_per_transaction.
func TestOneTransactionWritesToManyStreams(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var locks int
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('max_locks_per_transaction')::int *
		current_setting('max_connections')::int`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	n := 2*locks + 1000 // more than the whole lock table holds
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.outbox+` (destination, stream, type, payload)
		SELECT 'd', 's' || g, 't', '{}' FROM generate_series(1, $1) g`, n); err != nil {
		t.Fatalf("one statement writing to %d streams: %v", n, err)
	}
	var streams int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.n.qual+`streams WHERE ready`).Scan(&streams); err != nil {
		t.Fatal(err)
	}
	if streams != n {
		t.Fatalf("%d ready stream rows, want %d", streams, n)
	}
}

// TestSweepStreamTurns: the leader's sweep deletes the turn rows of
// streams with nothing left to deliver, and keeps those of streams with
// messages waiting (the claim takes one to give a stream its row back)
// and those a writer holds, without waiting for it. Each call visits a
// window of rows in key order from where the last one ended.
func TestSweepStreamTurns(t *testing.T) {
	ctx := context.Background()
	s := lockBoundedStore(t)
	turns := func() map[string]bool {
		t.Helper()
		rows, err := s.pool.Query(ctx, `SELECT stream FROM `+s.n.qual+`stream_turns`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			got[k] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	sweep := func(limit, want int) {
		t.Helper()
		n, err := s.SweepStreamTurns(ctx, limit)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("a sweep of %d visited %d rows, want %d", limit, n, want)
		}
	}
	held, done := enqueueStream(t, s, "a-held"), enqueueStream(t, s, "z-done")
	enqueueStream(t, s, "b-waiting")
	if got := claimIDs(t, s); len(got) != 3 {
		t.Fatalf("claimed %v, want the three heads", got)
	}
	deliver(t, s, done, held)
	app, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Rollback(ctx) }()
	if _, err := writers[0].write(ctx, s, app, "a-held"); err != nil {
		t.Fatal(err)
	}

	// Windows of one: a-held (a writer holds it), b-waiting, z-done.
	sweep(1, 1)
	sweep(1, 1)
	if got := turns(); len(got) != 3 {
		t.Fatalf("turn rows %v after two windows of one, want all three", got)
	}
	sweep(1, 1)
	if got := turns(); len(got) != 2 || !got["a-held"] || !got["b-waiting"] {
		t.Fatalf("turn rows %v after the third window, want z-done's deleted", got)
	}
	sweep(1, 0) // the end: the next goes round again
	sweep(10, 2)
	if got := turns(); len(got) != 2 {
		t.Fatalf("turn rows %v, want a-held's and b-waiting's kept", got)
	}
	if err := app.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	sweep(10, 2)
	if got := turns(); len(got) != 2 {
		t.Fatalf("turn rows %v after the writer committed, want both kept: their streams have messages", got)
	}
}

// TestWritersTakeTurnsWhileAClaimHoldsTheStream: two writers of a stream
// whose row a claim holds (so neither can hold it) still take turns: the
// second waits for the first to commit on the stream's turn row, and the
// stream's messages are claimed in commit order. Without the turn, the
// second would commit first and its message be claimed while the first's
// was still uncommitted, ahead of it.
func TestWritersTakeTurnsWhileAClaimHoldsTheStream(t *testing.T) {
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			ctx := context.Background()
			s := lockBoundedStore(t)
			enqueueStream(t, s, "s")
			if got := drainOrder(t, s); len(got) != 1 { // the turn row stays
				t.Fatalf("delivered %v, want the earlier message", got)
			}
			if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.qual+`streams (destination, stream) VALUES ('d', 's')`); err != nil {
				t.Fatal(err)
			}
			claim, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = claim.Rollback(ctx) }()
			if _, err := claim.Exec(ctx, `SELECT 1 FROM `+s.n.qual+`streams WHERE stream = 's' FOR UPDATE`); err != nil {
				t.Fatal(err)
			}
			t1, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = t1.Rollback(ctx) }()
			id1, err := w.write(ctx, s, t1, "s")
			if err != nil {
				t.Fatal(err)
			}
			c2, err := s.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Release()
			t2, err := c2.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			var id2 uuid.UUID
			go func() {
				var err error
				id2, err = w.write(ctx, s, t2, "s")
				if err == nil {
					err = t2.Commit(ctx)
				}
				done <- err
			}()
			waitingOnLock(t, s.pool, c2.Conn().PgConn().PID())
			if err := claim.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := drainOrder(t, s); len(got) != 0 {
				t.Fatalf("claimed %v while the stream's first writer was open", got)
			}
			if err := t1.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := drainOrder(t, s); len(got) != 2 || got[0] != id1 || got[1] != id2 {
				t.Fatalf("claimed %v, want %v then %v (commit order)", got, id1, id2)
			}
		})
	}
}
