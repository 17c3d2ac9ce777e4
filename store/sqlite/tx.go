package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// busyRetries bounds how often a busy database is tried again, on top of
// SQLite's own busy_timeout wait.
const busyRetries = 8

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended
// code): another connection holds the lock; the operation can be retried.
func isBusy(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// retryBusy runs fn until it returns something other than a busy error,
// waiting a little longer each time, at most busyRetries times.
func retryBusy(ctx context.Context, fn func() error) error {
	wait := 10 * time.Millisecond
	for i := 0; ; i++ {
		err := fn()
		if err == nil || !isBusy(err) || i == busyRetries {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// withTx runs fn in a transaction on db (BEGIN IMMEDIATE through the DSN)
// and commits it; a busy database makes it start over, so fn must reset any
// state it builds.
func withTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	return retryBusy(ctx, func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}
