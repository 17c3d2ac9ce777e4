package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// TestFullDatabaseKeepsTheOutcome: the SQLite database fills up
// (max_page_count stands in for the disk) while messages are delivered;
// recording their failures, whose errors make the rows outgrow their page,
// needs room the database has not, though the relay's heart-beat, a write
// in place, goes through. The relay keeps the outcomes and records them
// once there is room, and delivers no message twice. Before, the store
// took the full database for a refusal of each outcome ("outcome not
// recorded"), the relay dropped them, and the messages were delivered
// again when their leases lapsed.
func TestFullDatabaseKeepsTheOutcome(t *testing.T) {
	e := newEnv(t)
	const n = 8
	for i := range n {
		e.enqueue(msg("hooks", fmt.Sprint("s", i), i))
	}
	limit := func(pages int64) error {
		_, err := e.s.DB().ExecContext(e.ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages))
		return err
	}
	// The database fills up while the message is being delivered.
	rec := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		var pages int64
		if err := e.s.DB().QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			return err
		}
		if err := limit(pages); err != nil {
			return err
		}
		// Recorded with the message: rows that outgrow their page.
		return errorhandling.Permanent(errors.New(strings.Repeat("rejected ", 250)))
	}}
	rn := e.start(e.config(map[string]Destination{"hooks": {Transport: rec.transport()}}))
	rn.waitFor("a recording to fail", func() bool {
		st := rn.r.Stats()
		return st.StoreErrors > 0 || st.Unrecorded > 0
	})
	if n := rn.r.Stats().Unrecorded; n != 0 {
		t.Fatalf("%d outcomes dropped as refused while the database was full", n)
	}

	if err := limit(1 << 30); err != nil {
		t.Fatal(err)
	}
	rn.waitFor("the outcomes to be recorded", func() bool {
		if len(e.deadLetters()) == n {
			return true
		}
		e.clk.Advance(time.Second) // through the recorder's back-off
		return false
	})
	if got := len(e.deadLetters()); got != n {
		t.Fatalf("%d dead letters once there was room, want %d (stats %+v)", got, n, rn.r.Stats())
	}
	rn.advance(time.Minute) // past the lease
	if got := len(rec.got()); got != n {
		t.Fatalf("%d deliveries of %d messages, want one each", got, n)
	}
}
