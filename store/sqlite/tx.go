package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/backstophq/backstop/store"
)

// ErrBusy is matched (errors.Is) by the error of a store call that could
// not get the database's write lock (or, for an in-memory database, its
// one connection) within the store's lock wait (WithLockWait, 5 s by
// default): another transaction holds it, most often one an application
// began on DB() and has not ended, perhaps in the very goroutine that
// called the store. Such a call fails instead of waiting for ever.
var ErrBusy = errors.New("sqlite: database busy")

// defaultLockWait is how long a store call waits for the write lock by
// default; it is also SQLite's busy_timeout.
const defaultLockWait = 5 * time.Second

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended
// code): another connection holds the lock; the operation can be retried.
func isBusy(err error) bool {
	return hasCode(err, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
}

// isExhausted reports whether err is the database out of a resource
// (SQLITE_FULL: the disk, or max_page_count; SQLITE_IOERR; SQLITE_NOMEM;
// SQLITE_READONLY, writes refused for now, as by a file system remounted
// read-only after a disk error; any extended code): it says nothing of
// the statement's data, may have rolled the whole transaction back, and
// the call may be made again once the resource is back.
func isExhausted(err error) bool {
	return hasCode(err, sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_READONLY)
}

// isReadOnly reports whether err says the database cannot be written
// (SQLITE_READONLY), or could not be opened for writing (SQLITE_CANTOPEN:
// a read-only directory where the -wal and -shm files would be).
func isReadOnly(err error) bool {
	return hasCode(err, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN)
}

// hasCode reports whether err is an SQLite error with one of the primary
// codes (any extended code).
func hasCode(err error, codes ...int) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && slices.Contains(codes, e.Code()&0xff)
}

// retryBusy is retryBusyFor with the default lock wait.
func retryBusy(ctx context.Context, fn func() error) error {
	return retryBusyFor(ctx, defaultLockWait, fn)
}

// retryBusyFor runs fn until it returns something other than a busy error,
// waiting a little longer each time, for at most wait in all (SQLite's own
// busy_timeout waits inside each try). A busy error it gives up on is
// wrapped with ErrBusy, saying how long it waited.
func retryBusyFor(ctx context.Context, wait time.Duration, fn func() error) error {
	start := time.Now()
	pause := 10 * time.Millisecond
	for {
		err := fn()
		if err == nil || !isBusy(err) {
			return err
		}
		if time.Since(start)+pause > wait {
			return busyError(time.Since(start), err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// busyError says why a call gave up and what to do about it.
func busyError(waited time.Duration, cause error) error {
	return fmt.Errorf("%w: waited %s for the write lock, which another transaction holds (one begun on DB() "+
		"and still open, perhaps in this goroutine, or another process); inside your own transaction, "+
		"write with EnqueueTx: %w", ErrBusy, waited.Round(time.Millisecond), cause)
}

// beginner is a *sql.DB or a *sql.Conn.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTx runs fn in a transaction on db (BEGIN IMMEDIATE through the DSN)
// and commits it, once: a caller that starts over when the database is
// busy (retryBusyFor) must have fn reset any state it builds.
func inTx(ctx context.Context, db beginner, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return commit(tx)
}

// withWriter is inTx on the store's writer connection, waiting at most
// the store's lock wait for its turn among the store's writes, for the
// connection (an application transaction begun on DB() holds it until it
// ends) and for the write lock (another process's); past that it fails
// with ErrBusy.
func (s *Store) withWriter(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.readOnly {
		return ErrReadOnly
	}
	if err := s.fileGone(ctx); err != nil {
		return err
	}
	start := time.Now()
	if err := s.awaitTurn(ctx, start); err != nil {
		return err
	}
	defer s.turns.Release(1)
	return retryBusyFor(ctx, s.lockWait, func() error {
		acquire, cancel := context.WithTimeout(ctx, max(s.lockWait-time.Since(start), time.Millisecond))
		conn, err := s.w.Conn(acquire)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w: waited %s for the store's writer connection, which a transaction begun on "+
					"DB() still holds (perhaps in this goroutine); inside your own transaction, write with EnqueueTx",
					ErrBusy, time.Since(start).Round(time.Millisecond))
			}
			return err
		}
		defer conn.Close()
		return inTx(ctx, conn, fn)
	})
}

// awaitTurn waits, at most the lock wait since start, for the store's
// writes ahead of this one, in the order they asked: the writer is one
// connection, and database/sql hands a freed connection to any of its
// waiters at random, so under many concurrent writers some waited ten
// times as long as the rest (1,000 writers, 10 writes each: the slowest
// write 0.97 s where all of them took 1.5 s), and with a longer queue a
// write could fail with ErrBusy while others went through. A write holds
// its turn until it ends; release it with s.turns.Release(1).
func (s *Store) awaitTurn(ctx context.Context, start time.Time) error {
	wait, cancel := context.WithTimeout(ctx, s.lockWait)
	defer cancel()
	if err := s.turns.Acquire(wait, 1); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: waited %s behind the store's other writes for the writer connection, which a "+
			"transaction begun on DB() may hold (perhaps in this goroutine); inside your own transaction, write "+
			"with EnqueueTx", ErrBusy, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// commit commits tx, saying so in its error: a commit that fails (a full
// disk, an I/O error) otherwise came back as the bare "database or disk is
// full (13)", with nothing naming the store or the step.
func commit(tx *sql.Tx) error {
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

// Unreachable reports whether err, from one of the store's calls, came of
// another connection holding the database's lock past the store's wait,
// or of the database out of a resource, rather than of the call's data
// (store.Reachability): ErrBusy, SQLITE_BUSY or SQLITE_LOCKED, SQLITE_FULL
// (a full disk), SQLITE_IOERR, SQLITE_NOMEM or SQLITE_READONLY, or
// store.ErrUnavailable.
// The call may be made again as it is.
func (s *Store) Unreachable(err error) bool {
	return errors.Is(err, ErrBusy) || isBusy(err) || isExhausted(err) || errors.Is(err, store.ErrUnavailable)
}
