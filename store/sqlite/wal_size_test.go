package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestWALShrinksOnceALongReaderEnds: a connection of another process (an
// operator's sqlite3 shell, a backup, an application's report) holds a
// read transaction while messages are written, so no checkpoint can
// reset the -wal file and it grows with every write (SQLite's design).
// Once that reader ends, the next checkpoint resets the log; it must
// then give the disk back. Before, the file kept its largest size for
// as long as the store stayed open (50 MB of -wal written past the
// reader stayed 50 MB after more writes, and after thousands more; a reader held for an hour of
// traffic leaves gigabytes): SQLite reuses the log from its start but
// truncates it only under journal_size_limit, which the store did not
// set.
func TestWALShrinksOnceALongReaderEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := openTemp(t, store.Config{})
	walSize := func() int64 {
		t.Helper()
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	reader, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, s.sql("SELECT count(*) FROM {{prefix}}outbox")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	payload := []byte(`"` + strings.Repeat("x", 64<<10) + `"`)
	write := func(k int) {
		t.Helper()
		for i := range k {
			m := &outbox.Message{Destination: "d", Stream: fmt.Sprint("s", i%10), Type: "t", Payload: payload}
			if err := s.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(500) // 32 MB of payload, about 50 MB of log, while the reader holds its snapshot
	grown := walSize()
	if grown < 30<<20 {
		t.Fatalf("-wal is %d bytes with the reader open; the test wants it past 30 MB", grown)
	}
	if _, err := reader.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	// A write checkpoints the whole log (no reader holds it now); the
	// next one starts it over.
	write(20)
	if got := walSize(); got > walSizeLimit {
		t.Fatalf("-wal is %d bytes after the reader ended and the log was reset (%d with the reader); want at most %d",
			got, grown, walSizeLimit)
	}
}
