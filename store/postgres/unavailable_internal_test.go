package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

// What unavailable takes for the database's absence, not a verdict on the
// data: the relay keeps the outcomes of such a call, where it drops an
// outcome the store refused.
func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "53300", Message: "too many connections"}, true},
		{&pgconn.PgError{Code: "53100", Message: "could not extend file: No space left on device"}, true},
		{&pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}, true},
		{&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}, true},
		{&pgconn.PgError{Code: "25P03", Message: "terminating connection due to idle-in-transaction timeout"}, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{context.DeadlineExceeded, true},
		{&pgconn.PgError{Code: "22021", Message: "invalid byte sequence"}, false},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
		{&pgconn.PgError{Code: "40001"}, false},
		{errors.New("something else"), false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// The dead-letter queue's errors for want of the database match
// store.ErrUnavailable, so that the workflow engine tries a dead-letter
// add again while the database is away; a refusal does not.
func TestDeadLetterErrorsSayWhenTheDatabaseIsAway(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
	} {
		err := dlqErr("add", c.err)
		if got := errors.Is(err, store.ErrUnavailable); got != c.want || !errors.Is(err, c.err) {
			t.Errorf("dlqErr(add, %v) = %v: matches store.ErrUnavailable %v, want %v", c.err, err, got, c.want)
		}
	}
}

// What timedOut takes for a call that ran too long, which a smaller call
// may not (store.ErrTimedOut): a statement_timeout, or the call's own
// deadline; not a lock held past lock_timeout, which no size avoids.
func TestTimedOut(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}, true},
		{fmt.Errorf("query: %w", context.DeadlineExceeded), true},
		{&pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}, false},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, false},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
	} {
		if got := timedOut(c.err); got != c.want {
			t.Errorf("timedOut(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
