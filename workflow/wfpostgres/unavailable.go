package wfpostgres

import (
	"errors"
	"fmt"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// userError is an error returned by a caller's function (an OnCommit
// function) on a connection that is still open: whatever it says (a
// timeout of its own HTTP call), it is the function's failure, not the
// database's absence.
type userError struct{ err error }

func (u userError) Error() string { return u.err.Error() }
func (u userError) Unwrap() error { return u.err }

// classify returns err, matching store.ErrUnavailable too when the
// database was out of reach, so that the engine tells the database's
// absence from a refusal.
func classify(err error) error {
	var u userError
	if err == nil || errors.As(err, &u) || !postgres.Unavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}
