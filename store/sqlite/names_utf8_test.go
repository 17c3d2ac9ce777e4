package sqlite

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/backstophq/backstop/store"
)

// TestPlainSQLNamesNotUTF8AreRefused: a row written by plain SQL whose
// stream was not valid UTF-8 (CAST(x'ff61' AS TEXT)) was taken. Every
// operator tool showed the stream as "\uFFFDa"; looking that name up said
// "no undelivered messages" and a release released 0 messages, while the
// strict stream, its head dead-lettered, held its other message back for
// good, and the name itself was refused as not UTF-8 (as PostgreSQL
// cannot keep it). The outbox now refuses such a destination, stream or
// type, on insert and on update; it takes every valid name, the test
// checks against utf8.ValidString.
func TestPlainSQLNamesNotUTF8AreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openAt(t, filepath.Join(t.TempDir(), "utf8.db"), store.Config{})
	for _, q := range []string{
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', CAST(x'ff61' AS TEXT), 't')`,
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES (CAST(x'64c3' AS TEXT), 's', 't')`,
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 's', CAST(x'eda080' AS TEXT))`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: %v, want it refused naming UTF-8", q, err)
		}
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 'a', 'plain')`); err != nil {
		t.Fatalf("a row in ASCII: %v", err)
	}
	if _, err := s.w.ExecContext(ctx, `UPDATE backstop_outbox SET stream = CAST(x'80' AS TEXT) WHERE type = 'plain'`); err == nil ||
		!strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("UPDATE of a stream to invalid UTF-8: %v, want it refused", err)
	}

	// Names of bytes drawn from the ones that make and break UTF-8: the
	// outbox takes a name exactly when Go finds it valid.
	bytes := []byte{'a', 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbd, 0xbe, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf,
		0xe0, 0xe1, 0xed, 0xee, 0xef, 0xf0, 0xf1, 0xf4, 0xf5, 0xff}
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{"é", "\uFFFD", "\uFFFE", "\uFFFF", "😀", "\U0010FFFF", "\xe0\x9f\xbf", "\xf4\x90\x80\x80", "\xc3\xa9\xa9", "\xc0\xaf", "\xef\xbf"}
	for range 3000 {
		b := make([]byte, 1+r.IntN(6))
		for i := range b {
			b[i] = bytes[r.IntN(len(bytes))]
		}
		names = append(names, string(b))
	}
	// One transaction: a refused insert ends its statement, not the
	// transaction.
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	insert, err := tx.PrepareContext(ctx, `INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', ?, 't')`)
	if err != nil {
		t.Fatal(err)
	}
	defer insert.Close()
	valid := 0
	for _, name := range names {
		_, err := insert.ExecContext(ctx, name)
		if want := utf8.ValidString(name); (err == nil) != want {
			t.Errorf("stream %x: insert %v, want it taken %v", name, err, want)
		} else if want {
			valid++
		}
	}
	if valid < 20 {
		t.Fatalf("only %d valid names were tried", valid)
	}
}
