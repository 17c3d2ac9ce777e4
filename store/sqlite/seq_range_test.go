package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestPlainSQLSeqOutOfRange: a seq written by plain SQL below 1 was never
// claimed while its stream's later messages were delivered ahead of it,
// and a seq of 2^63-1 made every later insert, of any destination, fail
// with "database or disk is full". Both are refused, naming the column,
// and the store goes on writing and claiming.
func TestPlainSQLSeqOutOfRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "seq.db"), store.Config{})
	for _, q := range []string{
		`INSERT INTO backstop_outbox (seq, destination, stream, type) VALUES (-5, 'd', 's', 'negative')`,
		`INSERT INTO backstop_outbox (seq, destination, stream, type) VALUES (0, 'd', 's', 'zero')`,
		`INSERT INTO backstop_outbox (seq, destination, type) VALUES (9223372036854775807, 'd', 'max')`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "outbox.seq") {
			t.Errorf("%s: %v, want it refused naming outbox.seq", q, err)
		}
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_outbox (seq, destination, stream, type) VALUES (1000, 'd', 's', 'explicit')`); err != nil {
		t.Fatalf("a seq in range: %v", err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_outbox SET seq = -1 WHERE type = 'explicit'`); err == nil ||
		!strings.Contains(err.Error(), "outbox.seq") {
		t.Errorf("UPDATE of seq to -1: %v, want it refused naming outbox.seq", err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Stream: "s", Type: "after"},
		&outbox.Message{Destination: "e", Type: "other"}); err != nil {
		t.Fatalf("Enqueue after the refused rows: %v", err)
	}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range res.Claimed {
		got = append(got, m.Type)
	}
	if strings.Join(got, " ") != "explicit after other" {
		t.Fatalf("claimed %v, want explicit after other", got)
	}
}
