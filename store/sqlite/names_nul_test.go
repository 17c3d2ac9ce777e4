package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestPlainSQLNamesWithNULAreRefused: a row written by plain SQL whose
// stream held a NUL byte ('a' || char(0)) was taken: once its head was
// dead-lettered the strict stream stayed blocked for good, for no operator
// tool can name it (the admin API and the CLI refuse a name with a NUL, as
// PostgreSQL cannot keep one), and its dead letter showed the stream as
// "a", another stream. The outbox now refuses such a destination, stream
// or type, naming the columns, on insert and on update.
func TestPlainSQLNamesWithNULAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "nul.db"), store.Config{})
	for _, q := range []string{
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 'a' || char(0), 't')`,
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d' || char(0) || 'x', 's', 't')`,
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 's', char(0))`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("%s: %v, want it refused naming the NUL", q, err)
		}
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 'a', 'plain')`); err != nil {
		t.Fatalf("a row without NUL: %v", err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_outbox SET stream = 'a' || char(0) WHERE type = 'plain'`); err == nil ||
		!strings.Contains(err.Error(), "NUL") {
		t.Errorf("UPDATE of a stream to hold a NUL: %v, want it refused", err)
	}
	// plain SQL may write another control character: the API names it
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 'a' || char(1), 't')`); err != nil {
		t.Fatalf("a stream with a control character other than NUL: %v", err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Stream: "after", Type: "t"}); err != nil {
		t.Fatalf("Enqueue after the refused rows: %v", err)
	}
}
