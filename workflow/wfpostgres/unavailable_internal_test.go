package wfpostgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/store"
)

// classify marks the database's absence (store.ErrUnavailable), which the
// engine takes for a lost attempt, and leaves alone a refusal and the
// error of a caller's function on a live connection, which fail the task.
func TestClassify(t *testing.T) {
	killed := &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"killed connection", fmt.Errorf("finish: %w", killed), true},
		{"timeout", context.DeadlineExceeded, true},
		{"refusal", &pgconn.PgError{Code: "23505", Message: "duplicate key"}, false},
		{"an OnCommit function's timeout", userError{fmt.Errorf("POST /ledger: %w", context.DeadlineExceeded)}, false},
		{"none", nil, false},
	} {
		got := classify(c.err)
		if errors.Is(got, store.ErrUnavailable) != c.want {
			t.Errorf("%s: classify(%v) = %v; unavailable want %v", c.name, c.err, got, c.want)
		}
		if c.err != nil && !errors.Is(got, c.err) {
			t.Errorf("%s: classify(%v) = %v, which does not wrap the error", c.name, c.err, got)
		}
	}
}
