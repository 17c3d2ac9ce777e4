package relay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
)

// TestReadOnlyDatabaseKeepsTheOutcome: the SQLite database stops taking
// writes while messages are delivered (a file system remounted read-only
// after a disk error; PRAGMA query_only stands in for it, with the same
// SQLITE_READONLY). The relay keeps the outcomes and records them once
// writes are taken again, and delivers no message twice: the batch fails
// as a whole at its first write, which the relay takes as "try again",
// not as a refusal of each outcome (which would drop them, as a full
// disk once did: TestFullDatabaseKeepsTheOutcome).
func TestReadOnlyDatabaseKeepsTheOutcome(t *testing.T) {
	e := newEnv(t)
	const n = 8
	var ids []uuid.UUID
	for i := range n {
		m := msg("hooks", fmt.Sprint("s", i), i)
		e.enqueue(m)
		ids = append(ids, m.ID)
	}
	queryOnly := func(on int) error {
		_, err := e.s.DB().ExecContext(e.ctx, fmt.Sprintf("PRAGMA query_only = %d", on))
		return err
	}
	var once sync.Once
	var onErr error
	rec := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		// Delivered; the database takes no writes from the first delivery
		// on, until the test gives them back (once: a delivery still
		// running then must not take them again).
		once.Do(func() { onErr = queryOnly(1) })
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"hooks": {Transport: rec.transport()}}))
	rn.waitFor("a recording to fail", func() bool {
		st := rn.r.Stats()
		return st.StoreErrors > 0 || st.Unrecorded > 0
	})
	if onErr != nil {
		t.Fatal(onErr)
	}
	if n := rn.r.Stats().Unrecorded; n != 0 {
		t.Fatalf("%d outcomes dropped as refused while the database took no writes", n)
	}

	rec.mu.Lock()
	rec.fn = nil
	rec.mu.Unlock()
	if err := queryOnly(0); err != nil {
		t.Fatal(err)
	}
	rn.waitFor("the outcomes to be recorded", func() bool {
		left := 0
		for _, id := range ids {
			if e.get(id) != nil {
				left++
			}
		}
		if left == 0 {
			return true
		}
		e.clk.Advance(time.Second) // through the recorder's back-off
		return false
	})
	rn.advance(time.Minute) // past the lease
	if got := len(rec.got()); got != n {
		t.Fatalf("%d deliveries of %d messages, want one each (stats %+v)", got, n, rn.r.Stats())
	}
}
